//! The config resolved from files as written: defaults, each key taken,
//! every problem named with its key and line.

use std::time::Duration;

use super::*;
use crate::server::Limits as ServerLimits;

fn resolve_config(text: &str) -> Result<Settings, ConfigError> {
    use clap::Parser;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tend.yaml");
    std::fs::write(&p, text).unwrap();
    let cli =
        crate::cli::Cli::parse_from(["tend", "diff", "-c", p.to_str().unwrap(), "--repo", "/x"]);
    resolve(&cli.command.flags())
}

#[test]
fn source_gc_has_defaults_takes_each_key_and_refuses_a_zero_budget_by_line() {
    let files = "targets:\n  files: {type: files, root: /srv}\n";
    let d = resolve_config(files).unwrap().source.gc;
    assert_eq!(d, crate::source::GcSpec::default());
    assert_eq!(d.grace, Duration::from_secs(14 * 86400));
    let s = resolve_config(&format!(
        "source:\n  gc: {{interval: 1h, grace: 2d, budget: 10s}}\n{files}"
    ))
    .unwrap()
    .source
    .gc;
    assert_eq!(s.interval, Duration::from_secs(3600));
    assert_eq!(s.grace, Duration::from_secs(2 * 86400));
    assert_eq!(s.budget, Duration::from_secs(10));
    let err = resolve_config(&format!("source:\n  gc:\n    budget: 0s\n{files}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("tend.yaml:3: source.gc.budget"), "{err}");
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tend.example.yaml"),
    )
    .unwrap();
    assert!(example.contains("gc: {interval: 24h, grace: 14d, budget: 1m}"));
}

#[test]
fn exec_targets_take_a_command_and_a_timeout_and_nothing_of_files() {
    let s =
        resolve_config("targets:\n  app: {type: exec, command: [/bin/plugin, --x], timeout: 5s}\n")
            .unwrap();
    match &s.targets[0].kind {
        TargetKind::Exec(c) => {
            assert_eq!(c.command, ["/bin/plugin", "--x"]);
            assert_eq!(c.timeout.0, Duration::from_secs(5));
        }
        other => panic!("{other:?}"),
    }
    let err = resolve_config("targets:\n  app: {type: exec, command: [p], root: /}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`root` does not apply to type exec"), "{err}");
    let err = resolve_config("targets:\n  f: {type: files, root: /, command: [sh]}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`command` does not apply to type files"),
        "{err}"
    );
    let err = resolve_config("targets:\n  app: {type: exec}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("type exec needs `command`"), "{err}");
}

#[test]
fn the_audit_log_bounds_default_and_parse() {
    let t = "targets:\n  f: {type: files, root: /}\n";
    let s = resolve_config(t).unwrap();
    assert_eq!(s.policy.audit_max, 64 << 20);
    assert_eq!(s.policy.audit_retention, Duration::from_secs(30 * 86400));
    let s = resolve_config(&format!(
        "{t}policy:\n  audit_max: 8MiB\n  audit_retention: 7d\n"
    ))
    .unwrap();
    assert_eq!(s.policy.audit_max, 8 << 20);
    assert_eq!(s.policy.audit_retention, Duration::from_secs(7 * 86400));
    for bad in ["lots", "0"] {
        let err = resolve_config(&format!("{t}policy:\n  audit_max: {bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tend.yaml:4: policy.audit_max"), "{err}");
    }
}

#[test]
fn hooks_are_a_command_an_http_call_or_a_signal_and_on_change_names_one() {
    let s = resolve_config(
        "targets:\n  files: {type: files, root: /}\nsource:\n  on_change: app\nhooks:\n  app: {http: {url: \"http://127.0.0.1:9/r\"}, timeout: 10s}\n  nginx: {signal: {pidfile: /run/nginx.pid}}\n  cmd: {run: [true]}\n",
    )
    .unwrap();
    assert_eq!(s.source.on_change.as_deref(), Some("app"));
    match &s.hooks["app"].action {
        HookAction::Http(h) => assert_eq!((h.port, h.method.as_str()), (9, "POST")),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.hooks["app"].timeout, Duration::from_secs(10));
    assert!(matches!(
        s.hooks["nginx"].action,
        HookAction::Signal {
            signal: rustix::process::Signal::HUP,
            ..
        }
    ));
    for (text, says) in [
        ("hooks:\n  a: {timeout: 5s}\n", "give one of"),
        (
            "hooks:\n  a: {run: [x], signal: {pidfile: /p}}\n",
            "only one of",
        ),
        (
            "hooks:\n  a:\n    http: {url: \"https://x/\"}\n",
            "tend.yaml:5: hooks.a.http: url",
        ),
        (
            "hooks:\n  a: {signal: {pidfile: /p, signal: BOOM}}\n",
            "unknown signal",
        ),
        (
            "hooks:\n  a: {run: [x]}\nsource:\n  on_change: b\n",
            "tend.yaml:6: source.on_change: hook \"b\" is not defined",
        ),
    ] {
        let with_target = format!("targets:\n  files: {{type: files, root: /}}\n{text}");
        let err = resolve_config(&with_target).unwrap_err().to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
}

#[test]
fn the_listener_limits_default_and_parse() {
    let t = "targets:\n  f: {type: files, root: /}\n";
    let s = resolve_config(t).unwrap();
    assert_eq!(s.server.limits, ServerLimits::default());
    let s = resolve_config(&format!(
        "{t}server:\n  max_connections: 32\n  header_timeout: 2s\n  request_timeout: 1m\n"
    ))
    .unwrap();
    assert_eq!(
        s.server.limits,
        ServerLimits {
            connections: 32,
            header_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(60),
        }
    );
    let err = resolve_config(&format!("{t}server:\n  max_connections: 0\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("tend.yaml:4: server.max_connections"), "{err}");
}

#[test]
fn a_link_is_set_on_the_files_target_by_config_or_flag() {
    let s = resolve_config(
        "targets:\n  files: {type: files, root: /srv, link: current, link_keep: 3}\n",
    )
    .unwrap();
    let TargetKind::Files(f) = &s.targets[0].kind else {
        panic!("{:?}", s.targets);
    };
    assert_eq!((f.link.as_deref(), f.link_keep), (Some("current"), Some(3)));
    let err = resolve_config("targets:\n  files: {type: files, root: /, link: a/b}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tend.yaml:2: targets.files.link: link"),
        "{err}"
    );
    let err = resolve_config("targets:\n  x: {type: exec, command: [p], link: current}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`link` does not apply to type exec"), "{err}");

    use clap::Parser;
    let cli = crate::cli::Cli::parse_from([
        "tend",
        "sync",
        "--repo",
        "/x",
        "--root",
        "/srv",
        "--link",
        "live",
        "--link-keep",
        "0",
    ]);
    let s = resolve(&cli.command.flags()).unwrap();
    let TargetKind::Files(f) = &s.targets[0].kind else {
        panic!("{:?}", s.targets);
    };
    assert_eq!(
        f.link(),
        Some(crate::target::files::Link {
            name: "live".into(),
            keep: 0
        })
    );
    let cli = crate::cli::Cli::parse_from([
        "tend",
        "sync",
        "--repo",
        "/x",
        "--root",
        "/srv",
        "--link-keep",
        "2",
    ]);
    let err = resolve(&cli.command.flags()).unwrap_err().to_string();
    assert!(err.contains("--link-keep: needs --link"), "{err}");
}

#[test]
fn unknown_key_names_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tend.yaml");
    std::fs::write(&p, "source:\n  repo: /x\n  intervall: 5m\n").unwrap();
    let err = load_file(&p).unwrap_err().to_string();
    assert!(
        err.contains("tend.yaml:3: source.intervall: unknown key"),
        "{err}"
    );
}

#[test]
fn ha_takes_a_cluster_an_election_and_a_lease_and_names_each_problem_by_line() {
    let t = "targets:\n  f: {type: files, root: /}\n";
    assert!(resolve_config(t).unwrap().ha.is_none());
    let s = resolve_config(&format!(
        "{t}ha:\n  etcd: {{endpoints: [\"http://127.0.0.1:2379\"]}}\n  election: tend/web\n  lease_ttl: 3s\n"
    ))
    .unwrap();
    let ha = s.ha.unwrap();
    assert_eq!(ha.election, "tend/web");
    assert_eq!(ha.lease_ttl, Duration::from_secs(3));
    assert_eq!(ha.etcd.endpoints, ["http://127.0.0.1:2379"]);
    let s = resolve_config(&format!(
        "{t}ha:\n  etcd: {{endpoints: [\"http://a:1\"]}}\n  election: e\n"
    ))
    .unwrap();
    assert_eq!(s.ha.unwrap().lease_ttl, Duration::from_secs(10));
    let err = resolve_config(&format!(
        "{t}ha:\n  etcd:\n    endpoints: [ftp://x]\n  election: ''\n  lease_ttl: 500ms\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tend.yaml:5: ha.etcd.endpoints: endpoint \"ftp://x\""),
        "{err}"
    );
    assert!(err.contains("tend.yaml:6: ha.election: is empty"), "{err}");
    assert!(err.contains("tend.yaml:7: ha.lease_ttl"), "{err}");
    let err = resolve_config(&format!(
        "{t}ha:\n  etcd: {{endpoints: [\"http://a:1\"], prefix: /x/}}\n  election: e\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("prefix"), "{err}");
}

#[test]
fn fleet_takes_a_cluster_a_lease_and_a_rollout_and_names_each_problem_by_line() {
    let t = "targets:\n  f: {type: files, root: /}\n";
    let s = resolve_config(&format!(
        "{t}fleet:\n  etcd: {{endpoints: [\"http://a:1\"]}}\n  rollout: {{canary: {{names: [web-1]}}}}\n"
    ))
    .unwrap();
    let fleet = s.fleet.unwrap();
    assert_eq!(fleet.lease_ttl, Duration::from_secs(10));
    let rollout = fleet.rollout.unwrap();
    assert_eq!((rollout.count, rollout.soak), (1, Duration::from_secs(300)));
    let err = resolve_config(&format!(
        "{t}fleet:\n  etcd: {{endpoints: [\"http://a:1\"]}}\n  lease_ttl: 1500ms\n  rollout: {{canary: {{count: 0}}}}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tend.yaml:5: fleet.lease_ttl: 1s 500ms must be whole seconds"),
        "{err}"
    );
    assert!(
        err.contains("fleet.rollout.canary.count: must be at least 1"),
        "{err}"
    );
}

//! SIGHUP on a running `tend run`: it keeps running, fetches at once, and
//! takes a changed config (source path, policy, hooks, log level) while
//! naming what needs a restart; a broken config is refused and the running
//! one kept.

mod util;

use std::process::Stdio;

use util::{wait_until, Daemon, Env};

const SIGHUP: i32 = 1;

fn site(env: &Env) {
    env.repo.write(
        "a/x.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a1\\n\"\n",
    );
    env.repo.write(
        "b/x.tend.yaml",
        "kind: file\npath: etc/b\ncontent: \"b1\\n\"\non_change: touch\n",
    );
    env.repo.commit("two hosts");
}

/// `tend run -c CONFIG` with no level or interval flag, so that the config
/// decides them; output in the state dir's daemon.log.
fn start(env: &Env, config: &std::path::Path) -> Daemon {
    let log = std::fs::File::create(env.state.path().join("daemon.log")).unwrap();
    let config = config.to_str().unwrap();
    let mut c = env.cmd(&["run", "--listen", "127.0.0.1:0", "-c", config]);
    c.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    Daemon {
        child: c.spawn().expect("start tend run"),
    }
}

fn running(d: &mut Daemon) -> bool {
    d.child.try_wait().unwrap().is_none()
}

#[test]
fn sighup_fetches_at_once_and_takes_a_changed_config() {
    let env = Env::new();
    site(&env);
    // An hour between polls: only SIGHUP can bring a new commit in soon.
    let cfg = env.config("source: {path: a, interval: 1h}\nlog: {level: info}\n");
    let mut d = start(&env, &cfg);
    assert!(
        wait_until(20, || env.at("etc/a").exists()),
        "{}",
        env.daemon_log()
    );

    env.repo.write(
        "a/x.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a2\\n\"\n",
    );
    env.repo.commit("a2");
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || std::fs::read_to_string(env.at("etc/a"))
            .ok()
            .as_deref()
            == Some("a2\n")),
        "{}",
        env.daemon_log()
    );
    assert!(running(&mut d), "{}", env.daemon_log());

    // Another path, a hook its declaration names, a prune limit that lets
    // the old host's one file go, a louder level; and a log format, which
    // only a restart can change.
    let hooked = env.state.path().join("hooked");
    std::fs::write(
        &cfg,
        format!(
            "source: {{path: b, interval: 1h}}\n\
             hooks: {{touch: {{run: [touch, {}]}}}}\n\
             policy: {{max_prune: 100%}}\n\
             log: {{level: debug, format: json}}\n",
            hooked.display()
        ),
    )
    .unwrap();
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || env.at("etc/b").exists()
            && !env.at("etc/a").exists()
            && hooked.exists()),
        "{}",
        env.daemon_log()
    );
    assert_eq!(env.read("etc/b"), "b1\n");
    let log = env.daemon_log();
    assert!(log.contains("config reloaded"), "{log}");
    assert!(
        log.contains("needs restart") && log.contains("log.format"),
        "{log}"
    );
    // The level changed (debug lines now), the format did not (no JSON).
    assert!(
        wait_until(10, || env.daemon_log().contains("DEBUG")),
        "{}",
        env.daemon_log()
    );
    assert!(!env.daemon_log().contains("{\"timestamp\""));
    assert!(running(&mut d), "{}", env.daemon_log());
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn a_broken_config_is_refused_and_the_running_one_kept() {
    let env = Env::new();
    site(&env);
    // A short resync: a hand edit right after tend's own write is taken
    // as its echo by the watcher, and left to the resync.
    let cfg = env.config("source: {path: a, interval: 1h}\npolicy: {resync: 2s}\n");
    let mut d = start(&env, &cfg);
    assert!(
        wait_until(20, || env.at("etc/a").exists()),
        "{}",
        env.daemon_log()
    );

    // A key that does not exist: refused, naming file and line.
    std::fs::write(
        &cfg,
        "source: {path: b, interval: 1h}\npolicy:\n  prune_all: true\n",
    )
    .unwrap();
    env.repo.write(
        "a/x.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a2\\n\"\n",
    );
    env.repo.commit("a2");
    d.signal(SIGHUP);
    // The running config (path a) still applies, and SIGHUP still fetched.
    assert!(
        wait_until(20, || std::fs::read_to_string(env.at("etc/a"))
            .ok()
            .as_deref()
            == Some("a2\n")),
        "{}",
        env.daemon_log()
    );
    let log = env.daemon_log();
    assert!(log.contains("config refused"), "{log}");
    assert!(
        log.contains("tend.yaml") && log.contains("prune_all"),
        "{log}"
    );
    assert!(!env.at("etc/b").exists());
    assert!(running(&mut d), "{log}");

    // A config that resolves but whose target cannot be opened (its root
    // would be under a file): refused whole.
    let under_a_file = env.sentinel.path().join("precious/site");
    std::fs::write(
        &cfg,
        format!(
            "source: {{path: b, interval: 1h}}\n\
             targets: {{site: {{type: files, root: {}}}}}\n",
            under_a_file.display()
        ),
    )
    .unwrap();
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || env.daemon_log().matches("config refused").count()
            >= 2),
        "{}",
        env.daemon_log()
    );
    assert!(env.daemon_log().contains("cannot create root"));
    // The pass that follows every SIGHUP (the third in all) has ended.
    assert!(
        wait_until(20, || env.daemon_log().matches("pass ended").count() >= 3),
        "{}",
        env.daemon_log()
    );
    // Drift is still corrected under the running config.
    std::fs::write(env.at("etc/a"), "hand edit\n").unwrap();
    assert!(
        wait_until(20, || env.read("etc/a") == "a2\n"),
        "{}",
        env.daemon_log()
    );
    assert!(!env.at("etc/b").exists());
    assert!(running(&mut d), "{}", env.daemon_log());
    assert_eq!(d.stop(10), Some(0));
}

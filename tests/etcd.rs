//! The etcd target against a real one-member etcd (Debian's etcd-server),
//! driven through the binary: keys created, updated, deleted and pruned;
//! a second pass writes nothing; fields others own survive; an unreachable
//! cluster is unknown and nothing is pruned; the daemon restores a key
//! changed with etcdctl, also after etcd restarts and after the watch's
//! revision was compacted away; TLS with a client certificate; a key
//! another writer keeps changing left Contested.

mod util;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use util::etcd::{self, Etcd};
use util::{can_run, wait_until, Env};

fn etcd_here() -> bool {
    can_run(
        etcd::installed(),
        "etcd and etcdctl are not installed (etcd-server, etcd-client)",
    )
}

/// A config with an etcd target `kv` on `/app/`, quiet daemon settings.
fn config(env: &Env, etcd: &Etcd) -> PathBuf {
    env.config(&format!(
        "targets:\n  kv:\n    type: etcd\n    endpoints: [{}]\n    prefix: /app/\n    timeout: 2s\npolicy:\n  resync: 1h\n",
        etcd.endpoint()
    ))
}

fn sync(env: &Env, cfg: &std::path::Path) -> util::Run {
    env.tend(&["sync", "-c", cfg.to_str().unwrap()])
}

#[test]
fn keys_are_created_updated_deleted_and_pruned() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    env.repo.write(
        "kv.tend.yaml",
        "kind: key\nkey: greeting\nvalue: hello\n---\nkind: key\nkey: conf/app.ini\nsource: app.ini\n---\nkind: key\nkey: feature/flags\njson: {beta: true, limit: 3}\n",
    );
    env.repo.write("app.ini", "[app]\nport = 80\n");
    env.repo.commit("keys");
    // Someone else's key under the prefix: never tend's to prune.
    etcd.put("/app/theirs", "kept");
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(etcd.get("/app/greeting").as_deref(), Some("hello"));
    assert_eq!(
        etcd.get("/app/conf/app.ini").as_deref(),
        Some("[app]\nport = 80\n")
    );
    let flags: serde_json::Value =
        serde_json::from_str(&etcd.get("/app/feature/flags").unwrap()).unwrap();
    assert_eq!(flags, serde_json::json!({"beta": true, "limit": 3}));

    env.repo.write(
        "kv.tend.yaml",
        "kind: key\nkey: greeting\nvalue: bonjour\n---\nkind: key\nkey: feature/flags\njson: {beta: false}\n",
    );
    env.repo.commit("app.ini dropped, the others changed");
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(etcd.get("/app/greeting").as_deref(), Some("bonjour"));
    let flags: serde_json::Value =
        serde_json::from_str(&etcd.get("/app/feature/flags").unwrap()).unwrap();
    assert_eq!(
        flags,
        serde_json::json!({"beta": false}),
        "a field no longer declared is removed"
    );
    assert_eq!(
        etcd.keys("/app/"),
        ["/app/feature/flags", "/app/greeting", "/app/theirs"]
    );
}

#[test]
fn a_second_pass_writes_nothing() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    let mut decls = String::new();
    for i in 0..50 {
        decls.push_str(&format!("kind: key\nkey: k/{i}\nvalue: v{i}\n---\n"));
    }
    decls.push_str("kind: key\nkey: j\njson: {a: {b: 1}}\n");
    env.repo.write("kv.tend.yaml", decls);
    env.repo.commit("keys");
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    let after_first = etcd.revision();
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(etcd.revision(), after_first, "the second pass wrote: {r:?}");
}

#[test]
fn undeclared_and_ignored_fields_of_a_json_value_survive() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    etcd.put(
        "/app/svc",
        r#"{"replicas": 5, "image": "old", "owner": "ops", "env": {"A": "1"}}"#,
    );
    env.repo.write(
        "kv.tend.yaml",
        "kind: key\nkey: svc\njson:\n  replicas: 2\n  image: new\n  env: {B: '2'}\nignore: [/spec/replicas]\n",
    );
    env.repo.commit("svc");
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    let live: serde_json::Value = serde_json::from_str(&etcd.get("/app/svc").unwrap()).unwrap();
    assert_eq!(
        live,
        serde_json::json!({"replicas": 5, "image": "new", "owner": "ops", "env": {"A": "1", "B": "2"}})
    );
}

#[test]
fn a_bad_key_declaration_names_its_file_and_line_and_nothing_is_written() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    env.repo.write(
        "kv.tend.yaml",
        "kind: key\nkey: ok\nvalue: x\n---\nkind: key\nkey: a//b\nvalue: y\n---\nkind: key\nkey: c\nvalue: z\njson: {}\n",
    );
    env.repo.commit("bad");
    let r = sync(&env, &cfg);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.all().contains("kv.tend.yaml:5"), "{r:?}");
    assert!(r.all().contains("kv.tend.yaml:9"), "{r:?}");
    assert!(r.all().contains("not several"), "{r:?}");
    assert_eq!(
        etcd.keys("/app/"),
        ["/app/ok"],
        "only the valid key is applied"
    );
}

#[test]
fn etcd_stopped_is_unknown_nothing_pruned_and_converged_when_back() {
    if !etcd_here() {
        return;
    }
    let mut etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    env.repo.write(
        "kv.tend.yaml",
        "kind: key\nkey: a\nvalue: one\n---\nkind: key\nkey: b\nvalue: two\n",
    );
    env.repo.commit("two keys");
    assert_eq!(sync(&env, &cfg).code, 0);
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: a\nvalue: uno\n");
    env.repo.commit("b dropped, a changed");
    etcd.kill();
    let r = sync(&env, &cfg);
    assert_ne!(r.code, 0, "an unreachable cluster is not converged: {r:?}");
    assert!(r.stdout.contains("0 applied, 0 pruned"), "{r:?}");
    assert!(
        r.stderr.contains("kv/key/a, kv/key/b"),
        "both are retried: {r:?}"
    );
    let status = env.tend(&["status"]);
    assert!(
        status.all().contains("etcd"),
        "status names why: {status:?}"
    );
    etcd.resume();
    assert_eq!(
        etcd.get("/app/a").as_deref(),
        Some("one"),
        "nothing was written"
    );
    assert_eq!(
        etcd.get("/app/b").as_deref(),
        Some("two"),
        "nothing was pruned"
    );
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(etcd.keys("/app/"), ["/app/a"]);
    assert_eq!(etcd.get("/app/a").as_deref(), Some("uno"));
}

#[test]
fn a_user_and_password_are_used_and_a_wrong_one_writes_nothing() {
    if !etcd_here() {
        return;
    }
    let mut etcd = Etcd::start();
    etcd.enable_auth("s3cret");
    let env = Env::new();
    let pass = env.state.path().join("etcd.pass");
    std::fs::write(&pass, "s3cret\n").unwrap();
    let block = |password_file: &std::path::Path| {
        format!(
            "targets:\n  kv:\n    type: etcd\n    endpoints: [{}]\n    prefix: /app/\n    timeout: 2s\n    auth: {{user: root, password_file: {}}}\n",
            etcd.endpoint(),
            password_file.display()
        )
    };
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: a\nvalue: one\n");
    env.repo.commit("a");
    let wrong = env.state.path().join("wrong.pass");
    std::fs::write(&wrong, "guess\n").unwrap();
    let cfg = env.config(&block(&wrong));
    let r = sync(&env, &cfg);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(etcd.get("/app/a"), None, "nothing is written without auth");
    let cfg = env.config(&block(&pass));
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(etcd.get("/app/a").as_deref(), Some("one"));
}

/// A daemon that polls and resyncs hourly: only its watch on the prefix
/// can explain a restore within seconds.
fn daemon(env: &Env, cfg: &std::path::Path) -> util::Daemon {
    env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()])
}

/// Puts `value` at `key` as another writer and waits for tend to restore
/// `want`; the time it took.
fn restored(etcd: &Etcd, key: &str, value: &str, want: &str) -> Option<Duration> {
    let start = Instant::now();
    etcd.put(key, value);
    wait_until(10, || etcd.get(key).as_deref() == Some(want)).then(|| start.elapsed())
}

#[test]
fn the_daemon_restores_a_key_changed_with_etcdctl() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: mode\nvalue: safe\n");
    env.repo.commit("mode");
    let _d = daemon(&env, &cfg);
    assert!(
        wait_until(15, || etcd.get("/app/mode").as_deref() == Some("safe")),
        "{}",
        env.daemon_log()
    );
    let took = restored(&etcd, "/app/mode", "reckless", "safe");
    assert!(took.is_some(), "not restored:\n{}", env.daemon_log());
    // Deleted by hand: made again.
    etcd.ctl(&["del", "/app/mode"]);
    assert!(
        wait_until(10, || etcd.get("/app/mode").as_deref() == Some("safe")),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn the_watch_comes_back_after_etcd_restarts_and_resyncs_after_a_compaction() {
    if !etcd_here() {
        return;
    }
    let mut etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: mode\nvalue: safe\n");
    env.repo.commit("mode");
    let d = daemon(&env, &cfg);
    assert!(
        wait_until(15, || etcd.get("/app/mode").as_deref() == Some("safe")),
        "{}",
        env.daemon_log()
    );

    // A restart under the running daemon: the watch is made again by itself.
    etcd.kill();
    etcd.resume();
    assert!(
        wait_until(20, || restored(&etcd, "/app/mode", "after-restart", "safe")
            .is_some()),
        "not restored after a restart:\n{}",
        env.daemon_log()
    );

    // The daemon stopped while etcd restarts, the key changes and history
    // is compacted: its watch cannot resume where it was, so it resyncs.
    d.signal(libc::SIGSTOP);
    etcd.kill();
    etcd.resume();
    etcd.put("/app/mode", "changed-while-away");
    for i in 0..5 {
        etcd.put("/app/other", &i.to_string());
    }
    etcd.compact();
    d.signal(libc::SIGCONT);
    assert!(
        wait_until(30, || etcd.get("/app/mode").as_deref() == Some("safe")),
        "not restored after a compaction:\n{}",
        env.daemon_log()
    );
    // The key may be put back by the pass that follows the watch going
    // down before the watch, reconnecting, is told of the compaction.
    assert!(
        wait_until(15, || env.daemon_log().contains("resyncing in full")),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn explain_finds_a_key_by_its_whole_name_or_relative_to_the_prefix() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = config(&env, &etcd);
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: feature/flags\nvalue: on\n");
    env.repo.commit("flags");
    assert_eq!(sync(&env, &cfg).code, 0);
    for what in ["/app/feature/flags", "feature/flags"] {
        let r = env.tend(&["explain", what, "-c", cfg.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{what}: {r:?}");
        assert!(r.stdout.contains("kv/key/feature/flags"), "{what}: {r:?}");
        assert!(r.stdout.contains("kv.tend.yaml"), "{what}: {r:?}");
    }
}

/// TLS: a member that serves clients over TLS and asks each for a
/// certificate. With the CA and a client certificate tend writes; with the
/// CA alone, or a CA that did not sign the server's, it writes nothing and
/// the key is Unknown.
#[test]
fn tls_with_a_client_certificate_writes_and_without_one_writes_nothing() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start_tls();
    let tls = etcd.tls_dir().unwrap().to_path_buf();
    let env = Env::new();
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: mode\nvalue: secure\n");
    env.repo.commit("mode");
    let with = |tls_block: &str| {
        env.config(&format!(
            "targets:\n  kv:\n    type: etcd\n    endpoints: [{}]\n    prefix: /app/\n    timeout: 2s\n    tls: {tls_block}\n",
            etcd.endpoint()
        ))
    };
    let p = |name: &str| tls.join(name).display().to_string();
    // No client certificate: the member refuses the handshake.
    let cfg = with(&format!("{{ca_file: {}}}", p("ca.pem")));
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(
        env.resource("kv/key/mode").unwrap()["state"],
        "Unknown",
        "{r:?}"
    );
    assert_eq!(etcd.get("/app/mode"), None);
    // A CA that did not sign the server's certificate: refused by tend.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(
        other.path().join("ca.pem"),
        std::fs::read(tls.join("client.pem")).unwrap(),
    )
    .unwrap();
    let cfg = with(&format!(
        "{{ca_file: {}, cert_file: {}, key_file: {}}}",
        other.path().join("ca.pem").display(),
        p("client.pem"),
        p("client.key")
    ));
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(etcd.get("/app/mode"), None);
    // The CA and the client's certificate: written.
    let cfg = with(&format!(
        "{{ca_file: {}, cert_file: {}, key_file: {}}}",
        p("ca.pem"),
        p("client.pem"),
        p("client.key")
    ));
    let r = sync(&env, &cfg);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(etcd.get("/app/mode").as_deref(), Some("secure"));
}

/// Another writer that keeps changing a key: tend restores it until the
/// contested threshold, then leaves it Contested and writes no more.
#[test]
fn a_key_another_writer_keeps_changing_becomes_contested_and_is_left_alone() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let env = Env::new();
    let cfg = env.config(&format!(
        "targets:\n  kv:\n    type: etcd\n    endpoints: [{}]\n    prefix: /app/\n    timeout: 2s\npolicy:\n  resync: 1h\n  contested: {{corrections: 3, window: 10m}}\n",
        etcd.endpoint()
    ));
    env.repo
        .write("kv.tend.yaml", "kind: key\nkey: mode\nvalue: safe\n");
    env.repo.commit("mode");
    let _d = daemon(&env, &cfg);
    assert!(
        wait_until(15, || etcd.get("/app/mode").as_deref() == Some("safe")),
        "{}",
        env.daemon_log()
    );
    let contested = wait_until(30, || {
        etcd.put("/app/mode", "theirs");
        std::thread::sleep(Duration::from_millis(200));
        env.resource("kv/key/mode")
            .is_some_and(|r| r["state"] == "Contested")
    });
    assert!(
        contested,
        "{:?}\n{}",
        env.resource("kv/key/mode"),
        env.daemon_log()
    );
    // Left alone from then on: the other writer's value stays, and tend
    // writes the key no more.
    etcd.put("/app/mode", "theirs, last");
    let before = etcd.history("/app/mode").len();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(etcd.get("/app/mode").as_deref(), Some("theirs, last"));
    assert_eq!(
        etcd.history("/app/mode").len(),
        before,
        "{:?}",
        etcd.history("/app/mode")
    );
}

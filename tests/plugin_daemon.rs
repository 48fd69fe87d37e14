//! `tend run` with the `replicas` plugin: a worker that dies is replaced
//! within seconds although the poll interval and the resync are an hour, so
//! only the plugin's `changed` notification can explain the recovery; and
//! the replacement happens exactly once.

mod util;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use util::plugins::{plugin, workers, Workers};
use util::{wait_until, Env};

fn replicas_env(count: u32) -> (Env, PathBuf, PathBuf, PathBuf) {
    let env = Env::new();
    env.repo.write(
        "web.tend.yaml",
        format!("kind: replicaset\nname: web\nspec:\n  replicas: {count}\n"),
    );
    env.repo.commit("init");
    let store = env.state.path().join("replicas");
    let log = env.state.path().join("starts.log");
    let worker = format!(
        "echo start $REPLICA_SLOT $$ >> {}; exec sleep 600",
        log.display()
    );
    let cfg = env.config(&format!(
        "targets:\n  svc:\n    type: exec\n    command: [{}, --dir, {}, --, /bin/sh, -c, {}]\npolicy:\n  resync: 1h\n",
        plugin("replicas"),
        store.display(),
        serde_json::to_string(&worker).unwrap(),
    ));
    (env, cfg, store, log)
}

fn starts(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("start "))
        .count()
}

fn kill(pid: i32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The starts logged once every earlier death has been handled, found by
/// killing one more of the `replicas` workers and waiting for its
/// replacement: the plugin reports deaths in the order it sees them and
/// tend handles a report after the earlier ones, so a second replacement
/// for an earlier death has started by then. The count leaves out the
/// start that replaced this last one.
fn starts_once_settled(env: &Env, store: &Path, log: &Path, replicas: usize) -> usize {
    let before = workers(store, "web");
    let n = starts(log);
    kill(before[0]);
    assert!(
        wait_until(30, || {
            let now = workers(store, "web");
            now.len() == replicas && !now.contains(&before[0]) && starts(log) > n
        }),
        "{} starts logged, {} were before the last kill:\n{}",
        starts(log),
        n,
        env.daemon_log()
    );
    starts(log) - 1
}

#[test]
fn a_killed_worker_is_replaced_once_by_notification_not_by_polling() {
    let (env, cfg, store, log) = replicas_env(3);
    let _workers = Workers(store.clone());
    let _d = env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(30, || workers(&store, "web").len() == 3
            && env
                .resource("svc/replicaset/web")
                .is_some_and(|r| r["state"] == "InSync")),
        "{}",
        env.daemon_log()
    );
    // A worker's pid is known before its shell has logged its start.
    assert!(
        wait_until(30, || starts(&log) >= 3),
        "{} starts logged",
        starts(&log)
    );
    assert_eq!(starts(&log), 3);
    let before = workers(&store, "web");
    kill(before[1]);
    let killed = Instant::now();
    assert!(
        wait_until(60, || {
            let now = workers(&store, "web");
            now.len() == 3 && !now.contains(&before[1])
        }),
        "{}",
        env.daemon_log()
    );
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(20), "recovery took {took:?}");
    assert!(
        wait_until(30, || starts(&log) >= 4),
        "{} starts logged",
        starts(&log)
    );
    assert_eq!(
        starts_once_settled(&env, &store, &log, 3),
        4,
        "exactly one replacement"
    );
    assert!(
        wait_until(30, || env
            .resource("svc/replicaset/web")
            .is_some_and(|r| r["state"] == "InSync")),
        "{}",
        env.daemon_log()
    );
    let audit = || std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    let web = |audit: &str| {
        audit
            .lines()
            .filter(|l| l.contains("svc/replicaset/web"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    // The last correction is recorded once its pass ends.
    assert!(wait_until(30, || web(&audit()).len() >= 3), "{}", audit());
    let lines = web(&audit());
    assert_eq!(
        lines.len(),
        3,
        "one create, one correction per death: {}",
        audit()
    );
    assert!(lines[1].contains("/spec/replicas"), "{}", lines[1]);
    assert!(lines[2].contains("/spec/replicas"), "{}", lines[2]);
}

#[test]
fn a_plugin_killed_while_idle_is_restarted_and_notifies_again() {
    let (env, cfg, store, log) = replicas_env(2);
    let _workers = Workers(store.clone());
    let _d = env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(30, || workers(&store, "web").len() == 2),
        "{}",
        env.daemon_log()
    );
    let plugin_pid = || -> Option<i32> {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &format!("replicas --dir {}", store.display())])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
    };
    let first = plugin_pid().expect("the plugin runs");
    kill(first);
    // tend restarts it (after its backoff) without waiting for a resync.
    assert!(
        wait_until(30, || plugin_pid().is_some_and(|p| p != first)),
        "{}",
        env.daemon_log()
    );
    assert!(wait_until(30, || env
        .resource("svc/replicaset/web")
        .is_some_and(|r| r["state"] == "InSync")));
    // The new instance watches the old workers: a death is still noticed.
    let before = workers(&store, "web");
    kill(before[0]);
    assert!(
        wait_until(30, || {
            let now = workers(&store, "web");
            now.len() == 2 && !now.contains(&before[0])
        }),
        "{}",
        env.daemon_log()
    );
    assert!(
        wait_until(30, || starts(&log) >= 3),
        "{} starts logged",
        starts(&log)
    );
    assert_eq!(
        starts_once_settled(&env, &store, &log, 2),
        3,
        "two at creation, one replacement"
    );
}

#[test]
fn a_notification_before_the_first_revision_does_not_wedge_the_resource() {
    let (env, cfg, store, log) = replicas_env(2);
    let _workers = Workers(store.clone());
    // A pid file of a worker long gone: the plugin announces it at once.
    std::fs::create_dir_all(store.join("web")).unwrap();
    std::fs::write(store.join("web/0.pid"), "4194300 1\n").unwrap();
    // The remote is away, so no revision is loaded when the announcement
    // arrives.
    let away = env.repo.path().with_extension("away");
    std::fs::rename(env.repo.path(), &away).unwrap();
    let _d = env.daemon(&["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(20, || env.daemon_log().contains("fetch failed")
            && env.daemon_log().contains("announced exits of web")),
        "{}",
        env.daemon_log()
    );
    std::fs::rename(&away, env.repo.path()).unwrap();
    assert!(
        wait_until(30, || workers(&store, "web").len() == 2),
        "{}",
        env.daemon_log()
    );
    let before = workers(&store, "web");
    kill(before[0]);
    assert!(
        wait_until(20, || {
            let now = workers(&store, "web");
            now.len() == 2 && !now.contains(&before[0])
        }),
        "the notification must still lead to a correction: {}",
        env.daemon_log()
    );
    assert!(
        wait_until(30, || starts(&log) >= 3),
        "{} starts logged",
        starts(&log)
    );
    assert_eq!(starts_once_settled(&env, &store, &log, 2), 3);
}

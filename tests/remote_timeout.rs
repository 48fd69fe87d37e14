//! `source.timeout` against remotes that accept the connection and never
//! answer: the fetch is abandoned at the timeout, `sync` exits 2 saying so,
//! and the last good revision stays applied, for `sync` and for the daemon.

mod util;

use std::time::{Duration, Instant};

use util::secrets::Canary;
use util::servers::{remote_daemon, run_remote, BlackHole};
use util::sshd::SshServer;
use util::{wait_until, Env};

#[test]
fn a_remote_that_never_answers_is_abandoned_at_the_timeout() {
    let hole = BlackHole::start();
    let canary = Canary::new();
    let known = canary.file("known_hosts", "");
    let cfg_text = format!("source:\n  auth:\n    known_hosts: {}\n", known.display());
    let urls = [
        format!(
            "https://tend:{}@127.0.0.1:{}/ops.git",
            canary.value(),
            hole.port
        ),
        format!("http://127.0.0.1:{}/ops.git", hole.port),
        format!(
            "ssh://git:{}@127.0.0.1:{}/srv/ops.git",
            canary.value(),
            hole.port
        ),
    ];
    // One env each, side by side: three hung fetches take one timeout.
    std::thread::scope(|scope| {
        let handles: Vec<_> = urls
            .iter()
            .map(|url| {
                let cfg_text = &cfg_text;
                scope.spawn(move || {
                    let env = Env::new();
                    let cfg = env.config(cfg_text);
                    let started = Instant::now();
                    let run = run_remote(&env, url, Some(&cfg), &["sync", "--timeout", "2s"]);
                    (env, run, started.elapsed())
                })
            })
            .collect();
        for (url, handle) in urls.iter().zip(handles) {
            let (env, run, took) = handle.join().unwrap();
            assert_eq!(run.code, 2, "{url}: {run:?}");
            assert!(
                run.stderr
                    .contains("no answer within 2s; nothing was changed"),
                "{url}: {run:?}"
            );
            assert!(
                took >= Duration::from_millis(1900) && took < Duration::from_secs(20),
                "{url}: gave up after {took:?}"
            );
            let error = env.status()["source"]["last_fetch_error"].clone();
            assert!(
                error
                    .as_str()
                    .is_some_and(|e| e.contains("no answer within 2s")),
                "{url}: {error}"
            );
            canary.assert_not_in_run(url, &run);
            canary.assert_not_stored(&env);
        }
    });
    assert!(
        *hole.accepted.lock().unwrap() >= 3,
        "the remotes were reached"
    );
}

/// A repository served over ssh, synced once: `motd` holds "v1".
fn synced_once() -> Option<(Env, SshServer, Canary, std::path::PathBuf, String)> {
    let server = SshServer::start()?;
    let env = Env::new();
    env.repo
        .write(
            "motd.tend.yaml",
            "kind: file\npath: etc/motd\nsource: motd\n",
        )
        .write("motd", "v1\n");
    let good = env.repo.commit("v1");
    let secrets = Canary::new();
    let known = secrets.file("known_hosts", &server.known_hosts_line());
    let cfg = env.config(&format!(
        "source:\n  auth:\n    ssh_key: {}\n    known_hosts: {}\n",
        server.client_key().display(),
        known.display()
    ));
    let run = run_remote(&env, &server.url(env.repo.path()), Some(&cfg), &["sync"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(env.read("etc/motd"), "v1\n");
    env.repo.write("motd", "v2\n");
    env.repo.commit("v2");
    server.set_hung(true);
    Some((env, server, secrets, cfg, good))
}

#[test]
fn sync_against_a_hung_remote_keeps_the_last_good_revision() {
    let Some((env, server, _secrets, cfg, good)) = synced_once() else {
        return;
    };
    let url = server.url(env.repo.path());
    let started = Instant::now();
    let run = run_remote(&env, &url, Some(&cfg), &["sync", "--timeout", "2s"]);
    let took = started.elapsed();
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!(
        "no answer within 2s; nothing was changed, revision {} stays applied",
        &good[..12]
    );
    assert!(run.stderr.contains(&expected), "{run:?}");
    assert!(took < Duration::from_secs(20), "gave up after {took:?}");
    assert_eq!(env.read("etc/motd"), "v1\n", "the last good state stays");
    let source = env.status()["source"].clone();
    assert_eq!(source["applied_revision"], good.as_str(), "{source}");
    assert!(source["last_fetch_error"]
        .as_str()
        .is_some_and(|e| e.contains("no answer within 2s")));
}

#[test]
fn the_daemon_rides_out_a_hung_remote_and_catches_up() {
    let Some((env, server, _secrets, cfg, _good)) = synced_once() else {
        return;
    };
    let url = server.url(env.repo.path());
    let mut daemon = remote_daemon(
        &env,
        &url,
        Some(&cfg),
        &["--timeout", "2s", "--interval", "1s"],
    );
    let gave_up = wait_until(30, || env.daemon_log().contains("no answer within 2s"));
    assert!(gave_up, "{}", env.daemon_log());
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon keeps running"
    );
    assert_eq!(env.read("etc/motd"), "v1\n", "the last good state stays");

    server.set_hung(false);
    let caught_up = wait_until(30, || {
        std::fs::read_to_string(env.at("etc/motd")).is_ok_and(|t| t == "v2\n")
    });
    let code = daemon.stop(20);
    assert!(caught_up, "{}", env.daemon_log());
    assert_eq!(code, Some(0), "{}", env.daemon_log());
}

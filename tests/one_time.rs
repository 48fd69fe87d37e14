//! Init containers and one-time runs: `--max-failures` (git-sync's: the
//! consecutive failed fetches allowed before giving up), and `tend sync
//! --link` filling a volume before the application starts.

mod util;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use util::{tend_cmd, wait_until, Env};

/// `tend sync` against `repo` (not the env's own), into the env's root.
fn sync_from(env: &Env, repo: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut c = tend_cmd();
    c.arg("sync")
        .args(args)
        .arg("--repo")
        .arg(repo)
        .arg("--root")
        .arg(env.root())
        .arg("--state-dir")
        .arg(env.state.path());
    c
}

/// Starts `c` (its stderr piped) and reads its log lines on a thread, to
/// the end: the daemon's log pipe never closes on it.
fn spawn_logged(mut c: std::process::Command) -> (util::Daemon, std::sync::mpsc::Receiver<String>) {
    let mut d = util::Daemon {
        child: c.spawn().unwrap(),
    };
    let stderr = BufReader::new(d.child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (d, rx)
}

#[test]
fn sync_retries_a_failing_fetch_as_often_as_allowed_then_exits_2() {
    let env = Env::new();
    let missing = env.state.path().join("not-there");
    let out = sync_from(&env, &missing, &["--max-failures", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("attempt 1 of 3"), "{stderr}");
    assert!(stderr.contains("attempt 2 of 3"), "{stderr}");
    assert!(!stderr.contains("attempt 3 of 3"), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    // Without it (the default, 0): one attempt, no retry.
    let out = sync_from(&env, &missing, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("retrying"), "{stderr}");
}

#[test]
fn sync_succeeds_when_the_remote_comes_up_within_the_failures_allowed() {
    let env = Env::new();
    env.repo.write("site/index.html", "hello\n");
    env.repo.commit("v1");
    let later = env.state.path().join("repo-later");
    let mut child = sync_from(&env, &later, &["--mirror", "--path", "site"])
        .env("TEND_MAX_FAILURES", "5")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let first_failure = line.contains("attempt 1 of 6");
        seen.push(line);
        if first_failure {
            // The remote appears while tend waits to retry.
            std::os::unix::fs::symlink(env.repo.path(), &later).unwrap();
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{seen:?}");
    assert_eq!(env.read("index.html"), "hello\n");
}

#[test]
fn run_gives_up_after_the_failures_allowed_when_nothing_was_ever_applied() {
    let env = Env::new();
    let missing = env.state.path().join("not-there");
    let mut c = tend_cmd();
    c.args(["run", "--listen", "127.0.0.1:0", "--max-failures", "2"])
        .arg("--repo")
        .arg(&missing)
        .arg("--root")
        .arg(env.root())
        .arg("--state-dir")
        .arg(env.state.path())
        .stderr(Stdio::piped());
    let mut d = util::Daemon {
        child: c.spawn().unwrap(),
    };
    let mut status = None;
    assert!(wait_until(60, || {
        status = d.child.try_wait().unwrap();
        status.is_some()
    }));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut d.child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.unwrap().code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("3 consecutive fetches failed (max_failures 2)"),
        "{stderr}"
    );
}

#[test]
fn run_keeps_serving_the_last_good_state_once_a_revision_was_applied() {
    let env = Env::new();
    env.repo.write("site/index.html", "hello\n");
    env.repo.commit("v1");
    let repo = env.state.path().join("repo");
    std::os::unix::fs::symlink(env.repo.path(), &repo).unwrap();
    let out = sync_from(&env, &repo, &["--mirror", "--path", "site"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The remote goes away; failures beyond the limit do not end a daemon
    // that has applied a revision before.
    std::fs::remove_file(&repo).unwrap();
    let mut c = tend_cmd();
    c.args(["run", "--listen", "127.0.0.1:0", "--max-failures", "0"])
        .args(["--mirror", "--path", "site", "--log-level", "info"])
        .arg("--repo")
        .arg(&repo)
        .arg("--root")
        .arg(env.root())
        .arg("--state-dir")
        .arg(env.state.path())
        .stderr(Stdio::piped());
    let (mut d, rx) = spawn_logged(c);
    let mut failures = 0;
    let mut log = Vec::new();
    while failures < 3 {
        let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(60)) else {
            break;
        };
        if line.contains("fetch failed") {
            failures += 1;
        }
        log.push(line);
    }
    assert!(failures >= 3, "{log:?}");
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "the daemon gave up: {log:?}"
    );
    assert_eq!(env.read("index.html"), "hello\n");
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn sync_with_a_link_fills_an_empty_volume_for_the_sidecar_to_carry_on() {
    let env = Env::new();
    env.repo.write("site/index.html", "hello\n");
    env.repo.write("site/css/site.css", "body {}\n");
    let v1 = env.repo.commit("v1");
    // The init container: an empty volume, not even its directory yet.
    let volume = env.root().join("volume");
    let out = tend_cmd()
        .args(["sync", "--mirror", "--path", "site", "--link", "current"])
        .arg("--repo")
        .arg(env.repo.path())
        .arg("--root")
        .arg(&volume)
        .arg("--state-dir")
        .arg(env.state.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let link = std::fs::read_link(volume.join("current")).unwrap();
    assert_eq!(link.to_str().unwrap(), format!(".tend/revs/{v1}"));
    assert_eq!(
        std::fs::read_to_string(volume.join("current/index.html")).unwrap(),
        "hello\n"
    );
    // The sidecar starts on the same volume and state: nothing to write,
    // no new tree.
    let audit = env.state.path().join("audit.jsonl");
    let before = std::fs::read_to_string(&audit).unwrap();
    let mut c = tend_cmd();
    c.args(["run", "--listen", "127.0.0.1:0", "--interval", "1h"])
        .args(["--mirror", "--path", "site", "--link", "current"])
        .arg("--repo")
        .arg(env.repo.path())
        .arg("--root")
        .arg(&volume)
        .arg("--state-dir")
        .arg(env.state.path())
        .stderr(Stdio::piped());
    let (mut d, rx) = spawn_logged(c);
    let mut log = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(60)) {
        let ready = line.contains("first pass ended");
        log.push(line);
        if ready {
            break;
        }
    }
    assert!(
        log.iter().any(|l| l.contains("first pass ended")),
        "{log:?}"
    );
    assert_eq!(std::fs::read_to_string(&audit).unwrap(), before, "{log:?}");
    let trees: Vec<_> = std::fs::read_dir(volume.join(".tend/revs"))
        .unwrap()
        .collect();
    assert_eq!(trees.len(), 1);
    assert_eq!(d.stop(10), Some(0));
}

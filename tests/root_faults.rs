//! Roots given or made awkward for real: a relative `--root`, a root
//! remounted read-only under a prune. Drift is still seen as it happens, and
//! what fails for a while is retried, not held for the next full pass.

mod util;

use std::path::{Path, PathBuf};

use util::{wait_until, Daemon, Env};

fn site(env: &Env) {
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a1\\n\"\n---\nkind: file\npath: etc/b\ncontent: \"b1\\n\"\n",
    );
    env.repo.commit("init");
}

/// `tend run` in `cwd` with exactly these arguments, logging to the state dir.
fn daemon_in(env: &Env, cwd: &Path, args: &[&str]) -> Daemon {
    let log = std::fs::File::create(env.state.path().join("daemon.log")).unwrap();
    let child = util::tend_cmd()
        .current_dir(cwd)
        .args(["run", "--listen", "127.0.0.1:0", "--repo", &env.repo.url()])
        .arg("--state-dir")
        .arg(env.state.path())
        .args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Daemon { child }
}

#[test]
fn a_relative_root_is_watched_like_any_other() {
    let env = Env::new();
    site(&env);
    let cwd = env.root();
    let cfg = env.config("policy:\n  resync: 1h\n");
    let _d = daemon_in(
        &env,
        cwd,
        &[
            "--root",
            "rel/dir",
            "--interval",
            "1h",
            "-c",
            cfg.to_str().unwrap(),
        ],
    );
    let file: PathBuf = cwd.join("rel/dir/etc/a");
    assert!(
        wait_until(20, || env.status()["counts"]["InSync"] == 2),
        "{}",
        env.daemon_log()
    );
    assert!(wait_until(20, || env.status()["watcher"]
        .as_str()
        .is_some_and(|w| w.starts_with("watching"))));
    std::fs::write(&file, "edited\n").unwrap();
    assert!(
        wait_until(10, || std::fs::read_to_string(&file).unwrap() == "a1\n"),
        "the hand edit stays: {}",
        env.daemon_log()
    );
}

/// A directory bind-mounted on itself, so it is a mount of its own whose
/// flags can be changed under a running daemon (its open handles included);
/// unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn bind(dir: &Path) -> Option<Mounted> {
        let ok = std::process::Command::new("mount")
            .arg("--bind")
            .arg(dir)
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mounted(dir.to_path_buf()))
    }

    fn remount(&self, flags: &str) -> bool {
        std::process::Command::new("mount")
            .args(["-o", &format!("remount,{flags},bind")])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_prune_that_fails_on_a_read_only_root_is_retried_once_it_is_writable() {
    if !util::can_run(
        rustix::process::geteuid().is_root(),
        "a read-only bind mount needs root",
    ) {
        return;
    }
    let env = Env::new();
    site(&env);
    let Some(mount) = Mounted::bind(env.root()) else {
        util::can_run(false, "cannot bind-mount here");
        return;
    };
    let cfg = env.config("policy:\n  resync: 1h\n");
    let _d = env.daemon(&["--interval", "1s", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(20, || env.status()["counts"]["InSync"] == 2),
        "{}",
        env.daemon_log()
    );
    assert!(mount.remount("ro"), "remount read-only");
    assert!(
        std::fs::write(env.at("etc/probe"), "x").is_err(),
        "read-only"
    );
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a1\\n\"\n",
    );
    let second = env.repo.commit("drop b");
    let id = "files/file/etc/b";
    // The delete fails, and is retried by keyed passes (its attempts grow)
    // as a transient failure, never held as Blocked for a full pass.
    let retried = wait_until(30, || {
        env.resource(id)
            .is_some_and(|r| r["state"] == "Failed" && r["attempts"].as_u64() >= Some(2))
    });
    let r = env.resource(id);
    assert!(mount.remount("rw"), "remount writable");
    assert!(retried, "{r:?}\n{}", env.daemon_log());
    let r = r.unwrap();
    assert!(r["next_retry"].is_string(), "{r}");
    assert!(r["reason"].as_str().unwrap().contains("Read-only"), "{r}");
    assert_eq!(env.status()["source"]["applied_revision"], second.as_str());
    // Writable again: the retry prunes it, with the resync an hour away.
    assert!(
        wait_until(30, || !env.at("etc/b").exists()),
        "{:?}\n{}",
        env.resource(id),
        env.daemon_log()
    );
    assert!(
        wait_until(10, || env.resource(id).is_none()),
        "{:?}",
        env.resource(id)
    );
    assert_eq!(env.read("etc/a"), "a1\n");
    assert_eq!(env.status()["counts"]["InSync"], 1);
}

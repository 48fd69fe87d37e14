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

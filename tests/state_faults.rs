//! Faults of the state dir itself, made for real: its lock file deleted
//! under a running daemon, a page of its ledger scribbled over, the file
//! system it lives on full. tend keeps one writer, says what is damaged,
//! and never reports InSync for what it could not record.

mod util;

use util::{wait_until, Env};

fn site(env: &Env) {
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a1\\n\"\n---\nkind: file\npath: etc/b\ncontent: \"b1\\n\"\n",
    );
    env.repo.commit("init");
}

#[test]
fn deleting_the_lock_file_lets_no_second_writer_in() {
    let env = Env::new();
    site(&env);
    env.repo.git(&["checkout", "-q", "-b", "other"]);
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"other\\n\"\n",
    );
    env.repo.commit("other");
    env.repo.git(&["checkout", "-q", "main"]);
    let cfg = env.config("policy:\n  resync: 1h\n");
    let cfg = cfg.to_str().unwrap();
    let d = env.daemon(&["--interval", "1h", "-c", cfg]);
    assert!(
        wait_until(20, || env.status()["counts"]["InSync"] == 2),
        "{}",
        env.daemon_log()
    );
    std::fs::remove_file(env.state.path().join("lock")).unwrap();
    let pid = format!("pid {}", d.child.id());

    let sync = env.tend(&["sync", "--ref", "other", "-c", cfg]);
    assert_eq!(sync.code, 2, "{sync:?}");
    assert!(
        sync.stderr.contains("locked") && sync.stderr.contains(&pid),
        "the holder is named: {sync:?}"
    );
    assert_eq!(env.read("etc/a"), "a1\n", "the other revision was applied");
    assert!(env.at("etc/b").exists(), "the other revision pruned");

    let mut second = env.cmd(&[
        "run",
        "--listen",
        "127.0.0.1:0",
        "--interval",
        "1h",
        "-c",
        cfg,
    ]);
    let out = second.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&pid), "{stderr}");
    // The first daemon still corrects drift: it is the writer.
    std::fs::write(env.at("etc/a"), "edited\n").unwrap();
    assert!(
        wait_until(30, || env.read("etc/a") == "a1\n"),
        "{}",
        env.daemon_log()
    );
}

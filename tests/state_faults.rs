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

/// Writes the WAL back into the database file and empties it, so the
/// file's pages are what SQLite reads.
fn checkpoint(db: &std::path::Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

/// The number of a leaf page of `table`'s b-tree: from its root, down the
/// right-most child pointers of interior pages.
fn leaf_page(db: &std::path::Path, table: &str) -> (u64, u64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let size: u64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let mut page: u64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?1",
            [table],
            |r| r.get(0),
        )
        .unwrap();
    drop(conn);
    let bytes = std::fs::read(db).unwrap();
    loop {
        let at = ((page - 1) * size) as usize + if page == 1 { 100 } else { 0 };
        match bytes[at] {
            // Interior index or table page: the right-most pointer follows.
            0x02 | 0x05 => {
                page = u32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as u64;
            }
            0x0a | 0x0d => return (page, size),
            other => panic!("page {page} of {table} has type {other:#x}"),
        }
    }
}

/// Overwrites a whole page (never page 1, which holds the header).
fn scribble(db: &std::path::Path, (page, size): (u64, u64)) {
    use std::io::{Seek, SeekFrom, Write};
    assert!(page > 1);
    let mut f = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    f.seek(SeekFrom::Start((page - 1) * size)).unwrap();
    let junk: Vec<u8> = (0..size).map(|i| (i * 7 + 0x5a) as u8).collect();
    f.write_all(&junk).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_scribbled_ledger_page_is_an_error_before_any_change_and_status_says_so() {
    let env = Env::new();
    env.repo.write(
        "site.tend.yaml",
        "kind: directory\npath: site\nsource: content\n",
    );
    for i in 0..300 {
        env.repo.write(&format!("content/f{i}"), format!("{i}\n"));
    }
    env.repo.commit("many");
    // The second sync sweeps temp files once and notes none are left, so
    // the third reads the inventory first in its pass.
    for _ in 0..2 {
        let r = env.tend(&["sync"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let db = env.state.path().join("ledger.db");
    checkpoint(&db);
    let page = leaf_page(&db, "inventory");
    scribble(&db, page);
    let before = util::snapshot_tree(env.root());

    let sync = env.tend(&["sync"]);
    assert_eq!(sync.code, 2, "nothing was changed: {sync:?}");
    assert!(sync.stderr.contains("nothing was changed"), "{sync:?}");
    assert_eq!(util::snapshot_tree(env.root()), before);

    let state = env.state.path().to_str().unwrap();
    let status = env.raw(&["status", "--state-dir", state]);
    assert_eq!(status.code, 2, "{status:?}");
    assert!(status.all().contains("ledger damaged"), "{status:?}");
    let json = env.raw(&["status", "-o", "json", "--state-dir", state]);
    assert_eq!(json.code, 2, "{json:?}");
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(
        doc["ledger"]["damaged"]
            .as_str()
            .is_some_and(|d| d.contains("ledger.db")),
        "{doc}"
    );

    // Moved aside, a fresh ledger starts: the note is about the old file.
    std::fs::rename(&db, env.state.path().join("ledger.db.damaged")).unwrap();
    for side in ["ledger.db-wal", "ledger.db-shm"] {
        let _ = std::fs::remove_file(env.state.path().join(side));
    }
    let again = env.tend(&["sync"]);
    assert_eq!(again.code, 0, "{again:?}");
    let status = env.raw(&["status", "--state-dir", state]);
    assert_eq!(status.code, 0, "{status:?}");
    assert!(!status.all().contains("damaged"), "{status:?}");
}

/// A tmpfs of `size` mounted on `dir`; unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system holding `dir` until it refuses more.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).and_then(|()| f.flush()).is_ok() {}
    filler
}

#[test]
fn a_correction_that_cannot_be_recorded_is_kept_retried_and_made_once_there_is_space() {
    if !util::can_run(
        rustix::process::geteuid().is_root(),
        "mounting a tmpfs needs root",
    ) {
        return;
    }
    let env = Env::new();
    site(&env);
    let small = env.state.path().join("small");
    let Some(_mount) = Tmpfs::mount(&small, "2m") else {
        util::can_run(false, "cannot mount a tmpfs here");
        return;
    };
    let cfg = env.config("policy:\n  resync: 1h\n");
    let log = std::fs::File::create(env.state.path().join("daemon.log")).unwrap();
    let _d = util::Daemon {
        child: util::tend_cmd()
            .args(["run", "--listen", "127.0.0.1:0", "--interval", "1h"])
            .args(["--repo", &env.repo.url()])
            .arg("--root")
            .arg(env.root())
            .arg("--state-dir")
            .arg(&small)
            .arg("-c")
            .arg(&cfg)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    };
    let status = || {
        let r = env.raw(&[
            "status",
            "-o",
            "json",
            "--state-dir",
            small.to_str().unwrap(),
        ]);
        (
            r.code,
            serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap_or_default(),
        )
    };
    assert!(
        wait_until(30, || {
            let (_, s) = status();
            s["counts"]["InSync"] == 2
                && s["watcher"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("watching"))
        }),
        "{}",
        env.daemon_log()
    );
    let addr = util::http::listening_addr(&env.daemon_log()).expect("listening");
    let filler = fill(&small);
    std::fs::write(env.at("etc/a"), "edited\n").unwrap();

    // The backup fails for want of space, and so does the record of that
    // failure: the daemon keeps it, says so, and retries with backoff.
    let api = || util::http::get(addr, "/api/v1/status").json();
    let of_a = |doc: &serde_json::Value| {
        doc["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["id"] == "files/file/etc/a").cloned())
            .unwrap_or_default()
    };
    let kept = wait_until(30, || {
        let doc = api();
        let a = of_a(&doc);
        a["state"] == "Failed"
            && a["reason"]
                .as_str()
                .is_some_and(|r| r.contains("No space left"))
            && a["attempts"].as_u64() >= Some(2)
            && doc["ledger"]["write_failed"].is_string()
    });
    assert!(kept, "{}\n{}", api(), env.daemon_log());
    assert_eq!(api()["counts"]["InSync"], 1, "{}", api());
    let metrics = util::http::get(addr, "/metrics").text();
    assert!(
        metrics.lines().any(|l| l == "tend_ledger_write_failing 1"),
        "{metrics}"
    );
    // `tend status` reads the ledger, which could not take the failure; the
    // note beside it says the ledger is behind.
    let (code, doc) = status();
    assert_eq!(code, 1, "{doc}");
    assert!(doc["ledger"]["write_failed"].is_string(), "{doc}");
    let text = env.raw(&["status", "--state-dir", small.to_str().unwrap()]);
    assert!(text.stdout.contains("ledger write failed"), "{text:?}");
    assert_eq!(env.read("etc/a"), "edited\n");

    // Space again: the retry corrects it, with the resync an hour away.
    std::fs::remove_file(filler).unwrap();
    assert!(
        wait_until(60, || env.read("etc/a") == "a1\n"),
        "{}\n{}",
        api(),
        env.daemon_log()
    );
    assert!(
        wait_until(20, || {
            let (code, s) = status();
            code == 0 && s["counts"]["InSync"] == 2 && s["ledger"].is_null()
        }),
        "{:?}\n{}",
        status(),
        env.daemon_log()
    );
    let doc = api();
    assert_eq!(doc["counts"]["InSync"], 2, "{doc}");
    assert!(doc["ledger"].is_null(), "{doc}");
}

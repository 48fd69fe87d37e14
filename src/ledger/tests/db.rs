//! The database: round trips, reopening, WAL readers beside a writer, and
//! clear errors for corrupt or newer databases.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant, SystemTime};

use super::{at, mode_of};
use crate::ledger::*;

fn record(id: &str, state: State) -> ResourceRecord {
    ResourceRecord::new(id, state)
}

#[test]
fn open_creates_a_private_state_dir_and_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/state");
    let ledger = Ledger::open(&dir).unwrap();
    assert_eq!(ledger.state_dir(), dir);
    assert_eq!(mode_of(&dir), 0o700);
    assert!(dir.join(DATABASE_FILE).is_file());
    let journal: String = rusqlite::Connection::open(dir.join(DATABASE_FILE))
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    assert_eq!(ledger.watcher().unwrap(), None);
    ledger.set_watcher("watching 3 directories").unwrap();
    drop(ledger);
    let ledger = Ledger::open(&dir).unwrap();
    assert_eq!(
        ledger.watcher().unwrap().as_deref(),
        Some("watching 3 directories")
    );
}

#[test]
fn writers_creating_one_ledger_at_once_share_it_and_leave_no_temp_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let opened: Vec<Ledger> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| Ledger::open(&dir).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    opened[0].set_watcher("first").unwrap();
    for ledger in &opened {
        assert_eq!(ledger.watcher().unwrap().as_deref(), Some("first"));
    }
    let version: i64 = rusqlite::Connection::open(dir.join(DATABASE_FILE))
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version > 0, "migrated before it was linked into place");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tend-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn an_in_memory_ledger_reads_as_a_fresh_one_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let ledger = Ledger::open_in_memory(&dir).unwrap();
    assert!(ledger.inventory().unwrap().is_empty());
    assert!(ledger.resources().unwrap().is_empty());
    ledger.set_temp_swept(true).unwrap();
    assert!(ledger.temp_swept().unwrap());
    drop(ledger);
    assert!(!dir.exists(), "nothing written to disk");
}

#[test]
fn inventory_add_is_idempotent_and_remove_removes() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    let e = InventoryEntry {
        id: "files/file/etc/a".into(),
        target: "files".into(),
        path: "etc/a".into(),
    };
    ledger.inventory_add(&e).unwrap();
    ledger.inventory_add(&e).unwrap();
    let b = InventoryEntry {
        id: "files/file/etc/b".into(),
        target: "files".into(),
        path: "etc/b".into(),
    };
    ledger.inventory_add(&b).unwrap();
    assert_eq!(ledger.inventory().unwrap(), vec![e.clone(), b.clone()]);
    ledger.inventory_remove(&e.id).unwrap();
    assert_eq!(ledger.inventory().unwrap(), vec![b]);
}

#[test]
fn the_inventory_streams_in_identity_order() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    // Added out of order; `a.txt` sorts before `a/b` as bytes do.
    for path in ["a/b", "z", "a.txt", "a"] {
        ledger
            .inventory_add(&InventoryEntry {
                id: format!("files/file/{path}"),
                target: "files".into(),
                path: path.into(),
            })
            .unwrap();
    }
    let mut seen = Vec::new();
    ledger
        .for_each_inventory(|id, target, path| seen.push(format!("{id} {target} {path}")))
        .unwrap();
    assert_eq!(
        seen,
        [
            "files/file/a files a",
            "files/file/a.txt files a.txt",
            "files/file/a/b files a/b",
            "files/file/z files z"
        ]
    );
}

#[test]
fn resource_records_round_trip_with_every_field() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    let r = ResourceRecord {
        id: "files/file/etc/x".into(),
        state: State::Failed,
        drift_since: Some(at(1)),
        attempts: 4,
        reason: Some("permission denied".into()),
        next_retry: Some(at(20)),
        last_applied: Some(at(0)),
        corrections: vec![at(2), at(3)],
    };
    ledger.put_resource(&r).unwrap();
    ledger
        .put_resource(&record("files/file/etc/y", State::InSync))
        .unwrap();
    drop(ledger);
    let ledger = Ledger::open(tmp.path()).unwrap();
    assert_eq!(ledger.resource(&r.id).unwrap(), Some(r.clone()));
    assert_eq!(ledger.resources().unwrap().len(), 2);
    ledger.remove_resource(&r.id).unwrap();
    assert_eq!(ledger.resource(&r.id).unwrap(), None);
}

#[test]
fn intents_survive_reopen_until_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    let a = ledger
        .add_intent(IntentKind::Create, "files/file/a", "")
        .unwrap();
    let h = ledger
        .add_intent(IntentKind::Hook, "files/file/a", "nginx-reload")
        .unwrap();
    drop(ledger);
    let ledger = Ledger::open(tmp.path()).unwrap();
    let hooks = ledger.intents(IntentKind::Hook).unwrap();
    assert_eq!(
        hooks,
        vec![Intent {
            seq: h,
            kind: IntentKind::Hook,
            id: "files/file/a".into(),
            detail: "nginx-reload".into()
        }]
    );
    assert_eq!(ledger.intents(IntentKind::Create).unwrap().len(), 1);
    ledger.clear_intent(a).unwrap();
    assert!(ledger.intents(IntentKind::Create).unwrap().is_empty());
    // A cleared number is never reused, so a stale clear cannot hit a new intent.
    ledger.clear_intent(h).unwrap();
    let next = ledger
        .add_intent(IntentKind::Hook, "files/file/b", "x")
        .unwrap();
    assert!(next > h);
}

#[test]
fn pauses_expire_and_resume_clears() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    let now = SystemTime::now();
    ledger
        .pause(Some("files/file/a"), Some(now + Duration::from_secs(3600)))
        .unwrap();
    ledger
        .pause(Some("files/file/old"), Some(now - Duration::from_secs(1)))
        .unwrap();
    ledger.pause(Some("files/file/b"), None).unwrap();
    let ids: Vec<_> = ledger
        .pauses()
        .unwrap()
        .into_iter()
        .map(|p| p.id.unwrap())
        .collect();
    assert_eq!(ids, ["files/file/a", "files/file/b"]);
    let later = ledger.pauses_at(now + Duration::from_secs(7200)).unwrap();
    assert_eq!(
        later,
        vec![PauseRecord {
            id: Some("files/file/b".into()),
            until: None,
            excepted: false,
        }]
    );

    ledger.resume(Some("files/file/b")).unwrap();
    assert_eq!(ledger.pauses().unwrap().len(), 1);
    ledger.pause(None, None).unwrap();
    let all = ledger.pauses().unwrap();
    assert!(all.iter().any(|p| p.id.is_none() && !p.excepted), "{all:?}");
    ledger.resume(None).unwrap();
    assert!(ledger.pauses().unwrap().is_empty());
}

#[test]
fn source_and_meta_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    assert_eq!(ledger.source().unwrap(), None);
    let mut s = SourceRecord {
        repo: "https://example.com/r.git".into(),
        reference: Some("main".into()),
        fetched_revision: Some("a".repeat(40)),
        last_fetch_at: Some(at(5)),
        last_fetch_error: Some("timeout".into()),
        drift_since: Some(at(4)),
        ..SourceRecord::default()
    };
    ledger.put_source(&s).unwrap();
    s.applied_revision = s.fetched_revision.clone();
    s.last_success_at = Some(at(6));
    ledger.put_source(&s).unwrap();
    assert_eq!(ledger.source().unwrap(), Some(s));
}

#[test]
fn digests_are_per_identity_and_applying_clears_a_block() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(tmp.path()).unwrap();
    let (a, b) = ("files/file/a", "files/file/b");
    ledger.set_blocked_digest(a, "9").unwrap();
    ledger
        .transaction(|tx| {
            tx.set_applied_digest(b, "2")?;
            tx.set_applied_digest(a, "1")
        })
        .unwrap();
    let mut applied = ledger.digests(Digest::Applied).unwrap();
    applied.sort();
    assert_eq!(
        applied,
        [
            (a.to_string(), "1".to_string()),
            (b.to_string(), "2".to_string())
        ]
    );
    assert_eq!(ledger.digest(Digest::Blocked, a).unwrap(), None, "cleared");
    assert_eq!(ledger.digest_count(Digest::Applied, 100).unwrap(), 2);
    assert_eq!(
        ledger.digest_count(Digest::Applied, 1).unwrap(),
        1,
        "capped"
    );
    assert_eq!(ledger.digest_count(Digest::Blocked, 100).unwrap(), 0);
    ledger.set_managed_fields(a, "[\"/x\"]").unwrap();
    ledger.transaction(|tx| tx.forget_declared(a)).unwrap();
    assert_eq!(ledger.digest(Digest::Applied, a).unwrap(), None);
    assert_eq!(ledger.managed_fields(a).unwrap(), None);
    assert_eq!(
        ledger.digest(Digest::Applied, b).unwrap().as_deref(),
        Some("2")
    );
}

#[test]
fn a_failed_transaction_writes_nothing_and_a_batch_is_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(tmp.path()).unwrap();
    let err = ledger.transaction(|tx| {
        tx.put_resource(&record("files/file/a", State::Drifted))?;
        Err::<(), _>(LedgerError::NotFound { path: "x".into() })
    });
    assert!(err.is_err());
    assert!(ledger.resources().unwrap().is_empty());

    let started = Instant::now();
    ledger
        .transaction(|tx| {
            for i in 0..5000 {
                tx.put_resource(&record(&format!("files/file/f{i}"), State::InSync))?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(ledger.resources().unwrap().len(), 5000);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "5000 puts took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_reader_sees_committed_state_while_a_writer_holds_a_transaction() {
    let tmp = tempfile::tempdir().unwrap();
    let mut writer = Ledger::open(tmp.path()).unwrap();
    writer
        .put_resource(&record("files/file/old", State::Drifted))
        .unwrap();
    let reader = Ledger::open_read_only(tmp.path()).unwrap();
    writer
        .transaction(|tx| {
            for i in 0..100 {
                tx.put_resource(&record(&format!("files/file/new{i}"), State::InSync))?;
            }
            tx.remove_resource("files/file/old")?;
            // Mid-pass: the reader neither waits nor sees half of it. The
            // writer holds its transaction for as long as this takes, and a
            // waiting reader would wait out the 10 s busy timeout.
            let started = Instant::now();
            let seen = reader.resources()?;
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
            assert_eq!(
                seen.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                ["files/file/old"]
            );
            Ok(())
        })
        .unwrap();
    assert_eq!(reader.resources().unwrap().len(), 100);
}

#[test]
fn a_read_only_transaction_is_one_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let writer = Ledger::open(tmp.path()).unwrap();
    writer
        .put_resource(&record("files/file/a", State::Drifted))
        .unwrap();
    let mut reader = Ledger::open_read_only(tmp.path()).unwrap();
    let (before, after) = reader
        .transaction(|tx| {
            let before = tx.resources()?.len();
            // The daemon commits a pass between two reads of `tend status`.
            writer.put_resource(&record("files/file/b", State::Drifted))?;
            Ok((before, tx.resources()?.len()))
        })
        .unwrap();
    assert_eq!((before, after), (1, 1));
    assert_eq!(reader.resources().unwrap().len(), 2);
}

#[test]
fn a_second_writer_waits_for_a_transaction_instead_of_failing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut daemon = Ledger::open(tmp.path()).unwrap();
    let dir = tmp.path().to_path_buf();
    let (held, wait_held) = std::sync::mpsc::channel();
    let pauser = std::thread::spawn(move || {
        wait_held.recv().unwrap();
        // `tend pause` beside a daemon that is mid-commit.
        Ledger::open(&dir)
            .unwrap()
            .pause(Some("files/file/a"), None)
    });
    daemon
        .transaction(|tx| {
            tx.put_resource(&record("files/file/a", State::Drifted))?;
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        })
        .unwrap();
    pauser.join().unwrap().unwrap();
    assert_eq!(daemon.pauses().unwrap().len(), 1);
}

#[test]
fn a_reader_in_another_process_is_not_blocked_by_an_open_write() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    ledger.set_watcher("committed").unwrap();
    drop(ledger);
    let db = tmp.path().join(DATABASE_FILE);
    let script = "BEGIN IMMEDIATE; UPDATE overall SET watcher = 'uncommitted';";
    // The write stays open far longer than the bound below (and than the
    // 10 s busy timeout), so a reader that waited for it would fail; the
    // whole pipeline is killed once the reader is done.
    let writer = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "(echo \"{script}\"; echo .print ready; sleep 60) | sqlite3 '{}'",
            db.display()
        ))
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn();
    if !crate::test_gate::can_run(
        writer.is_ok(),
        "the sqlite3 CLI is missing (scripts/test installs Debian's sqlite3)",
    ) {
        return;
    }
    let writer = writer.unwrap();
    /// Kills the writer's process group (sh, sleep and sqlite3) when dropped.
    struct Group(std::process::Child);
    impl Drop for Group {
        fn drop(&mut self) {
            if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = self.0.wait();
        }
    }
    let mut writer = Group(writer);
    let mut out = std::io::BufReader::new(writer.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    if !crate::test_gate::can_run(
        line.trim() == "ready",
        &format!("the sqlite3 CLI is unusable ({line:?})"),
    ) {
        return;
    }
    let started = Instant::now();
    let reader = Ledger::open_read_only(tmp.path()).unwrap();
    assert_eq!(reader.watcher().unwrap().as_deref(), Some("committed"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(writer);
}

#[test]
fn read_only_open_creates_nothing_and_cannot_write() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("none");
    let err = Ledger::open_read_only(&missing).err().unwrap();
    assert!(matches!(err, LedgerError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains(&missing.display().to_string()));
    assert!(!missing.exists());

    Ledger::open(tmp.path())
        .unwrap()
        .put_resource(&record("files/file/a", State::InSync))
        .unwrap();
    // The writer has closed, leaving its WAL: the reader sees its commit.
    let reader = Ledger::open_read_only(tmp.path()).unwrap();
    assert_eq!(reader.resources().unwrap().len(), 1);
    assert!(reader
        .put_resource(&record("files/file/b", State::InSync))
        .is_err());
}

#[test]
fn closing_a_writer_leaves_its_commits_in_the_wal_for_the_next_to_read() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = tmp.path().join(format!("{DATABASE_FILE}-wal"));
    let ledger = Ledger::open(tmp.path()).unwrap();
    ledger
        .put_resource(&record("files/file/a", State::InSync))
        .unwrap();
    drop(ledger);
    // Not checkpointed at close: the commit is still only in the WAL.
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);

    let reader = Ledger::open_read_only(tmp.path()).unwrap();
    assert_eq!(reader.resources().unwrap().len(), 1);
    drop(reader);
    let ledger = Ledger::open(tmp.path()).unwrap();
    ledger
        .put_resource(&record("files/file/b", State::InSync))
        .unwrap();
    assert_eq!(ledger.resources().unwrap().len(), 2);
}

#[test]
fn a_corrupt_database_is_a_clear_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join(DATABASE_FILE);
    std::fs::write(&db, vec![b'x'; 8192]).unwrap();
    for err in [
        Ledger::open(tmp.path()).err().unwrap(),
        Ledger::open_read_only(tmp.path()).err().unwrap(),
    ] {
        assert!(matches!(err, LedgerError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(&db.display().to_string()), "{err}");
    }
}

#[test]
fn a_newer_schema_is_refused_by_writers_and_readers() {
    let tmp = tempfile::tempdir().unwrap();
    drop(Ledger::open(tmp.path()).unwrap());
    let db = tmp.path().join(DATABASE_FILE);
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    for err in [
        Ledger::open(tmp.path()).err().unwrap(),
        Ledger::open_read_only(tmp.path()).err().unwrap(),
    ] {
        assert!(
            matches!(err, LedgerError::NewerSchema { found: 99, .. }),
            "{err}"
        );
        assert!(err.to_string().contains(&db.display().to_string()), "{err}");
    }
}

#[test]
fn an_unknown_state_in_the_database_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    rusqlite::Connection::open(tmp.path().join(DATABASE_FILE))
        .unwrap()
        .execute(
            "INSERT INTO resources (id, state) VALUES ('files/file/a', 'Sideways')",
            [],
        )
        .unwrap();
    let err = ledger.resources().err().unwrap();
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("Sideways"));
}

#[test]
fn keyed_reads_return_only_the_named_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    for p in ["a", "b", "c"] {
        ledger
            .inventory_add(&InventoryEntry {
                id: format!("files/file/{p}"),
                target: "files".into(),
                path: p.into(),
            })
            .unwrap();
        ledger
            .put_resource(&record(&format!("files/file/{p}"), State::InSync))
            .unwrap();
    }
    assert_eq!(ledger.inventory_count().unwrap(), 3);
    let inv = ledger
        .inventory_of(["files/file/c", "files/file/x", "files/file/a"])
        .unwrap();
    let paths: Vec<&str> = inv.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["c", "a"]);
    let recs = ledger
        .resources_of(["files/file/b", "files/file/nope"])
        .unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].id, "files/file/b");
    ledger.inventory_remove("files/file/b").unwrap();
    assert_eq!(ledger.inventory_count().unwrap(), 2);
}

#[test]
fn many_records_asked_at_once_are_found_by_one_scan_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(tmp.path()).unwrap();
    ledger
        .transaction(|tx| {
            for i in 0..3000 {
                tx.put_resource(&record(&format!("files/file/f{i}"), State::InSync))?;
            }
            Ok(())
        })
        .unwrap();
    // Every even record and some that do not exist: over the lookup limit.
    let asked: Vec<String> = (0..6000)
        .step_by(2)
        .map(|i| format!("files/file/f{i}"))
        .collect();
    let mut found: Vec<String> = ledger
        .resources_of(asked.iter().map(String::as_str))
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    found.sort();
    let mut expected: Vec<String> = asked
        .into_iter()
        .filter(|id| {
            id.trim_start_matches("files/file/f")
                .parse::<u32>()
                .unwrap()
                < 3000
        })
        .collect();
    expected.sort();
    assert_eq!(found.len(), 1500);
    assert_eq!(found, expected);
}

#[test]
fn counts_per_state_and_the_records_not_in_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    for (id, state) in [
        ("a", State::InSync),
        ("b", State::Failed),
        ("c", State::InSync),
        ("d", State::Drifted),
        ("e", State::Failed),
    ] {
        ledger.put_resource(&record(id, state)).unwrap();
    }
    let mut counts = ledger.state_counts().unwrap();
    counts.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        counts,
        [(State::Drifted, 1), (State::Failed, 2), (State::InSync, 2)]
    );
    let off: Vec<String> = ledger
        .resources_not_in_sync()
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(off, ["b", "d", "e"]);
}

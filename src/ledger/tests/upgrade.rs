//! A state dir written by an earlier release opens, upgrades in place and
//! keeps what it held.

use std::time::{Duration, UNIX_EPOCH};

use crate::ledger::*;

/// `fixtures/ledger-v1/ledger.db` was written by the release whose schema
/// was version 1 (`tend sync` of a repository declaring a.txt, b.txt and an
/// invalid c.txt; then b.txt edited and `sync --dry-run`; then `tend pause
/// files/file/a.txt`), its WAL checkpointed into the file.
fn v1_state_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ledger-v1/ledger.db");
    std::fs::copy(fixture, tmp.path().join("ledger.db")).unwrap();
    tmp
}

#[test]
fn a_state_dir_of_the_previous_release_upgrades_and_keeps_its_state() {
    let dir = v1_state_dir();
    // A reader does not migrate: it says the ledger is older.
    let err = Ledger::open_read_only(dir.path())
        .err()
        .expect("older schema");
    assert!(err.to_string().contains("older"), "{err}");

    let ledger = Ledger::open(dir.path()).unwrap();
    let inventory: Vec<String> = ledger
        .inventory()
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(inventory, ["files/file/a.txt", "files/file/b.txt"]);
    let b = ledger.resource("files/file/b.txt").unwrap().unwrap();
    assert_eq!(b.state, State::Drifted);
    assert_eq!(
        b.drift_since,
        Some(UNIX_EPOCH + Duration::from_millis(1_796_129_414_455))
    );
    let pauses = ledger.pauses().unwrap();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].id.as_deref(), Some("files/file/a.txt"));
    // The meta rows are columns now.
    for id in ["files/file/a.txt", "files/file/b.txt"] {
        let digest = ledger.digest(Digest::Applied, id).unwrap();
        assert!(digest.is_some_and(|d| d.starts_with("file:")), "{id}");
        // A cleared block (an empty meta value) is no block.
        assert_eq!(ledger.digest(Digest::Blocked, id).unwrap(), None, "{id}");
    }
    let problems = ledger.declaration_problems().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("site.tend.yaml:10"), "{problems:?}");
    drop(ledger);
    // Upgraded, it opens for readers too, and again for writers.
    assert!(Ledger::open_read_only(dir.path()).is_ok());
    assert!(Ledger::open(dir.path()).is_ok());
}

/// Keys the fixture does not hold, written as version 1 wrote them.
#[test]
fn every_meta_key_of_version_1_finds_its_column() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(super::super::schema::FIRST_SCHEMA)
        .unwrap();
    conn.execute_batch(
        "PRAGMA user_version = 1;
         INSERT INTO meta VALUES
           ('managed:flags/flag/x', '[\"/a\",\"/b\"]'),
           ('blocked:files/file/y', 'file:abc'),
           ('applied:files/file/z', ''),
           ('temp_files_swept', ''),
           ('records_settled', 'digest-1'),
           ('watcher', 'watching 2 directories');",
    )
    .unwrap();
    drop(conn);
    let ledger = Ledger::open(dir.path()).unwrap();
    assert_eq!(
        ledger.managed_fields("flags/flag/x").unwrap().as_deref(),
        Some("[\"/a\",\"/b\"]")
    );
    assert_eq!(
        ledger
            .digest(Digest::Blocked, "files/file/y")
            .unwrap()
            .as_deref(),
        Some("file:abc")
    );
    assert_eq!(
        ledger.digest(Digest::Applied, "files/file/z").unwrap(),
        None
    );
    assert!(ledger.temp_swept().unwrap());
    assert_eq!(
        ledger.records_settled().unwrap().as_deref(),
        Some("digest-1")
    );
    assert_eq!(
        ledger.watcher().unwrap().as_deref(),
        Some("watching 2 directories")
    );
    assert!(ledger.declaration_problems().unwrap().is_empty());
}

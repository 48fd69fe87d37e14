//! The audit log's lines and the per-state-dir hashing key.

use super::{at, mode_of};
use crate::ledger::{AuditEntry, AuditLog, HashKey, LedgerError};

fn entry(id: &str, action: &str) -> AuditEntry {
    AuditEntry {
        time: at(7),
        revision: "b".repeat(40),
        id: id.into(),
        action: action.into(),
        why: vec!["content".into(), "mode".into()],
        before: Some("hmac-sha256:0011223344556677".into()),
        after: None,
        backup: Some(format!("sha256:{}", "c".repeat(64))),
        sensitive: false,
    }
}

#[test]
fn every_audit_line_is_json_with_the_required_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let log = AuditLog::open(tmp.path()).unwrap();
    log.append(&entry("files/file/a", "update")).unwrap();
    log.append_all(&[
        entry("files/file/b", "create"),
        entry("files/file/c", "delete"),
    ])
    .unwrap();
    assert_eq!(mode_of(log.path()), 0o600);

    let text = std::fs::read_to_string(tmp.path().join("audit.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 3);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for field in [
            "time", "revision", "id", "action", "why", "before", "after", "backup",
        ] {
            assert!(v.get(field).is_some(), "{field} missing from {line}");
        }
        let time = humantime::parse_rfc3339(v["time"].as_str().unwrap()).unwrap();
        assert_eq!(time, at(7));
        assert_eq!(v["why"], serde_json::json!(["content", "mode"]));
        assert!(v["after"].is_null());
    }
    let all = log.read_all().unwrap();
    let actions: Vec<_> = all.iter().map(|v| v["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["update", "create", "delete"]);
}

#[test]
fn reopening_appends_and_a_torn_last_line_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    AuditLog::open(tmp.path())
        .unwrap()
        .append(&entry("files/file/a", "create"))
        .unwrap();
    let path = tmp.path().join("audit.jsonl");
    // A crash in the middle of a write.
    let mut text = std::fs::read(&path).unwrap();
    text.extend_from_slice(b"{\"time\": \"2024-");
    std::fs::write(&path, &text).unwrap();
    let tail = AuditLog::tail(tmp.path(), 10, 1 << 20).unwrap();
    assert_eq!(tail.entries.len(), 1, "readers skip it");
    assert_eq!(tail.skipped, 0, "a line in progress is not damage");

    let log = AuditLog::open(tmp.path()).unwrap();
    log.append(&entry("files/file/b", "update")).unwrap();
    let ids: Vec<_> = log
        .read_all()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["files/file/a", "files/file/b"]);
}

#[test]
fn a_damaged_audit_line_names_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let log = AuditLog::open(tmp.path()).unwrap();
    log.append(&entry("files/file/a", "create")).unwrap();
    let path = tmp.path().join("audit.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("not json\n");
    std::fs::write(&path, text).unwrap();
    let err = log.read_all().unwrap_err();
    assert!(matches!(err, LedgerError::Corrupt { .. }));
    assert!(
        err.to_string().contains("audit.jsonl") && err.to_string().contains("line 2"),
        "{err}"
    );
}

#[test]
fn the_hash_key_is_stable_private_and_differs_between_state_dirs() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    assert!(HashKey::load(a.path()).unwrap().is_none());
    let first = HashKey::load_or_create(a.path()).unwrap().hash(b"token");
    assert_eq!(mode_of(&a.path().join("hash.key")), 0o600);
    assert_eq!(
        HashKey::load_or_create(a.path()).unwrap().hash(b"token"),
        first
    );
    assert_eq!(
        HashKey::load(a.path()).unwrap().unwrap().hash(b"token"),
        first
    );
    assert_ne!(
        HashKey::load_or_create(b.path()).unwrap().hash(b"token"),
        first
    );

    let hex = first.strip_prefix("hmac-sha256:").expect(&first);
    assert_eq!(hex.len(), 16);
    assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()));
    assert!(!hex.contains(&hex::encode(b"token")[..8]));
    let leftovers: Vec<_> = std::fs::read_dir(a.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["hash.key"]);
}

#[test]
fn concurrent_creators_agree_on_one_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let hashes: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| HashKey::load_or_create(&dir).unwrap().hash(b"x")))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(hashes.iter().all(|h| h == &hashes[0]), "{hashes:?}");
}

#[test]
fn a_damaged_key_file_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("hash.key"), "short\n").unwrap();
    let err = HashKey::load_or_create(tmp.path()).unwrap_err();
    assert!(matches!(err, LedgerError::Corrupt { .. }));
    assert!(err.to_string().contains("hash.key"), "{err}");
}

#[test]
fn the_tail_reads_backwards_across_chunks_newest_first_and_skips_a_torn_line() {
    let tmp = tempfile::tempdir().unwrap();
    let log = AuditLog::open(tmp.path()).unwrap();
    // Far more than one 64 KiB chunk, so lines straddle chunk borders.
    let entries: Vec<AuditEntry> = (0..3000)
        .map(|i| entry(&format!("files/file/{}", i % 7), &format!("update-{i}")))
        .collect();
    log.append_all(&entries).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log.path())
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"id\":\"files/file/3\",\"torn").unwrap();
    let (found, cut) =
        crate::ledger::audit_tail(tmp.path(), 10_000, |v| v["id"] == "files/file/3").unwrap();
    let actions: Vec<&str> = found
        .iter()
        .map(|v| v["action"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..3000)
        .rev()
        .filter(|i| i % 7 == 3)
        .map(|i| format!("update-{i}"))
        .collect();
    assert_eq!(actions, expected);
    assert!(!cut, "the whole log was read");
    let (few, _) = crate::ledger::audit_tail(tmp.path(), 2, |_| true).unwrap();
    assert_eq!(few[0]["action"], "update-2999");
    assert_eq!(few.len(), 2);
}

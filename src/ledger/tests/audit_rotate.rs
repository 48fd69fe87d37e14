//! Rotation of the audit log: by size within `audit_max` over the current
//! file and at most four generations, by age past `audit_retention`, and
//! readers that follow the entries across the rotated files.

use std::time::{Duration, SystemTime};

use crate::ledger::{AuditEntry, AuditLog, AuditRotation};

fn entry(n: usize, time: SystemTime) -> AuditEntry {
    AuditEntry {
        time,
        revision: "b".repeat(40),
        id: format!("files/file/etc/{n}"),
        action: "update".into(),
        why: vec!["content".into()],
        before: None,
        after: Some(format!("git:{}", "2".repeat(40))),
        backup: None,
        sensitive: false,
    }
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("audit.jsonl"))
        .collect();
    names.sort();
    names
}

fn size_of(dir: &std::path::Path) -> u64 {
    files(dir)
        .iter()
        .map(|n| std::fs::metadata(dir.join(n)).unwrap().len())
        .sum()
}

#[test]
fn the_log_rotates_by_size_and_keeps_four_generations_within_the_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let log = AuditLog::open(tmp.path()).unwrap();
    let rotation = AuditRotation {
        max: 10 << 10,
        retention: Duration::from_secs(30 * 86400),
    };
    log.set_rotation(rotation);
    let line = {
        log.append(&entry(0, SystemTime::now())).unwrap();
        std::fs::metadata(log.path()).unwrap().len()
    };
    for n in 1..400 {
        log.append(&entry(n, SystemTime::now())).unwrap();
        assert!(
            size_of(tmp.path()) <= rotation.max + line,
            "{} bytes after {n} appends",
            size_of(tmp.path())
        );
    }
    assert_eq!(
        files(tmp.path()),
        [
            "audit.jsonl",
            "audit.jsonl.1",
            "audit.jsonl.2",
            "audit.jsonl.3",
            "audit.jsonl.4"
        ]
    );
    // Newest first, without a gap, back to what the oldest generation holds.
    let ids: Vec<usize> = AuditLog::iter_back(tmp.path(), u64::MAX)
        .unwrap()
        .map(|v| {
            v.unwrap()["id"].as_str().unwrap()["files/file/etc/".len()..]
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(ids[0], 399);
    assert!(ids.len() > 20, "{ids:?}");
    assert!(ids.windows(2).all(|w| w[0] == w[1] + 1), "{ids:?}");
    let tail = AuditLog::tail(tmp.path(), 5, 1 << 20).unwrap();
    assert_eq!(tail.entries.len(), 5);
    assert_eq!(tail.entries[4]["id"], "files/file/etc/395");
}

#[test]
fn generations_past_the_retention_go_oldest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let day = Duration::from_secs(86400);
    let now = SystemTime::now();
    let log = AuditLog::open(tmp.path()).unwrap();
    log.set_rotation(AuditRotation {
        max: 64 << 20,
        retention: 30 * day,
    });
    log.append(&entry(0, now)).unwrap();
    // Generations as rotations leave them: the higher, the older. A
    // generation is as old as its last write, its newest line.
    for (n, age) in [(1, 2), (2, 29), (3, 31), (4, 60)] {
        let path = tmp.path().join(format!("audit.jsonl.{n}"));
        std::fs::write(&path, format!("{{\"id\":\"{n}\"}}\n")).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(now - age * day).unwrap();
    }
    log.maintain().unwrap();
    assert_eq!(
        files(tmp.path()),
        ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    );
    let ids: Vec<_> = AuditLog::iter_back(tmp.path(), u64::MAX)
        .unwrap()
        .map(|v| v.unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["files/file/etc/0", "1", "2"]);
    log.maintain().unwrap();
    assert_eq!(files(tmp.path()).len(), 3, "young generations stay");
}

#[test]
fn a_log_reopened_keeps_rotating_from_where_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let rotation = AuditRotation {
        max: 5 << 10,
        retention: Duration::from_secs(86400),
    };
    for n in 0..60 {
        let log = AuditLog::open(tmp.path()).unwrap();
        log.set_rotation(rotation);
        log.append(&entry(n, SystemTime::now())).unwrap();
    }
    assert!(size_of(tmp.path()) <= rotation.max + 1024);
    assert!(files(tmp.path()).len() <= 5, "{:?}", files(tmp.path()));
    let tail = AuditLog::tail(tmp.path(), 1, 1 << 20).unwrap();
    assert_eq!(tail.entries[0]["id"], "files/file/etc/59");
}

//! Reading the audit log from its end: newest first, across rotated
//! generations, past damaged lines, within a byte cap.

use std::io::Write;

use crate::ledger::AuditLog;

fn line(id: &str, pad: usize) -> String {
    format!("{{\"id\":\"{id}\",\"pad\":\"{}\"}}\n", "x".repeat(pad))
}

fn ids(values: &[serde_json::Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_tail_is_the_newest_entries_newest_first_across_generations() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("audit.jsonl.2"), line("a", 0) + &line("b", 0)).unwrap();
    std::fs::write(dir.join("audit.jsonl.1"), line("c", 0) + &line("d", 0)).unwrap();
    std::fs::write(dir.join("audit.jsonl"), line("e", 0)).unwrap();
    // A gap, as a rotation in progress leaves one for a moment.
    std::fs::write(dir.join("audit.jsonl.4"), line("0", 0)).unwrap();

    let tail = AuditLog::tail(dir, 3, 1 << 20).unwrap();
    assert_eq!(ids(&tail.entries), ["e", "d", "c"]);
    assert_eq!((tail.skipped, tail.capped), (0, false));
    let all: Vec<_> = AuditLog::iter_back(dir, 1 << 20)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids(&all), ["e", "d", "c", "b", "a", "0"]);

    // No current file (rotated away just now): the generations still read.
    std::fs::remove_file(dir.join("audit.jsonl")).unwrap();
    assert_eq!(
        ids(&AuditLog::tail(dir, 1, 1 << 20).unwrap().entries),
        ["d"]
    );
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        AuditLog::tail(empty.path(), 20, 1 << 20)
            .unwrap()
            .entries
            .len(),
        0
    );
}

#[test]
fn damaged_lines_are_skipped_and_counted_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let text = line("a", 0)
        + "{\"time\": \"2024-01-01T00:0"
        + &line("b", 0)
        + "not json\n"
        + "[1, 2]\n"
        + "\n"
        + &line("c", 0)
        + "{\"id\":\"torn";
    std::fs::write(tmp.path().join("audit.jsonl"), text).unwrap();
    let tail = AuditLog::tail(tmp.path(), 20, 1 << 20).unwrap();
    // The fragment glued to "b" makes one damaged line; the torn last line
    // is a write in progress, not damage.
    assert_eq!(ids(&tail.entries), ["c", "a"]);
    assert_eq!(tail.skipped, 3);
}

#[test]
fn lines_across_block_boundaries_read_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(tmp.path().join("audit.jsonl")).unwrap();
    let mut want = Vec::new();
    // Lengths around and across the 64 KiB block, deterministic.
    let mut n: usize = 7;
    for i in 0..300 {
        n = (n * 7919 + 104_729) % 90_000;
        let id = format!("r{i}");
        file.write_all(line(&id, n).as_bytes()).unwrap();
        want.push(id);
    }
    drop(file);
    want.reverse();
    let got: Vec<_> = AuditLog::iter_back(tmp.path(), u64::MAX)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids(&got), want);
}

#[test]
fn the_cap_bounds_the_bytes_read_and_an_endless_line_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    // 8 MiB without a newline, then two good lines.
    let mut text = line("old", 0);
    text.push_str(&"y".repeat(8 << 20));
    text.push('\n');
    text.push_str(&line("new", 0));
    std::fs::write(&path, &text).unwrap();

    let capped = AuditLog::tail(tmp.path(), 20, 1 << 20).unwrap();
    assert_eq!(ids(&capped.entries), ["new"]);
    assert!(capped.capped, "the cap must stop the reading");
    assert_eq!(capped.skipped, 0);

    let whole = AuditLog::tail(tmp.path(), 20, u64::MAX).unwrap();
    assert_eq!(ids(&whole.entries), ["new", "old"]);
    assert_eq!(whole.skipped, 1, "the over-long line is skipped");
    assert!(!whole.capped);
}

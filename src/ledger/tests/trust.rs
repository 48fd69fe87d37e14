//! Trust records: the high-water mark per repository and ref, refusals,
//! the pin and its expiry, signers; and the migration that adds them to a
//! state dir made by an earlier tend, in place.

use std::time::{Duration, SystemTime};

use super::at;
use crate::ledger::*;

#[test]
fn marks_are_kept_per_repository_and_ref() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    assert_eq!(ledger.high_water("r", Some("main")).unwrap(), None);
    ledger.set_high_water("r", Some("main"), "a").unwrap();
    ledger.set_high_water("r", None, "b").unwrap();
    ledger.set_high_water("other", Some("main"), "c").unwrap();
    assert_eq!(
        ledger.high_water("r", Some("main")).unwrap().as_deref(),
        Some("a")
    );
    assert_eq!(ledger.high_water("r", None).unwrap().as_deref(), Some("b"));
    // Moving one ref's mark leaves every other ref's alone.
    ledger.set_high_water("r", Some("side"), "d").unwrap();
    ledger.set_high_water("r", Some("side"), "e").unwrap();
    assert_eq!(
        ledger.high_water("r", Some("main")).unwrap().as_deref(),
        Some("a")
    );
    assert_eq!(
        ledger.high_water("r", Some("side")).unwrap().as_deref(),
        Some("e")
    );
    ledger.set_high_water("again", None, "c").unwrap();
    let mut marks = ledger.high_water_marks().unwrap();
    marks.sort();
    assert_eq!(marks, ["a", "b", "c", "e"], "every mark, each once");
    assert_eq!(
        ledger.high_water("other", Some("main")).unwrap().as_deref(),
        Some("c")
    );
}

#[test]
fn refusal_pin_and_signers_round_trip_and_a_pin_expires() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    let refusal = RefusalRecord {
        revision: "a".repeat(40),
        reason: "unsigned".into(),
        detail: "commit aaaa is not signed".into(),
        at: at(3),
    };
    ledger.set_refusal(Some(&refusal)).unwrap();
    assert_eq!(ledger.refusal().unwrap(), Some(refusal));
    ledger.set_refusal(None).unwrap();
    assert_eq!(ledger.refusal().unwrap(), None);

    let pin = PinRecord {
        revision: "b".repeat(40),
        until: None,
        pinned_at: at(1),
    };
    ledger.set_pin(Some(&pin)).unwrap();
    assert_eq!(ledger.pin().unwrap(), Some(pin.clone()));
    let brief = PinRecord {
        until: Some(SystemTime::now() - Duration::from_secs(1)),
        ..pin
    };
    ledger.set_pin(Some(&brief)).unwrap();
    assert_eq!(ledger.pin().unwrap(), None, "an expired pin holds nothing");
    ledger.set_pin(None).unwrap();

    for i in 0..120 {
        ledger
            .note_signer(&format!("{i:040}"), "ssh SHA256:x")
            .unwrap();
    }
    assert_eq!(
        ledger
            .signer_of(&format!("{:040}", 119))
            .unwrap()
            .as_deref(),
        Some("ssh SHA256:x")
    );
    let kept: i64 = rusqlite::Connection::open(tmp.path().join(DATABASE_FILE))
        .unwrap()
        .query_row("SELECT COUNT(*) FROM signers", [], |r| r.get(0))
        .unwrap();
    assert!(kept <= 100, "{kept}");
}

#[test]
fn a_state_dir_of_an_earlier_release_gains_the_trust_tables_in_place() {
    // Written by the release whose schema was version 1 (see upgrade.rs).
    let tmp = tempfile::tempdir().unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ledger-v1/ledger.db");
    std::fs::copy(fixture, tmp.path().join(DATABASE_FILE)).unwrap();
    let before = Ledger::open(tmp.path()).unwrap().source().unwrap();
    let ledger = Ledger::open(tmp.path()).unwrap();
    assert_eq!(ledger.source().unwrap(), before, "what was there stays");
    assert_eq!(ledger.high_water("r", None).unwrap(), None);
    assert_eq!(ledger.pin().unwrap(), None);
    assert_eq!(ledger.refusal().unwrap(), None);
    ledger.set_high_water("r", None, "d").unwrap();
    drop(ledger);
    let reader = Ledger::open_read_only(tmp.path()).unwrap();
    assert_eq!(reader.high_water("r", None).unwrap().as_deref(), Some("d"));
}

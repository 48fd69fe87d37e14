use std::time::Duration;

use super::*;
use crate::ledger::State;

fn id(path: &str) -> ResourceId {
    ResourceId::from_string(format!("files/file/{path}"))
}

fn outcomes(items: &[(&str, State)]) -> super::super::Outcomes {
    items
        .iter()
        .map(|(p, st)| (id(p), Outcome::new(*st, None)))
        .collect()
}

#[test]
fn digests_read_at_once_or_one_by_one_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
    let ids: Vec<ResourceId> = (0..100).map(|i| id(&format!("f{i}"))).collect();
    let answers = |rec: &Recorder, asked: usize| -> Vec<(Option<String>, Option<String>)> {
        let applied = rec.applied_digests(asked).unwrap();
        let blocked = rec.blocked_digests(asked).unwrap();
        ids.iter()
            .map(|id| (applied.get(id).unwrap(), blocked.get(id).unwrap()))
            .collect()
    };
    // Nothing recorded: both ways say so.
    assert!(answers(&rec, 1).iter().all(|a| *a == (None, None)));
    assert_eq!(answers(&rec, 1), answers(&rec, ids.len()));

    let digests: Vec<(ResourceId, String)> = ids
        .iter()
        .step_by(3)
        .map(|id| (id.clone(), format!("d-{id}")))
        .collect();
    rec.set_applied_digests(&digests).unwrap();
    rec.set_blocked_digest(&ids[7], "blocked-7").unwrap();
    rec.set_blocked_digest(&ids[8], "blocked-8").unwrap();
    // Applying clears a block.
    rec.set_applied_digests(&[(ids[8].clone(), "d-8".into())])
        .unwrap();
    let one_by_one = answers(&rec, 1);
    assert_eq!(one_by_one[3].0.as_deref(), Some("d-files/file/f3"));
    assert_eq!(one_by_one[4].0, None);
    assert_eq!(one_by_one[7].1.as_deref(), Some("blocked-7"));
    assert_eq!(
        one_by_one[8],
        (Some("d-8".into()), None),
        "applied, unblocked"
    );
    assert_eq!(answers(&rec, ids.len()), one_by_one, "read at once");
    assert!(rec.applied_digests(ids.len()).unwrap().all.is_some());
    assert!(rec.applied_digests(1).unwrap().all.is_none());
}

#[test]
fn record_all_writes_changes_and_drops_only_uncovered_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let previous_of = |rec: &Recorder| -> BTreeMap<String, ResourceRecord> {
        let rows = rec.ledger.resources().unwrap();
        rows.into_iter().map(|r| (r.id.clone(), r)).collect()
    };
    let first = outcomes(&[
        ("a", State::InSync),
        ("b", State::InSync),
        ("c/d", State::InSync),
        ("e", State::InSync),
    ]);
    rec.record_all(&first, Some(&BTreeMap::new()), now, true)
        .unwrap();
    assert_eq!(previous_of(&rec).len(), 4);
    // `a` and `e` are gone (first and last), `b` drifted, `bb` is new.
    let second = outcomes(&[
        ("b", State::Drifted),
        ("bb", State::InSync),
        ("c/d", State::InSync),
    ]);
    rec.record_all(&second, Some(&previous_of(&rec)), now, true)
        .unwrap();
    let after = previous_of(&rec);
    let ids: Vec<&str> = after.keys().map(String::as_str).collect();
    assert_eq!(ids, ["files/file/b", "files/file/bb", "files/file/c/d"]);
    assert_eq!(after["files/file/b"].state, State::Drifted);
    assert_eq!(after["files/file/b"].drift_since, Some(now));
    // A keyed pass keeps the records it does not cover.
    rec.record_all(&outcomes(&[("b", State::InSync)]), Some(&after), now, false)
        .unwrap();
    assert_eq!(previous_of(&rec).len(), 3);
    assert_eq!(previous_of(&rec)["files/file/b"].state, State::InSync);
}

#[test]
fn a_settled_full_pass_is_not_read_again_until_a_record_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let ab = outcomes(&[("a", State::InSync), ("b", State::InSync)]);
    rec.record_all(&ab, None, now, true).unwrap();
    let marked = rec.ledger.records_settled().unwrap();
    assert!(marked.is_some(), "a settled full pass marks the records");
    // Changed behind the ledger's back (not through its writes), a
    // record is not read while the marker stands: the skip is real.
    let raw = rusqlite::Connection::open(rec.ledger.path()).unwrap();
    raw.execute(
        "UPDATE resources SET reason = 'tampered' WHERE id = 'files/file/b'",
        [],
    )
    .unwrap();
    rec.record_all(&ab, None, now, true).unwrap();
    let reason = |rec: &Recorder, id: &str| {
        let all = rec.ledger.resources().unwrap();
        all.into_iter().find(|r| r.id == id).unwrap().reason
    };
    assert_eq!(reason(&rec, "files/file/b").as_deref(), Some("tampered"));
    // Any write through the ledger removes the marker; the next full
    // pass reads every record and mends it.
    let mut a = rec.ledger.resources().unwrap().remove(0);
    a.state = State::Drifted;
    rec.ledger.put_resource(&a).unwrap();
    assert_eq!(rec.ledger.records_settled().unwrap(), None);
    rec.record_all(&ab, None, now, true).unwrap();
    assert_eq!(reason(&rec, "files/file/b"), None);
    let states: Vec<State> = rec
        .ledger
        .resources()
        .unwrap()
        .iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(states, [State::InSync, State::InSync]);
    assert_eq!(rec.ledger.records_settled().unwrap(), marked);
    // Other identities: the marker does not match, records follow them.
    let ac = outcomes(&[("a", State::InSync), ("c", State::InSync)]);
    rec.record_all(&ac, None, now, true).unwrap();
    let ids: Vec<String> = rec
        .ledger
        .resources()
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["files/file/a", "files/file/c"]);
    assert!(rec.ledger.records_settled().unwrap().is_some());
    assert_ne!(rec.ledger.records_settled().unwrap(), marked);
    // A pass that is not settled leaves no marker.
    let drifted = outcomes(&[("a", State::InSync), ("c", State::Drifted)]);
    rec.record_all(&drifted, None, now, true).unwrap();
    assert_eq!(rec.ledger.records_settled().unwrap(), None);
    rec.record_all(&drifted, None, now, true).unwrap();
    assert_eq!(rec.ledger.records_settled().unwrap(), None);
}

#[test]
fn record_all_reading_the_ledger_agrees_with_held_records() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let first = outcomes(&[
        ("a", State::InSync),
        ("b", State::InSync),
        ("c/d", State::Failed),
        ("e", State::InSync),
    ]);
    let second = outcomes(&[
        ("0", State::InSync),
        ("b", State::Drifted),
        ("bb", State::InSync),
        ("c/d", State::InSync),
    ]);
    let mut results = Vec::new();
    for streamed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
        rec.record_all(&first, None, now, true).unwrap();
        let held: BTreeMap<String, ResourceRecord> = rec
            .ledger
            .resources()
            .unwrap()
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        let previous = (!streamed).then_some(&held);
        rec.record_all(&second, previous, now, true).unwrap();
        results.push(rec.ledger.resources().unwrap());
    }
    let ids: Vec<&str> = results[1].iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "files/file/0",
            "files/file/b",
            "files/file/bb",
            "files/file/c/d"
        ]
    );
    assert_eq!(results[0], results[1]);
    assert_eq!(results[1][1].state, State::Drifted);
    assert_eq!(results[1][3].attempts, 0);
}

#[test]
fn unchanged_agrees_with_next_record() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let earlier = now - Duration::from_secs(60);
    let id = ResourceId::from_string("files/file/a".into());
    let mut prevs = Vec::new();
    for state in State::ALL {
        for (drift, attempts, reason, retry, corrections) in [
            (None, 0, None, None, vec![]),
            (Some(earlier), 0, None, None, vec![]),
            (Some(earlier), 2, Some("EIO"), Some(now), vec![earlier]),
            (None, 0, Some("dry run"), None, vec![earlier]),
        ] {
            let mut r = ResourceRecord::new(id.as_str(), state);
            r.drift_since = drift;
            r.attempts = attempts;
            r.reason = reason.map(String::from);
            r.next_retry = retry;
            r.last_applied = Some(earlier);
            r.corrections = corrections;
            prevs.push(r);
        }
    }
    let mut outcomes = Vec::new();
    for state in State::ALL {
        for reason in [None, Some("dry run"), Some("EIO")] {
            for applied in [false, true] {
                for corrections in [None, Some(vec![]), Some(vec![earlier])] {
                    let mut o = Outcome::new(state, reason.map(String::from));
                    o.applied = applied;
                    o.corrections = corrections;
                    outcomes.push(o);
                }
            }
        }
    }
    let mut same = 0;
    for prev in &prevs {
        for o in &outcomes {
            let expected = next_record(Some(prev), &id, o, now) == *prev;
            assert_eq!(unchanged(prev, o, now), expected, "{prev:?} {o:?}");
            same += usize::from(expected);
        }
    }
    assert!(same > 0, "some outcomes leave the record as it was");
}

//! The drift ledger: a divergence keeps its first-seen time through every
//! non-InSync state and across restarts, and ends only at InSync.

use std::time::Duration;

use proptest::prelude::*;

use super::at;
use crate::ledger::*;

/// What the reconciler does after each observation.
fn observe(ledger: &Ledger, id: &str, state: State, now: std::time::SystemTime) -> ResourceRecord {
    let prev = ledger.resource(id).unwrap();
    let mut rec = prev
        .clone()
        .unwrap_or_else(|| ResourceRecord::new(id, state));
    rec.state = state;
    rec.drift_since = next_drift_since(prev.as_ref(), state, now);
    ledger.put_resource(&rec).unwrap();
    rec
}

#[test]
fn drift_since_is_kept_across_states_and_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let id = "files/file/etc/motd";
    let ledger = Ledger::open(tmp.path()).unwrap();
    assert_eq!(observe(&ledger, id, State::InSync, at(0)).drift_since, None);
    assert_eq!(
        observe(&ledger, id, State::Drifted, at(10)).drift_since,
        Some(at(10))
    );
    assert_eq!(
        observe(&ledger, id, State::Progressing, at(11)).drift_since,
        Some(at(10))
    );
    drop(ledger);

    let ledger = Ledger::open(tmp.path()).unwrap();
    for (i, state) in [
        State::Failed,
        State::Contested,
        State::Paused,
        State::Unknown,
        State::Blocked,
    ]
    .into_iter()
    .enumerate()
    {
        let rec = observe(&ledger, id, state, at(20 + i as u64));
        assert_eq!(rec.drift_since, Some(at(10)), "after {state}");
    }
    assert_eq!(
        observe(&ledger, id, State::InSync, at(30)).drift_since,
        None
    );
    assert_eq!(
        observe(&ledger, id, State::Drifted, at(40)).drift_since,
        Some(at(40))
    );
    drop(ledger);
    let reader = Ledger::open_read_only(tmp.path()).unwrap();
    assert_eq!(
        reader.resource(id).unwrap().unwrap().drift_since,
        Some(at(40))
    );
}

#[test]
fn the_contested_window_counts_corrections_younger_than_it() {
    let mut rec = ResourceRecord::new("files/file/a", State::Drifted);
    let window = Duration::from_secs(600);
    rec.corrections = vec![at(0), at(100), at(101), at(800)];
    // At 700: 0 is 700 s old, 100 exactly the window (forgotten), 101 just
    // inside; 800 lies after `now` (a clock stepped back) and still counts.
    assert_eq!(
        rec.corrections_within(at(700), window),
        vec![at(101), at(800)]
    );
    assert_eq!(rec.corrections_within(at(100), window).len(), 4);
    assert!(rec.corrections_within(at(2000), window).is_empty());
}

#[test]
fn states_parse_back_from_their_names() {
    for state in State::ALL {
        assert_eq!(state.as_str().parse::<State>().unwrap(), state);
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            format!("\"{state}\"")
        );
    }
    assert!("insync".parse::<State>().is_err());
}

fn any_state() -> impl Strategy<Value = State> {
    prop::sample::select(State::ALL.to_vec())
}

proptest! {
    /// For any history, drift_since is the time of the first non-InSync
    /// observation since the last InSync one.
    #[test]
    fn drift_since_is_the_start_of_the_current_divergence(states in prop::collection::vec(any_state(), 1..40)) {
        let mut prev: Option<ResourceRecord> = None;
        let mut expected = None;
        for (i, state) in states.iter().copied().enumerate() {
            let now = at(i as u64);
            expected = match (state, expected) {
                (State::InSync, _) => None,
                (_, None) => Some(now),
                (_, kept) => kept,
            };
            let mut rec = ResourceRecord::new("files/file/p", state);
            rec.drift_since = next_drift_since(prev.as_ref(), state, now);
            prop_assert_eq!(rec.drift_since, expected);
            prev = Some(rec);
        }
    }
}

//! What the loop knows that the ledger could not take (a full disk, a
//! damaged page): the outcomes of passes whose records failed and the keys
//! of passes that failed before they had outcomes, kept in memory as the
//! records the ledger would hold. They are retried with backoff like any
//! failure, shown by the status API and the metrics in place of the
//! ledger's older records, and written once the ledger takes writes again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::backoff::Failures;
use crate::ledger::{ResourceRecord, State};
use crate::model::ResourceId;
use crate::reconcile::{next_full_pass, next_record, Outcome};
use crate::status::Overlay;

#[derive(Debug, Default)]
pub struct Unrecorded {
    /// Records the ledger does not hold yet, by identity.
    records: BTreeMap<String, ResourceRecord>,
    /// Why the ledger last refused a pass's work, with since when.
    failure: Option<String>,
    /// Passes over everything that failed in a row, for their backoff.
    full_failures: Failures,
}

/// An outcome that tells the ledger nothing new when its record is
/// InSync already; any other one must not be lost.
pub(super) fn worth_keeping(o: &Outcome) -> bool {
    o.state != State::InSync || o.applied || o.reason.is_some() || o.corrections.is_some()
}

impl Unrecorded {
    fn failed(&mut self, why: &str, now: SystemTime) {
        if self.failure.is_none() {
            let since = humantime::format_rfc3339_seconds(now);
            self.failure = Some(format!("{why} (since {since})"));
        }
    }

    /// A previous process could not record its outcomes, for this reason:
    /// said until a pass records.
    pub fn resume(why: String) -> Unrecorded {
        Unrecorded {
            failure: Some(why),
            ..Unrecorded::default()
        }
    }

    /// A pass's outcomes could not be recorded: each is kept as its next
    /// record (from the one kept here, else the ledger's in `ledger`).
    /// Returns the records kept, for requeueing.
    pub fn outcomes(
        &mut self,
        outcomes: &crate::reconcile::Outcomes,
        ledger: &HashMap<String, ResourceRecord>,
        why: &str,
        now: SystemTime,
    ) -> Vec<ResourceRecord> {
        self.failed(why, now);
        let mut kept = Vec::new();
        for (id, o) in outcomes {
            if !worth_keeping(o) {
                // Seen in sync: whatever is kept of it is older.
                self.records.remove(id.as_str());
                continue;
            }
            let prev = self
                .records
                .get(id.as_str())
                .or_else(|| ledger.get(id.as_str()));
            let r = next_record(prev, id, o, now);
            self.records.insert(r.id.clone(), r.clone());
            kept.push(r);
        }
        kept
    }

    /// A pass over `keys` failed before it had outcomes: each is Failed,
    /// with one more attempt. Returns their records, for requeueing.
    pub fn keys_failed(
        &mut self,
        keys: &[ResourceId],
        why: &str,
        now: SystemTime,
    ) -> Vec<ResourceRecord> {
        self.failed(why, now);
        keys.iter()
            .map(|id| {
                let prev = self.records.get(id.as_str());
                let failed = Outcome::new(State::Failed, Some(format!("pass failed: {why}")));
                let r = next_record(prev, id, &failed, now);
                self.records.insert(r.id.clone(), r.clone());
                r
            })
            .collect()
    }

    /// A pass over everything failed: when to try it again.
    pub fn full_failed(&mut self, why: &str, now: SystemTime) -> Duration {
        self.failed(why, now);
        next_full_pass(&mut self.full_failures)
    }

    /// A pass recorded its outcomes: what is kept of them is older. Returns
    /// the records still to be written, if any.
    pub fn recorded<'a>(
        &mut self,
        ids: impl Iterator<Item = &'a ResourceId>,
        full: bool,
    ) -> Vec<ResourceRecord> {
        if full {
            self.records.clear();
            self.full_failures.succeeded();
        }
        for id in ids {
            self.records.remove(id.as_str());
        }
        self.records.values().cloned().collect()
    }

    /// Everything kept was written (or nothing was kept).
    pub fn written(&mut self) {
        self.records.clear();
        self.failure = None;
    }

    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    pub fn records(&self) -> impl Iterator<Item = &ResourceRecord> {
        self.records.values()
    }
}

/// The status API's view: the ledger's document with what is kept here.
pub fn overlay(kept: Arc<Mutex<Unrecorded>>) -> Overlay {
    Arc::new(move |doc| {
        let kept = kept.lock().expect("unrecorded outcomes");
        doc.overlay(kept.records(), kept.failure(), SystemTime::now());
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ResourceId {
        ResourceId::new("files", "file", s)
    }

    #[test]
    fn failures_are_kept_with_growing_attempts_until_recorded() {
        let mut u = Unrecorded::default();
        let now = SystemTime::now();
        let failed = Outcome::new(State::Failed, Some("back up: No space left".into()));
        let outcomes: crate::reconcile::Outcomes = [
            (id("a"), failed),
            (id("b"), Outcome::new(State::InSync, None)),
        ]
        .into_iter()
        .collect();
        let mut ledger = HashMap::new();
        let mut older = ResourceRecord::new("files/file/a", State::InSync);
        older.last_applied = Some(now);
        ledger.insert(older.id.clone(), older);
        let kept = u.outcomes(&outcomes, &ledger, "database or disk is full", now);
        assert_eq!(kept.len(), 1, "an outcome in sync tells nothing new");
        assert_eq!(kept[0].attempts, 1);
        assert_eq!(kept[0].last_applied, Some(now), "from the ledger's record");
        assert!(kept[0].next_retry.is_some());
        let again = u.outcomes(&outcomes, &ledger, "still full", now);
        assert_eq!(again[0].attempts, 2, "from the record kept here");
        assert!(u.failure().unwrap().starts_with("database or disk is full"));
        let keyed = u.keys_failed(&[id("a"), id("c")], "full", now);
        assert_eq!(keyed[0].attempts, 3);
        assert_eq!((keyed[1].attempts, keyed[1].state), (1, State::Failed));
        // A keyed pass that recorded `a` leaves `c` to be written.
        let left = u.recorded([id("a")].iter(), false);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, "files/file/c");
        u.written();
        assert!(u.failure().is_none() && u.records().next().is_none());
        let first = u.full_failed("x", now);
        u.full_failed("x", now);
        let third = u.full_failed("x", now);
        assert!(first < Duration::from_secs(2), "{first:?}");
        assert!(third > Duration::from_secs(3), "{third:?}");
        assert!(u.recorded(std::iter::empty(), true).is_empty());
    }
}

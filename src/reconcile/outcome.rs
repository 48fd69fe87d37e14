//! How one resource came out of a pass ([`Outcome`]) and the record it
//! leaves: attempts and the next retry of a failure, the drift age, the
//! corrections inside the contested window.

use std::time::SystemTime;

use crate::backoff;
use crate::ledger::{next_drift_since, ResourceRecord, State};
use crate::model::ResourceId;

/// How one resource came out of a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub state: State,
    pub reason: Option<String>,
    /// tend wrote to it in this pass.
    pub applied: bool,
    /// Drift corrections inside the contested window, when this pass
    /// changed them.
    pub corrections: Option<Vec<SystemTime>>,
    /// When a failure is retried: set before recording only when not by
    /// the resource's own backoff (a failed hook retries all its resources
    /// together, at its own time); once recorded, the time its record was
    /// given, which the error policy ([`super::next_step`]) reads.
    pub retry_at: Option<SystemTime>,
}

impl Outcome {
    /// InSync, nothing written, nothing to remember: its record, once
    /// written, stays as it is.
    pub(super) fn settled(&self) -> bool {
        self.state == State::InSync
            && self.reason.is_none()
            && !self.applied
            && self.corrections.is_none()
    }

    pub fn new(state: State, reason: Option<String>) -> Outcome {
        Outcome {
            state,
            reason,
            applied: false,
            corrections: None,
            retry_at: None,
        }
    }
}

/// Whether [`next_record`] would give back `prev` unchanged, without
/// building it: a no-op pass compares every resource this way.
pub fn unchanged(prev: &ResourceRecord, o: &Outcome, now: SystemTime) -> bool {
    o.state != State::Failed
        && prev.state == o.state
        && prev.attempts == 0
        && prev.next_retry.is_none()
        && prev.reason == o.reason
        && !o.applied
        && next_drift_since(Some(prev), o.state, now) == prev.drift_since
        && o.corrections
            .as_ref()
            .is_none_or(|c| *c == prev.corrections)
}

/// The next record of a resource after a pass observed `o`.
pub fn next_record(
    prev: Option<&ResourceRecord>,
    id: &ResourceId,
    o: &Outcome,
    now: SystemTime,
) -> ResourceRecord {
    let attempts = match o.state {
        State::Failed => prev.map(|p| p.attempts).unwrap_or(0) + 1,
        _ => 0,
    };
    let next_retry = match o.state {
        State::Failed => Some(
            o.retry_at
                .unwrap_or_else(|| backoff::retry_at(attempts, now)),
        ),
        _ => None,
    };
    ResourceRecord {
        id: id.to_string(),
        state: o.state,
        drift_since: next_drift_since(prev, o.state, now),
        attempts,
        reason: o.reason.clone(),
        next_retry,
        last_applied: if o.applied {
            Some(now)
        } else {
            prev.and_then(|p| p.last_applied)
        },
        corrections: o
            .corrections
            .clone()
            .unwrap_or_else(|| prev.map(|p| p.corrections.clone()).unwrap_or_default()),
    }
}

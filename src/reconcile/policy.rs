//! The error policy: what a resource's state after a pass means for when it
//! is looked at again, as an opaque [`Action`] (kube-rs's shape). `sync` and
//! the daemon read the same rule.

use std::time::{Duration, SystemTime};

use super::backoff;
use crate::config::Settings;
use crate::ledger::State;

/// What to do with a key after reconciling it: built only through
/// [`Action::requeue`] and [`Action::await_change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Look again after `d` even if nothing signals a change.
    pub fn requeue(d: Duration) -> Action {
        Action {
            requeue_after: Some(d),
        }
    }
    /// Look again only when an event (a new revision, a resync, a
    /// notification) says so.
    pub fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// The error policy: when to look at a resource again after a pass, as
/// seen at `now`.
pub fn action_for(
    state: State,
    next_retry: Option<SystemTime>,
    settings: &Settings,
    now: SystemTime,
) -> Action {
    match state {
        _ if !retried(state) => Action::await_change(),
        State::Contested => Action::requeue(settings.policy.contested_window.min(backoff::MAX)),
        // Failed, Unknown: at the backoff's time.
        _ => {
            let wait = next_retry
                .and_then(|t| t.duration_since(now).ok())
                .unwrap_or(backoff::BASE);
            Action::requeue(wait)
        }
    }
}

/// Whether [`action_for`] can requeue a resource in `state`; any other
/// state waits for a change.
pub fn retried(state: State) -> bool {
    matches!(state, State::Failed | State::Unknown | State::Contested)
}

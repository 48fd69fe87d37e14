//! The error policy, in one place: how one resource came out of a pass
//! ([`Outcome`]) says what happens to it next ([`Action`]), as kube-rs's
//! reconcile/error_policy pair does. The daemon schedules by it; `sync`
//! reports by it what the daemon would do, so both read the same rule.

use std::time::{Duration, SystemTime};

use super::backoff;
use super::outcome::Outcome;
use crate::config::Policy;
use crate::ledger::{ResourceRecord, State};

/// What happens to a resource after a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until an event says it may have changed (a new revision, a
    /// resync, a watch or plugin notification): in sync, progressing, or
    /// drift left alone on purpose (dry run, `self_heal` off).
    AwaitChange,
    /// A transient failure, or live state that could not be observed:
    /// looked at again after this backoff.
    Requeue(Duration),
    /// Another writer keeps undoing tend's corrections: looked at again
    /// once the contested window has passed, not before.
    Contested(Duration),
    /// Needs a human or a new declaration; retrying would fail the same way.
    Blocked,
    /// Held by the operator (`tend pause`); a change of pauses starts a pass.
    Paused,
}

impl Action {
    /// When to look again without an event, if at all.
    pub fn requeue_after(&self) -> Option<Duration> {
        match self {
            Action::Requeue(d) | Action::Contested(d) => Some(*d),
            Action::AwaitChange | Action::Blocked | Action::Paused => None,
        }
    }

    /// A word for the action, as `sync` and logs show it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::AwaitChange => "await change",
            Action::Requeue(_) => "retry",
            Action::Contested(_) => "contested",
            Action::Blocked => "needs a human",
            Action::Paused => "paused",
        }
    }
}

/// The error policy: what happens next to a resource that came out of a
/// pass as `o`, at `now`. A failure is retried at the time its record was
/// given (its own backoff, or a failed hook's).
pub fn action_for(o: &Outcome, policy: &Policy, now: SystemTime) -> Action {
    match o.state {
        State::InSync | State::Drifted | State::Progressing => Action::AwaitChange,
        State::Blocked => Action::Blocked,
        State::Paused => Action::Paused,
        State::Contested => Action::Contested(policy.contested_window.min(backoff::MAX)),
        State::Failed | State::Unknown => {
            let wait = o
                .retry_at
                .and_then(|t| t.duration_since(now).ok())
                .unwrap_or(backoff::BASE);
            Action::Requeue(wait)
        }
    }
}

impl Outcome {
    /// The outcome a record stands for, with its retry time: what the
    /// error policy reads for outcomes kept in memory or read back.
    pub fn of_record(r: &ResourceRecord) -> Outcome {
        Outcome {
            retry_at: r.next_retry,
            ..Outcome::new(r.state, r.reason.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Policy {
        use clap::Parser;
        let argv = ["tend", "sync", "--repo", "/srv/a", "--root", "/srv/root"];
        let cli = crate::cli::Cli::parse_from(argv);
        crate::config::resolve(&cli.command.flags()).unwrap().policy
    }

    fn outcome(state: State, retry_at: Option<SystemTime>) -> Outcome {
        Outcome {
            retry_at,
            ..Outcome::new(state, None)
        }
    }

    #[test]
    fn every_state_has_one_next_action() {
        let (s, now) = (settings(), SystemTime::now());
        for state in State::ALL {
            let a = action_for(&outcome(state, None), &s, now);
            let expected = match state {
                State::InSync | State::Drifted | State::Progressing => Action::AwaitChange,
                State::Blocked => Action::Blocked,
                State::Paused => Action::Paused,
                State::Contested => Action::Contested(s.contested_window.min(backoff::MAX)),
                State::Failed | State::Unknown => Action::Requeue(backoff::BASE),
            };
            assert_eq!(a, expected, "{state:?}");
            // Only what can get better by waiting is looked at again.
            let waits = matches!(state, State::Failed | State::Unknown | State::Contested);
            assert_eq!(a.requeue_after().is_some(), waits, "{state:?}");
        }
    }

    #[test]
    fn a_failure_is_retried_at_its_records_time_never_in_the_past() {
        let (s, now) = (settings(), SystemTime::now());
        let later = now + Duration::from_secs(40);
        let a = action_for(&outcome(State::Failed, Some(later)), &s, now);
        assert_eq!(a, Action::Requeue(Duration::from_secs(40)));
        // A retry time already passed is due at the first backoff step.
        let past = now - Duration::from_secs(5);
        let a = action_for(&outcome(State::Failed, Some(past)), &s, now);
        assert_eq!(a, Action::Requeue(backoff::BASE));
    }

    #[test]
    fn the_contested_wait_is_the_window_capped_at_the_longest_backoff() {
        let mut s = settings();
        s.contested_window = Duration::from_secs(3600);
        let a = action_for(&outcome(State::Contested, None), &s, SystemTime::now());
        assert_eq!(a, Action::Contested(backoff::MAX));
        s.contested_window = Duration::from_secs(30);
        let a = action_for(&outcome(State::Contested, None), &s, SystemTime::now());
        assert_eq!(a, Action::Contested(Duration::from_secs(30)));
    }

    #[test]
    fn a_record_reads_as_its_outcome() {
        let mut r = ResourceRecord::new("files/file/a", State::Failed);
        let at = SystemTime::now() + Duration::from_secs(8);
        r.next_retry = Some(at);
        r.reason = Some("disk full".into());
        let o = Outcome::of_record(&r);
        assert_eq!(
            (o.state, o.retry_at, o.reason.as_deref()),
            (State::Failed, Some(at), Some("disk full"))
        );
    }
}

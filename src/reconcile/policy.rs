//! The error policy, in one place: how one resource came out of a pass
//! ([`Outcome`]) says what happens to it next ([`NextStep`]), as kube-rs's
//! reconcile/error_policy pair does; and every other "when next" of the
//! daemon and the commands: a failure's retry time, a failed hook's, the
//! next fetch, a pass over everything that failed, giving up on a source
//! that never answered. Each is read on the caller's clock (the context's,
//! for the pass and the daemon); the waits themselves come from
//! [`backoff`], the one retry arithmetic.

use std::time::{Duration, SystemTime};

use super::backoff::{self, Failures};
use super::outcome::Outcome;
use crate::config::Policy;
use crate::ledger::{ResourceRecord, State};

/// What happens to a resource after a pass: built only by the error
/// policy's named constructors, read through [`NextStep::kind`] and
/// [`NextStep::requeue_after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextStep {
    kind: StepKind,
    after: Option<Duration>,
}

/// The kinds of [`NextStep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepKind {
    /// Nothing until an event says it may have changed (a new revision, a
    /// resync, a watch or plugin notification): in sync, progressing, or
    /// drift left alone on purpose (dry run, `self_heal` off).
    AwaitChange,
    /// A transient failure, or live state that could not be observed:
    /// looked at again after a backoff.
    Retry,
    /// Another writer keeps undoing tend's corrections: looked at again
    /// once the contested window has passed, not before.
    Contested,
    /// Needs a human or a new declaration; retrying would fail the same way.
    Blocked,
    /// Held by the operator (`tend pause`); a change of pauses starts a pass.
    Paused,
}

impl NextStep {
    pub fn await_change() -> NextStep {
        NextStep::of(StepKind::AwaitChange, None)
    }

    pub fn retry_after(wait: Duration) -> NextStep {
        NextStep::of(StepKind::Retry, Some(wait))
    }

    pub fn contested_for(window: Duration) -> NextStep {
        NextStep::of(StepKind::Contested, Some(window))
    }

    pub fn blocked() -> NextStep {
        NextStep::of(StepKind::Blocked, None)
    }

    pub fn paused() -> NextStep {
        NextStep::of(StepKind::Paused, None)
    }

    fn of(kind: StepKind, after: Option<Duration>) -> NextStep {
        NextStep { kind, after }
    }

    pub fn kind(&self) -> StepKind {
        self.kind
    }

    /// When to look again without an event, if at all.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.after
    }

    /// A word for the step, as `sync` and logs show it.
    pub fn as_str(&self) -> &'static str {
        match self.kind {
            StepKind::AwaitChange => "await change",
            StepKind::Retry => "retry",
            StepKind::Contested => "contested",
            StepKind::Blocked => "needs a human",
            StepKind::Paused => "paused",
        }
    }
}

/// The error policy: what happens next to a resource that came out of a
/// pass as `o`, at `now`. A failure is retried at the time its record was
/// given (its own backoff, or a failed hook's).
pub fn next_step(o: &Outcome, policy: &Policy, now: SystemTime) -> NextStep {
    match o.state {
        State::InSync | State::Drifted | State::Progressing => NextStep::await_change(),
        State::Blocked => NextStep::blocked(),
        State::Paused => NextStep::paused(),
        State::Contested => NextStep::contested_for(policy.contested_window.min(backoff::MAX)),
        State::Failed | State::Unknown => {
            let wait = o
                .retry_at
                .and_then(|t| t.duration_since(now).ok())
                .unwrap_or(backoff::BASE);
            NextStep::retry_after(wait)
        }
    }
}

/// How long the daemon waits before it fetches again. A fetch that failed
/// counts in `fetches` and waits its backoff; one that succeeded clears
/// it and waits the poll interval, spread, unless the fetched tree could not
/// be published (`unpublished` passes in a row), which is tried again
/// sooner with that backoff. Never longer than the interval.
pub fn next_fetch(
    fetched: bool,
    fetches: &mut Failures,
    unpublished: &Failures,
    interval: Duration,
) -> Duration {
    if !fetched {
        return fetches.failed(interval);
    }
    fetches.succeeded();
    match unpublished.count() {
        0 => backoff::spread(interval),
        _ => unpublished.wait(interval),
    }
}

/// A pass over everything failed as a whole (its ledger could not be
/// written): when it runs again.
pub fn next_full_pass(failures: &mut Failures) -> Duration {
    failures.failed(backoff::MAX)
}

/// The wait before the next periodic pass or poll of `period`, spread so
/// hosts started together do not keep in step.
pub fn period(period: Duration) -> Duration {
    backoff::spread(period)
}

/// As git-sync's `--max-failures`: with `allowed` failed fetches allowed
/// before giving up, whether those counted in `fetches` are one too many.
pub fn gives_up(fetches: &Failures, allowed: u32) -> bool {
    fetches.count() > allowed
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
            let a = next_step(&outcome(state, None), &s, now);
            let expected = match state {
                State::InSync | State::Drifted | State::Progressing => NextStep::await_change(),
                State::Blocked => NextStep::blocked(),
                State::Paused => NextStep::paused(),
                State::Contested => NextStep::contested_for(s.contested_window.min(backoff::MAX)),
                State::Failed | State::Unknown => NextStep::retry_after(backoff::BASE),
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
        let a = next_step(&outcome(State::Failed, Some(later)), &s, now);
        assert_eq!(a, NextStep::retry_after(Duration::from_secs(40)));
        // A retry time already passed is due at the first backoff step.
        let past = now - Duration::from_secs(5);
        let a = next_step(&outcome(State::Failed, Some(past)), &s, now);
        assert_eq!(a, NextStep::retry_after(backoff::BASE));
    }

    #[test]
    fn the_contested_wait_is_the_window_capped_at_the_longest_backoff() {
        let mut s = settings();
        s.contested_window = Duration::from_secs(3600);
        let a = next_step(&outcome(State::Contested, None), &s, SystemTime::now());
        assert_eq!(a, NextStep::contested_for(backoff::MAX));
        s.contested_window = Duration::from_secs(30);
        let a = next_step(&outcome(State::Contested, None), &s, SystemTime::now());
        assert_eq!(a, NextStep::contested_for(Duration::from_secs(30)));
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

    #[test]
    fn fetches_wait_their_backoff_then_the_interval_and_give_up_past_the_allowed() {
        let interval = Duration::from_secs(60);
        let (mut fetches, mut unpublished) = (Failures::default(), Failures::default());
        let mut waits = Vec::new();
        for _ in 0..8 {
            waits.push(next_fetch(false, &mut fetches, &unpublished, interval));
        }
        assert!(waits[0] <= backoff::BASE.mul_f64(1.11), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= interval), "{waits:?}");
        assert_eq!(waits[7], interval, "capped at the interval");
        assert!(!gives_up(&fetches, 8) && gives_up(&fetches, 7));
        // A good fetch clears the count and waits the interval, spread.
        let w = next_fetch(true, &mut fetches, &unpublished, interval);
        assert_eq!(fetches.count(), 0);
        assert!(
            w >= interval.mul_f64(0.9) && w <= interval.mul_f64(1.1),
            "{w:?}"
        );
        // A tree not yet published is tried again sooner.
        unpublished.failed(backoff::MAX);
        let w = next_fetch(true, &mut fetches, &unpublished, interval);
        assert!(w <= backoff::BASE.mul_f64(1.11), "{w:?}");
    }

    #[test]
    fn passes_over_everything_and_resources_back_off_alike() {
        let mut f = Failures::default();
        let waits: Vec<Duration> = (0..4).map(|_| next_full_pass(&mut f)).collect();
        let now = SystemTime::now();
        for (n, w) in waits.iter().enumerate() {
            let d = backoff::delay(n as u32 + 1);
            assert!(*w >= d.mul_f64(0.89) && *w <= d.mul_f64(1.11), "{n}: {w:?}");
            let at = backoff::retry_at(n as u32 + 1, now)
                .duration_since(now)
                .unwrap();
            assert!(
                at >= d.mul_f64(0.89) && at <= d.mul_f64(1.11),
                "{n}: {at:?}"
            );
        }
    }
}

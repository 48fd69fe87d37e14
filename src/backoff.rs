//! The backoff, the arithmetic of the one retry rule: 1 s doubling to
//! 5 min, with jitter so a fleet of failures does not retry in lockstep,
//! and intervals spread by a tenth either way. Only this file and the error
//! policy (reconcile/policy.rs) compute a wait; everything else asks them
//! (tests/house.rs checks it). It is a leaf so the targets and the elector,
//! which the pass imports, can reach it without an import circle.

use std::time::{Duration, SystemTime};

pub const BASE: Duration = Duration::from_secs(1);
pub const MAX: Duration = Duration::from_secs(300);

/// The delay before retry number `attempts` (1 = first retry), without jitter.
pub fn delay(attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(1).min(16);
    (BASE * (1u32 << shift)).min(MAX)
}

/// `delay(attempts)` spread by up to +/-10 %, never above [`MAX`].
pub fn jittered(attempts: u32) -> Duration {
    spread(delay(attempts)).min(MAX)
}

/// When something that has now failed `attempts` times in a row (a
/// resource's write, a hook) is tried again.
pub fn retry_at(attempts: u32, now: SystemTime) -> SystemTime {
    now + jittered(attempts)
}

/// A period (a poll or resync interval) spread by up to +/-10 %, so hosts
/// started together do not keep in step.
pub fn spread(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.9..1.1))
}

/// Things of one kind that failed in a row (fetches, passes over
/// everything, plugin starts, connections): the next try waits the backoff
/// of the count, capped where the caller's period is shorter.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Failures(u32);

impl Failures {
    /// One more failure: the wait before the next try, at most `cap`.
    pub fn failed(&mut self, cap: Duration) -> Duration {
        self.0 = self.0.saturating_add(1);
        jittered(self.0).min(cap)
    }

    /// A success: the next failure waits the first step again.
    pub fn succeeded(&mut self) {
        self.0 = 0;
    }

    pub fn count(&self) -> u32 {
        self.0
    }

    /// The wait after `count()` failures, without counting one more.
    pub fn wait(&self, cap: Duration) -> Duration {
        match self.0 {
            0 => Duration::ZERO,
            n => jittered(n).min(cap),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        assert_eq!(delay(1), Duration::from_secs(1));
        assert_eq!(delay(2), Duration::from_secs(2));
        assert_eq!(delay(5), Duration::from_secs(16));
        assert_eq!(delay(9), Duration::from_secs(256));
        assert_eq!(delay(10), MAX);
        assert_eq!(delay(1000), MAX);
        for a in 1..20 {
            let j = jittered(a);
            assert!(j <= MAX && j >= delay(a).mul_f64(0.89), "{a}: {j:?}");
        }
    }

    #[test]
    fn failures_count_up_cap_and_start_again() {
        let mut f = Failures::default();
        assert_eq!(f.wait(MAX), Duration::ZERO);
        let first = f.failed(MAX);
        assert!(first >= BASE.mul_f64(0.89) && first <= BASE.mul_f64(1.11));
        for _ in 0..6 {
            f.failed(MAX);
        }
        assert_eq!(f.count(), 7);
        assert!(f.wait(MAX) >= delay(7).mul_f64(0.89));
        assert_eq!(f.failed(Duration::from_secs(3)), Duration::from_secs(3));
        f.succeeded();
        assert_eq!((f.count(), f.wait(MAX)), (0, Duration::ZERO));
    }

    #[test]
    fn a_spread_period_stays_within_a_tenth() {
        for _ in 0..100 {
            let d = spread(Duration::from_secs(60));
            assert!(d >= Duration::from_secs(54) && d <= Duration::from_secs(66));
        }
    }
}

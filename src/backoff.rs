//! Exponential backoff, the one retry rule: 1 s doubling to 5 min, with
//! jitter so a fleet of failures does not retry in lockstep. Resources are
//! retried by it (reconcile), and connections made again (targets).

use std::time::Duration;

pub const BASE: Duration = Duration::from_secs(1);
pub const MAX: Duration = Duration::from_secs(300);

/// The delay before retry number `attempts` (1 = first retry), without jitter.
pub fn delay(attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(1).min(16);
    (BASE * (1u32 << shift)).min(MAX)
}

/// `delay(attempts)` spread by up to +/-10 %, never above [`MAX`].
pub fn jittered(attempts: u32) -> Duration {
    let d = delay(attempts);
    let spread = rand::random_range(0.9..1.1);
    d.mul_f64(spread).min(MAX)
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
}

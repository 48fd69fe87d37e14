//! The wall clock a pass reads: when it ran, when a failure is retried,
//! which corrections fall in the contested window, which pauses and pins
//! are still in force. Held by the [`Context`](super::Context), so a test
//! can run the same rules on a clock it moves itself.

use std::time::SystemTime;

/// The time now, as the pass and the daemon's schedule see it.
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The system's wall clock: what every command runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

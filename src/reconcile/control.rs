//! Signals between the loop and a running pass: shutdown asks the pass to
//! stop between writes, and the loop and passes show they are alive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Default)]
pub struct Control {
    cancel: AtomicBool,
    /// Unix milliseconds of the last sign of life of the loop or a pass;
    /// shared with the HTTP health check and the systemd watchdog.
    heartbeat: Arc<AtomicU64>,
}

pub fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Control {
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
    pub fn beat(&self) {
        self.heartbeat
            .store(unix_millis(SystemTime::now()), Ordering::Relaxed);
    }
    pub fn last_beat_millis(&self) -> u64 {
        self.heartbeat.load(Ordering::Relaxed)
    }
    pub fn heartbeat(&self) -> Arc<AtomicU64> {
        self.heartbeat.clone()
    }
}

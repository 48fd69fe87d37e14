//! Signals between the loop and a running pass: shutdown asks the pass to
//! stop between writes, and the loop and passes show they are alive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::model::ResourceId;

/// Told of each resource just before tend writes it.
pub type WriteObserver = Arc<dyn Fn(&ResourceId) + Send + Sync>;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Default)]
pub struct Control {
    cancel: AtomicBool,
    /// Unix milliseconds of the last sign of life of the loop or a pass;
    /// shared with the HTTP health check and the systemd watchdog.
    heartbeat: Arc<AtomicU64>,
    /// The file-system watcher, so it can tell tend's own writes from drift.
    on_write: Mutex<Option<WriteObserver>>,
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
    pub fn observe_writes(&self, f: WriteObserver) {
        *self.on_write.lock().expect("write observer") = Some(f);
    }
    /// Called just before tend writes `id`.
    pub fn writing(&self, id: &ResourceId) {
        if let Some(f) = self.on_write.lock().expect("write observer").as_ref() {
            f(id);
        }
    }
}

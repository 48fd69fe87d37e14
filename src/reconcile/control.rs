//! Signals between the loop and a running pass: shutdown asks the pass to
//! stop between writes, and the loop and passes show they are alive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::model::ResourceId;

use std::time::{SystemTime, UNIX_EPOCH};

use crate::target::Left;

/// Told of each resource tend writes, before and after: a file-system
/// watcher tells the events of tend's own writes by what they left.
pub trait WriteObserver: Send + Sync {
    /// Just before tend writes `id`.
    fn writing(&self, id: &ResourceId);
    /// The write of `id` ended; `left` is what it left at the resource's
    /// path, when it wrote and the target can tell.
    fn wrote(&self, id: &ResourceId, left: Option<&Left>);
}

#[derive(Default)]
pub struct Control {
    cancel: AtomicBool,
    /// Unix milliseconds of the last sign of life of the loop or a pass;
    /// shared with the HTTP health check and the systemd watchdog.
    heartbeat: Arc<AtomicU64>,
    /// The file-system watcher, so it can tell tend's own writes from drift.
    on_write: Mutex<Option<Arc<dyn WriteObserver>>>,
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
    pub fn observe_writes(&self, f: Arc<dyn WriteObserver>) {
        *self.on_write.lock().expect("write observer") = Some(f);
    }
    pub fn unobserve_writes(&self) {
        *self.on_write.lock().expect("write observer") = None;
    }
    fn observer(&self) -> Option<Arc<dyn WriteObserver>> {
        self.on_write.lock().expect("write observer").clone()
    }
    /// Called just before tend writes `id`.
    pub fn writing(&self, id: &ResourceId) {
        if let Some(f) = self.observer() {
            f.writing(id);
        }
    }
    /// Called once the write of `id` ended, with what it left.
    pub fn wrote(&self, id: &ResourceId, left: Option<&Left>) {
        if let Some(f) = self.observer() {
            f.wrote(id, left);
        }
    }
}

//! What the loop shares with the HTTP server and systemd: the one writer
//! (context and recorder), the current revision, metrics and readiness.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::metrics::Metrics;
use crate::reconcile::{Context, Control, Recorder, Revision};

/// The context and recorder, used only from blocking tasks, one at a time:
/// the Git handles inside are not shareable between threads.
pub(crate) struct Worker {
    pub ctx: Context,
    pub rec: Recorder,
}

/// What the loop shares with the HTTP server and systemd.
pub(crate) struct Shared {
    pub worker: Arc<Mutex<Worker>>,
    /// The revision being reconciled: the loop sets it, the server reads it.
    current: Arc<Mutex<Option<Arc<Revision>>>>,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    pub ctl: Arc<Control>,
}

impl Shared {
    pub fn new(worker: Worker, metrics: Arc<Metrics>, ctl: Arc<Control>) -> Shared {
        Shared {
            worker: Arc::new(Mutex::new(worker)),
            current: Arc::new(Mutex::new(None)),
            metrics,
            ready: Arc::new(AtomicBool::new(false)),
            ctl,
        }
    }

    pub fn current(&self) -> Option<Arc<Revision>> {
        self.current.lock().expect("current revision").clone()
    }

    pub fn set_current(&self, rev: Arc<Revision>) {
        *self.current.lock().expect("current revision") = Some(rev);
    }

    /// Takes the current revision out, so that loading the next one can
    /// reuse its desired state when nothing else holds it.
    pub fn take_current(&self) -> Option<Arc<Revision>> {
        self.current.lock().expect("current revision").take()
    }

    /// A handle on the current revision for a reader on another thread.
    pub fn current_handle(&self) -> Arc<Mutex<Option<Arc<Revision>>>> {
        self.current.clone()
    }
}

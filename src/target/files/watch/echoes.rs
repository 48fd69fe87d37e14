//! The target's side of its watch: the files target tells the watch of
//! each write it makes, before and after, so the events of its own writes
//! are not taken as drift while every other change still is.

use std::sync::{Arc, Mutex, Weak};

use super::index::Index;
use crate::model::ResourceId;
use crate::target::{Applied, ChangeSink, Left, Recheck, TargetError};

/// What a watch shares with its target for telling own writes: held by
/// the watch alone, so it ends with the watch.
pub(in crate::target::files) struct Echoes {
    pub(super) index: Arc<Mutex<Index>>,
    pub(super) sink: ChangeSink,
}

impl Echoes {
    /// tend is about to write `id`.
    pub(in crate::target::files) fn writing(&self, id: &ResourceId) {
        self.index.lock().expect("watch index").writing(id);
    }

    /// The write of `id` ended with `result`: an event meanwhile that was
    /// not its own sends `id` to the sink.
    pub(in crate::target::files) fn wrote(
        &self,
        id: &ResourceId,
        result: &Result<Applied, TargetError>,
    ) {
        let left: Option<&Left> = result.as_ref().ok().and_then(|a| a.left.as_ref());
        let changed = self.index.lock().expect("watch index").wrote(id, left);
        if let Some(id) = changed {
            (self.sink)(Recheck::Keys(vec![id]));
        }
    }
}

/// Where the target finds its watch, while there is one.
#[derive(Default)]
pub(in crate::target::files) struct Hook(Mutex<Weak<Echoes>>);

impl Hook {
    /// The watch being begun is the one told of writes from now on.
    pub(in crate::target::files) fn attach(&self, echoes: &Arc<Echoes>) {
        *self.0.lock().expect("watch hook") = Arc::downgrade(echoes);
    }

    /// No watch is told of writes any more.
    pub(in crate::target::files) fn detach(&self) {
        *self.0.lock().expect("watch hook") = Weak::new();
    }

    /// The watch to tell of a write, when one is running.
    pub(in crate::target::files) fn echoes(&self) -> Option<Arc<Echoes>> {
        self.0.lock().expect("watch hook").upgrade()
    }
}

//! What one apply has done so far: the writes and backups it made, and
//! the directories it synced or left for its batch to sync.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::transient;
use crate::model::{Backup, ResourceId};
use crate::target::TargetError;

/// What one apply has done so far, and where overwritten content goes.
pub(super) struct Ops<'a> {
    pub(super) id: &'a ResourceId,
    pub(super) backup: &'a dyn Backup,
    pub(super) writes: u64,
    pub(super) backups: Vec<String>,
    pub(super) dir_syncs: &'a AtomicU64,
    /// Inside a batch: directories that gained an entry other than by the
    /// final rename (a new subdirectory), left for the batch to sync once.
    pub(super) deferred: Option<Vec<OwnedFd>>,
    /// What the last write of the change left at its path.
    pub(super) left: Option<crate::target::Left>,
}

impl Ops<'_> {
    /// fsync of a directory, counted.
    pub(super) fn sync_dir(&self, dir: BorrowedFd) -> rustix::io::Result<()> {
        counted_fsync(self.dir_syncs, dir)
    }

    /// Syncs a directory now or, inside a batch, leaves it for the batch.
    pub(super) fn sync_dir_or_defer(&mut self, dir: BorrowedFd) -> rustix::io::Result<()> {
        match &mut self.deferred {
            Some(deferred) => {
                deferred.push(rustix::io::fcntl_dupfd_cloexec(dir, 0)?);
                Ok(())
            }
            None => self.sync_dir(dir),
        }
    }

    /// Saves content about to be overwritten or removed; the write must not
    /// go ahead when this fails.
    pub(super) fn save(&mut self, path: &str, bytes: &[u8]) -> Result<(), TargetError> {
        let reference = self
            .backup
            .save(self.id, bytes)
            .map_err(|e| transient(path, "back up", e))?;
        self.backups.push(reference);
        Ok(())
    }
}

pub(super) fn counted_fsync(counter: &AtomicU64, dir: BorrowedFd) -> rustix::io::Result<()> {
    counter.fetch_add(1, Ordering::Relaxed);
    rustix::fs::fsync(dir)
}

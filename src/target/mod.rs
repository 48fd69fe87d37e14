//! The target adapter contract: observe many resources at once, tell absent
//! from unknown, apply the smallest patch. One folder per adapter.

pub mod files;

use crate::model::{Backup, Change, ContentSource, Observed, RelPath};

/// How a failed apply should be treated by the reconciler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Worth retrying with backoff (I/O errors, a busy resource, disk full).
    #[error("{0}")]
    Transient(String),
    /// Needs a human or a new declaration (path escapes the root, unknown
    /// owner name, a non-empty directory where a file must go).
    #[error("{0}")]
    Terminal(String),
}

/// What an apply did, for the ledger and the audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Number of write system calls that changed the target (renames,
    /// chmods, chowns, unlinks, mkdirs): zero means nothing was touched.
    pub writes: u64,
    /// Backup references of content that was overwritten or deleted.
    pub backups: Vec<String>,
}

/// A target adapter instance.
pub trait Target: Send + Sync {
    /// The configured name (`files`, ...).
    fn name(&self) -> &str;
    /// The resource kinds it serves.
    fn kinds(&self) -> &'static [&'static str];
    /// Observe the given paths; one answer per path, in order.
    fn observe(&self, paths: &[&RelPath]) -> Vec<Observed>;
    /// Read the live bytes at a path (for rendering diffs); `None` when there
    /// is no regular file there.
    fn read_live(&self, path: &RelPath) -> std::io::Result<Option<Vec<u8>>>;
    /// Make live state at `change.path` equal to `change.desired`, touching
    /// only the fields in `change.fields`; for deletes, remove the object.
    fn apply(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Result<Applied, TargetError>;
    /// Apply several changes; results in input order. Adapters that can
    /// make a batch durable together (one directory sync per directory)
    /// override this.
    fn apply_batch(
        &self,
        changes: &[&Change],
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Vec<Result<Applied, TargetError>> {
        changes
            .iter()
            .map(|c| self.apply(c, content, backup))
            .collect()
    }
    /// Remove tend's leftover temp files (`.tend-*.tmp`) in the directories of
    /// the given paths; returns how many were removed.
    fn clean_temp(&self, paths: &[&RelPath]) -> usize;
    /// Persist caches (the stat cache) after a pass.
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

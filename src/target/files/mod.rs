//! The `files` target: regular files and symlinks under a root directory,
//! resolved as if the root were `/`, written atomically, observed through a
//! persistent stat cache.

mod attrs;
mod cachefile;
mod decide;
mod observe;
mod remove;
mod resolve;
mod statcache;
mod write;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests_apply;
#[cfg(test)]
mod tests_attack;
#[cfg(test)]
mod tests_observe;

use std::fmt::Display;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::{Backup, Change, ContentSource, Observed, RelPath, ResourceId};
use crate::target::{Applied, Target, TargetError};

use resolve::Root;
use statcache::StatCache;

/// A `files` target instance: one root directory, one stat cache.
pub struct FilesTarget {
    name: String,
    root: Root,
    cache: StatCache,
    writes: AtomicU64,
    hashes: AtomicU64,
}

impl FilesTarget {
    /// Opens `root` as a directory handle; the stat cache lives in
    /// `<state_dir>/statcache/<name>`. A state dir that cannot be written
    /// only costs performance: the cache is then neither trusted nor kept.
    pub fn new(name: &str, root: &Path, state_dir: &Path) -> std::io::Result<FilesTarget> {
        let root = Root::open(root)?;
        let cache = StatCache::open(state_dir, name, root.path());
        Ok(FilesTarget {
            name: name.to_string(),
            root,
            cache,
            writes: AtomicU64::new(0),
            hashes: AtomicU64::new(0),
        })
    }

    /// Write system calls made on the target since start (renames, chmods,
    /// chowns, unlinks, mkdirs, symlinks), successful or not in the end.
    pub fn writes_total(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Files whose content was read and hashed since start: what the stat
    /// cache exists to avoid.
    pub fn hashes_total(&self) -> u64 {
        self.hashes.load(Ordering::Relaxed)
    }

    /// While set, every observation re-reads and re-hashes file content
    /// instead of trusting the stat cache (a full re-hash on demand).
    pub fn set_rehash(&self, rehash: bool) {
        self.cache.set_rehash(rehash);
    }
}

impl Target for FilesTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn kinds(&self) -> &'static [&'static str] {
        &["file", "symlink"]
    }

    fn observe(&self, paths: &[&RelPath]) -> Vec<Observed> {
        self.observe_paths(paths)
    }

    fn read_live(&self, path: &RelPath) -> std::io::Result<Option<Vec<u8>>> {
        self.read_live_bytes(path)
    }

    fn apply(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Result<Applied, TargetError> {
        let mut ops = Ops {
            id: &change.id,
            backup,
            writes: 0,
            backups: Vec::new(),
        };
        let result = self.apply_change(change, content, &mut ops);
        // Writes made before a failure changed the target all the same.
        self.writes.fetch_add(ops.writes, Ordering::Relaxed);
        result.map(|()| Applied {
            writes: ops.writes,
            backups: ops.backups,
        })
    }

    fn clean_temp(&self, paths: &[&RelPath]) -> usize {
        self.clean_temp_files(paths)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.cache.flush()
    }
}

/// What one apply has done so far, and where overwritten content goes.
pub(super) struct Ops<'a> {
    id: &'a ResourceId,
    backup: &'a dyn Backup,
    writes: u64,
    backups: Vec<String>,
}

impl Ops<'_> {
    /// Saves content about to be overwritten or removed; the write must not
    /// go ahead when this fails.
    fn save(&mut self, path: &str, bytes: &[u8]) -> Result<(), TargetError> {
        let reference = self
            .backup
            .save(self.id, bytes)
            .map_err(|e| transient(path, "back up", e))?;
        self.backups.push(reference);
        Ok(())
    }
}

/// A retryable failure, naming the path (root-relative) and the operation.
fn transient(path: &str, op: &str, err: impl Display) -> TargetError {
    TargetError::Transient(format!("{}: {op}: {err}", shown(path)))
}

/// The root itself is shown as `.` in messages.
fn shown(path: &str) -> &str {
    if path.is_empty() {
        "."
    } else {
        path
    }
}

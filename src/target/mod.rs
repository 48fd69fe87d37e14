//! The target adapter contract: observe many resources at once, tell absent
//! from unknown, apply the smallest patch. One folder per adapter.

pub mod etcd;
pub mod exec;
pub mod files;

use std::sync::Arc;

use git2::Oid;

use crate::model::{Backup, Change, ContentSource, Observed, RelPath, ResourceId, Spec};

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

/// Why a target could not be built from its config, by adapter.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Files(#[from] files::RootError),
    #[error(transparent)]
    Exec(#[from] exec::StartError),
    #[error(transparent)]
    Etcd(#[from] etcd::ClientError),
}

/// What sweeping tend's leftover temp files did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub removed: usize,
    /// Temp files found but not removed, or directories that could not be
    /// listed to the end: the sweep is not known to have left none.
    pub left: usize,
}

/// What an apply did, for the ledger and the audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Number of write system calls that changed the target (renames,
    /// chmods, chowns, unlinks, mkdirs): zero means nothing was touched.
    pub writes: u64,
    /// Backup references of content that was overwritten or deleted.
    pub backups: Vec<String>,
    /// What the write left at the resource's path, when the target can
    /// tell (`None`: nothing was written, or the target has no paths).
    pub left: Option<Left>,
}

/// What a write left at its path, as `lstat` shows it right after: a
/// watcher tells the events of tend's own write (the path still shows just
/// this) from another writer's change (anything else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    Absent,
    Entry {
        dev: u64,
        ino: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        /// Nanoseconds since the epoch.
        mtime: i64,
        ctime: i64,
    },
}

impl Left {
    /// What stands at `path` now, its last component not followed; `None`
    /// when that cannot be told.
    pub fn at(path: &std::path::Path) -> Option<Left> {
        use std::os::unix::fs::MetadataExt;
        let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
        match std::fs::symlink_metadata(path) {
            Ok(m) => Some(Left::Entry {
                dev: m.dev(),
                ino: m.ino(),
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                size: m.size(),
                mtime: ns(m.mtime(), m.mtime_nsec()),
                ctime: ns(m.ctime(), m.ctime_nsec()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Left::Absent),
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Some(Left::Absent),
            Err(_) => None,
        }
    }
}

/// One resource to observe: its identity, its key inside the target (a path
/// under the root, or `<kind>/<name>`), and its declaration when it has one
/// (inventory members being pruned have none).
#[derive(Debug, Clone)]
pub struct Probe<'a> {
    pub id: &'a ResourceId,
    /// A declared resource's shares its identity's bytes.
    pub path: RelPath,
    pub spec: Option<&'a Spec>,
}

/// What a target asks the loop to look at again: nothing, these
/// resources, or all of them (it cannot tell which: a watch's queue
/// overflowed or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    Nothing,
    Keys(Vec<ResourceId>),
    All,
}

/// Where a target sends what may have drifted (a plugin's `changed`
/// notification, a file-system event); the daemon turns it into work.
pub type ChangeSink = Arc<dyn Fn(Recheck) + Send + Sync>;

/// A target's watch on its live state, begun by [`Target::subscribe`] and
/// ended by dropping it. After each pass the daemon tells it which of the
/// target's resources are managed; each answer names what to look at
/// again because its watch began after the pass looked (a change made in
/// between would be missed otherwise).
pub trait Subscription: Send {
    /// The target's whole managed set, each identity with its path: the
    /// watch follows it from now on.
    fn manage(&mut self, managed: &mut dyn Iterator<Item = (&ResourceId, &str)>) -> Recheck;
    /// A few identities only, each with its path now, or `None` when it is
    /// no longer managed; the rest of the managed set stays as it was.
    fn patch(&mut self, changes: &mut dyn Iterator<Item = (&ResourceId, Option<&str>)>) -> Recheck;
    /// Every change of the managed resources is seen as it happens.
    fn healthy(&self) -> bool;
    /// A line for status: what is watched, or why watching is degraded.
    fn describe(&self) -> String;
}

/// A target adapter instance.
pub trait Target: Send + Sync {
    /// The configured name (`files`, ...).
    fn name(&self) -> &str;
    /// The resource kinds it serves; an error says why they are not known
    /// (a plugin that has not answered `initialize` yet).
    fn kinds(&self) -> Result<Vec<String>, TargetError>;
    /// Observe many resources at once; one answer per probe, in order.
    fn observe(&self, probes: &[Probe]) -> Vec<Observed>;
    /// The most probes one [`Target::observe`] call is best given, for a
    /// target that observes each resource apart (a pass then gives its
    /// resources a batch at a time, holding no more answers than that);
    /// `None`, the default, for one that reads its whole store per call.
    fn observe_limit(&self) -> Option<usize> {
        None
    }
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
    /// Apply many changes as if one by one, in order; one result per change,
    /// in input order, each meaning what [`Target::apply`] would have
    /// returned. An adapter may share costly steps between them (the files
    /// target makes new content durable together and syncs each directory
    /// once); no result is returned before its change is durable.
    fn apply_batch(
        &self,
        changes: &[&Change],
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Vec<Result<Applied, TargetError>> {
        changes
            .iter()
            .map(|change| self.apply(change, content, backup))
            .collect()
    }
    /// Remove tend's leftover temp files (`.tend-*.tmp`) in the directories of
    /// the given paths.
    fn clean_temp(&self, paths: &[&RelPath]) -> Swept;
    /// Persist caches (the stat cache) after a pass.
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    /// Let go of what the next pass can read again (the stat cache, once
    /// saved): a daemon calls it between full passes, where it waits.
    fn rest(&self) {}
    /// Start sending what may have drifted to `sink`; subscribing again
    /// replaces the sink. With `watch` (`policy.watch`), a target that can
    /// watch its live state begins to, and returns the subscription the
    /// daemon keeps it following the managed set through; without, only
    /// what the target is told anyway (a plugin's `changed`) is sent.
    /// Targets that cannot tell when live state changes ignore this.
    fn subscribe(&self, sink: ChangeSink, watch: bool) -> Option<Box<dyn Subscription>> {
        let _ = (sink, watch);
        None
    }
    /// Before a pass that writes revision `rev`. A target that publishes
    /// whole revisions (files with `link`) makes the one for `rev` where
    /// the pass observes and writes, starting from what is published now
    /// for the paths `carried()` names (its inventory); others write in
    /// place and ignore this. On an error, what the pass observes is
    /// unknown.
    fn begin(&self, rev: Oid, carried: &dyn Fn() -> Vec<RelPath>) -> Result<(), TargetError> {
        let _ = (rev, carried);
        Ok(())
    }
    /// Revisions the target keeps whole beside what it shows (files with
    /// `link`: the trees kept for a rollback); the mirror keeps them too,
    /// so a pin can name them.
    fn kept_revisions(&self) -> Vec<Oid> {
        Vec::new()
    }
    /// What was written since [`Target::begin`] may not be what readers
    /// see yet: [`Target::publish`] shows it them. Also true before any
    /// pass, while that is not known.
    fn unpublished(&self) -> bool {
        false
    }
    /// Makes what was written since [`Target::begin`] what readers see, at
    /// once; true when it switched. Refused while a write into it failed.
    fn publish(&self) -> Result<bool, TargetError> {
        Ok(false)
    }
}

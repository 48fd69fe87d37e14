//! The `files` target: regular files and symlinks under a root directory,
//! resolved as if the root were `/`, written atomically, observed through a
//! persistent stat cache.

mod at;
mod attrs;
mod batch;
mod cachefile;
mod config;
mod decide;
mod durable;
mod observe;
mod ops;
mod remove;
mod resolve;
mod statcache;
mod stattable;
mod temp;
mod trees;
mod watch;
mod write;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests_apply;
#[cfg(test)]
mod tests_attack;
#[cfg(test)]
mod tests_batch;
#[cfg(test)]
mod tests_observe;
#[cfg(test)]
mod tests_trees;

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use git2::Oid;

use crate::model::{Backup, Change, ContentSource, Observed, RelPath, Spec};
use crate::target::{Applied, ChangeSink, Probe, Subscription, Swept, Target, TargetError};

pub use config::{check_link_name, FilesConfig, Link, LinkNameError, LINK_KEEP};
use ops::{counted_fsync, Ops};
use resolve::Root;
use statcache::StatCache;
use trees::Trees;
use watch::FilesWatch;

/// Where paths resolve now: the root, or with `link` the tree of a
/// revision under it.
#[derive(Clone)]
enum View {
    Tree(Arc<Root>),
    /// With `link`, before any tree was published: nothing is there.
    Empty,
    /// With `link`, the tree for the revision could not be made: what is
    /// there is unknown.
    Broken(String),
}

/// The kinds this adapter serves (`directory` declares files).
pub const KINDS: [&str; 2] = ["file", "symlink"];

/// A `files` target instance: one root directory, one stat cache.
pub struct FilesTarget {
    name: String,
    /// The root as configured.
    base: Arc<Root>,
    /// Where paths resolve now: `base`, or with `link` a revision's tree.
    view: RwLock<View>,
    /// Whole-tree publishing, with `link`.
    trees: Option<Trees>,
    cache: StatCache,
    writes: AtomicU64,
    hashes: AtomicU64,
    dir_syncs: AtomicU64,
    fs_syncs: AtomicU64,
    /// Whether a batch may make its writes durable with syncfs on the
    /// root's file system instead of one fsync per file and directory.
    whole_fs: bool,
    /// The watch told of this target's writes, while one runs.
    watch: watch::Hook,
    /// The empty directory observed in place of a root that is not there,
    /// for a command that only looks (removed with the target).
    stand_in: Option<tempfile::TempDir>,
}

/// A root that could not be opened, made, or stood in for.
#[derive(Debug, thiserror::Error)]
#[error("cannot {doing} root {}: {source}", root.display())]
pub struct RootError {
    doing: &'static str,
    root: std::path::PathBuf,
    source: std::io::Error,
}

impl FilesTarget {
    /// The target a config block describes. A missing root is made, as a
    /// sidecar's empty volume would be; for a command that only looks
    /// (`make_root` false) it is not, and is observed as an empty
    /// directory: everything declared shows as to be created.
    pub fn build(
        name: &str,
        config: &FilesConfig,
        state_dir: &Path,
        make_root: bool,
    ) -> Result<FilesTarget, RootError> {
        let root = &config.root;
        let failed = |doing: &'static str| {
            move |source| RootError {
                doing,
                root: root.clone(),
                source,
            }
        };
        if !root.exists() && !make_root {
            let empty = tempfile::tempdir().map_err(failed("stand in for"))?;
            let mut target =
                FilesTarget::new(name, empty.path(), state_dir).map_err(failed("stand in for"))?;
            target.stand_in = Some(empty);
            return Ok(target);
        }
        if !root.exists() {
            std::fs::create_dir_all(root).map_err(failed("create"))?;
        }
        let target = FilesTarget::new(name, root, state_dir).map_err(failed("open"))?;
        Ok(match config.link() {
            Some(link) => target.publishing(link),
            None => target,
        })
    }

    /// Opens `root` as a directory handle; the stat cache lives in
    /// `<state_dir>/statcache/<name>`. A state dir that cannot be written
    /// only costs performance: the cache is then neither trusted nor kept.
    pub fn new(name: &str, root: &Path, state_dir: &Path) -> std::io::Result<FilesTarget> {
        let root = Arc::new(Root::open(root)?);
        let cache = StatCache::open(state_dir, name, root.path());
        let whole_fs = !root.is_slash() && durable::syncfs_reports_errors();
        Ok(FilesTarget {
            name: name.to_string(),
            view: RwLock::new(View::Tree(root.clone())),
            base: root,
            trees: None,
            cache,
            writes: AtomicU64::new(0),
            hashes: AtomicU64::new(0),
            dir_syncs: AtomicU64::new(0),
            fs_syncs: AtomicU64::new(0),
            whole_fs,
            watch: watch::Hook::default(),
            stand_in: None,
        })
    }

    /// Publishes whole trees (SPEC §10): each revision under
    /// `<root>/.tend/revs/<commit>`, `<root>/<link.name>` switched to it.
    /// Until a pass chooses a tree, paths resolve in the published one.
    pub fn publishing(mut self, link: Link) -> FilesTarget {
        let trees = Trees::new(link);
        let view = match self.published(&trees) {
            Some((_, tree)) => View::Tree(Arc::new(tree)),
            None => View::Empty,
        };
        self.trees = Some(trees);
        self.set_view(view);
        self
    }

    fn view(&self) -> View {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_view(&self, view: View) {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// The tree writes go to; none is an error worth retrying.
    fn tree_for_write(&self) -> Result<Arc<Root>, TargetError> {
        match self.view() {
            View::Tree(tree) => Ok(tree),
            View::Empty => Err(TargetError::Transient(
                "no tree to write to was made for this revision".into(),
            )),
            View::Broken(reason) => Err(TargetError::Transient(reason)),
        }
    }

    /// Makes batches sync each file and directory on its own, as on a root
    /// of `/`, whatever the root.
    #[cfg(test)]
    pub(super) fn without_whole_fs_sync(mut self) -> Self {
        self.whole_fs = false;
        self
    }

    /// syncfs calls made by batches since start.
    pub fn fs_syncs_total(&self) -> u64 {
        self.fs_syncs.load(Ordering::Relaxed)
    }

    /// Write system calls made on the target since start (renames, chmods,
    /// chowns, unlinks, mkdirs, symlinks), whether or not the apply they
    /// were part of succeeded in the end; an unlink or mkdir that found its
    /// work done already changed nothing and is not counted.
    pub fn writes_total(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Directory fsyncs since start, failed ones included: what a batch
    /// exists to keep to one per directory.
    pub fn dir_syncs_total(&self) -> u64 {
        self.dir_syncs.load(Ordering::Relaxed)
    }

    /// [`Target::apply`] without telling the watch: a batch tells it of
    /// all its changes at once.
    fn apply_one(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Result<Applied, TargetError> {
        let mut ops = self.ops(change, backup);
        let result = self.apply_change(change, content, &mut ops);
        self.finish(ops, result)
    }

    /// The directory holding the live paths readers see (with `link`, the
    /// published tree; none before one is).
    pub fn live_root(&self) -> Option<PathBuf> {
        trees::live_root(&self.base, self.trees.as_ref().map(Trees::link_name))
    }

    /// A fresh record of one change's writes.
    fn ops<'a>(&'a self, change: &'a Change, backup: &'a dyn Backup) -> Ops<'a> {
        Ops {
            id: &change.id,
            backup,
            writes: 0,
            backups: Vec::new(),
            dir_syncs: &self.dir_syncs,
            deferred: None,
            left: None,
        }
    }

    /// Counts an apply's writes, made before a failure or not: they changed
    /// the target all the same.
    fn finish(&self, ops: Ops, result: Result<(), TargetError>) -> Result<Applied, TargetError> {
        self.writes.fetch_add(ops.writes, Ordering::Relaxed);
        if let Some(trees) = &self.trees {
            trees.written(ops.id, &result);
        }
        result.map(|()| Applied {
            writes: ops.writes,
            backups: ops.backups,
            left: ops.left,
        })
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

    fn kinds(&self) -> Result<Vec<String>, TargetError> {
        Ok(KINDS.map(String::from).to_vec())
    }

    fn observe(&self, probes: &[Probe]) -> Vec<Observed> {
        let paths: Vec<&RelPath> = probes.iter().map(|p| &p.path).collect();
        let secret: Vec<bool> = probes
            .iter()
            .map(|p| matches!(p.spec, Some(Spec::File(f)) if f.secret))
            .collect();
        self.observe_marked(&paths, &secret)
    }

    /// Each path is looked at apart: a batch this size still fills both
    /// threads of the stat walk, and its answers are a few hundred KiB.
    fn observe_limit(&self) -> Option<usize> {
        Some(observe::BATCH)
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
        let watch = self.watch.echoes();
        if let Some(w) = &watch {
            w.writing(&change.id);
        }
        let result = self.apply_one(change, content, backup);
        if let Some(w) = &watch {
            w.wrote(&change.id, &result);
        }
        result
    }

    /// A running watch is told of each change before the batch writes and
    /// of what each left once the batch has ended: events meanwhile are
    /// judged then.
    fn apply_batch(
        &self,
        changes: &[&Change],
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Vec<Result<Applied, TargetError>> {
        let watch = self.watch.echoes();
        if let Some(w) = &watch {
            for c in changes {
                w.writing(&c.id);
            }
        }
        let results = self.apply_many(changes, content, backup);
        if let Some(w) = &watch {
            for (c, result) in changes.iter().zip(&results) {
                w.wrote(&c.id, result);
            }
        }
        results
    }

    fn clean_temp(&self, paths: &[&RelPath]) -> Swept {
        self.clean_temp_files(paths)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.cache.flush()
    }

    fn rest(&self) {
        self.cache.release();
    }

    fn begin(&self, rev: Oid, carried: &dyn Fn() -> Vec<RelPath>) -> Result<(), TargetError> {
        match &self.trees {
            Some(trees) => self.begin_tree(trees, rev, carried),
            None => Ok(()),
        }
    }

    fn unpublished(&self) -> bool {
        self.trees.as_ref().is_some_and(Trees::unpublished)
    }

    fn kept_revisions(&self) -> Vec<Oid> {
        match &self.trees {
            Some(_) => self.kept_trees(),
            None => Vec::new(),
        }
    }

    fn publish(&self) -> Result<bool, TargetError> {
        match &self.trees {
            Some(trees) => self.publish_tree(trees),
            None => Ok(false),
        }
    }

    /// With `watch`, inotify watches on the directories of the managed
    /// paths under the live root, which the watch follows when a new tree
    /// is published; this target's own writes are told to it, so their
    /// events are not taken as drift.
    fn subscribe(&self, sink: ChangeSink, watch: bool) -> Option<Box<dyn Subscription>> {
        if !watch {
            self.watch.detach();
            return None;
        }
        let base = self.base.clone();
        let link = self.trees.as_ref().map(|t| t.link_name().to_string());
        let live = Box::new(move || trees::live_root(&base, link.as_deref()));
        let w = FilesWatch::start(live, sink);
        self.watch.attach(w.echoes());
        Some(Box::new(w))
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

//! Many changes at once: file replacements staged together (by a few
//! threads, each writing its own stretch of the run), made durable together
//! (one syncfs on the root's file system, or else a small pool of threads
//! fdatasyncing), renamed in input order, and each directory renamed into
//! synced once for the whole batch.

use std::collections::hash_map::{Entry, HashMap};
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rustix::fs as rfs;

use super::at::Meta;
use super::durable::WholeFs;
use super::write::{Clock, Staged};
use super::{counted_fsync, transient, FilesTarget, Ops};
use crate::model::{Action, Backup, Change, ContentSource, Field, Spec};
use crate::target::{Applied, TargetError};

/// Threads making temp files durable at once: concurrent fdatasyncs share
/// journal commits. Measured on ext4 (3000 small files, a loaded 2-core
/// machine, so noisy): 8 threads 0.8-4.3 s, 4 threads 2.9-5.4 s, one after
/// another 13 s; starting writeback of all first (sync_file_range) gained
/// nothing.
const POOL: usize = 8;
/// Staged files held at once; each holds two descriptors (file, directory).
const RUN: usize = 256;
/// Staged files held at once when one syncfs makes them durable: the more,
/// the fewer syncs; bounded by the descriptors the process may open.
const WHOLE_FS_RUN: usize = 4096;
/// Directories held open awaiting their sync; beyond this many, the held
/// ones are synced early rather than run out of descriptors.
const HELD_DIRS: usize = 256;
/// Threads staging a run at most: creating files is mostly kernel work, on
/// other directories' locks when each thread takes its own stretch of the
/// sorted run.
const STAGERS: usize = 4;
/// Changes per staging thread at least: below that, starting a thread
/// costs more than it saves.
const PER_STAGER: usize = 64;
/// Stretches a run is cut into per staging thread: enough that a thread
/// slowed down (a big file, a busy directory) leaves its share to others.
const STRETCHES_EACH: usize = 4;

/// A change whose writes are done, waiting for the sync of its directory.
struct Waiting<'a> {
    index: usize,
    change: &'a Change,
    ops: Ops<'a>,
}

/// Replacements of one run: reserved as they come, then staged together,
/// then made durable together.
#[derive(Default)]
struct Run<'a> {
    reserved: Vec<Waiting<'a>>,
    staged: Vec<(Waiting<'a>, Staged)>,
    /// The staged paths, and every directory above them: a change that
    /// touches one of these waits for the run to land, so the batch ends
    /// as applying the changes one by one would.
    files: HashSet<&'a str>,
    dirs: HashSet<&'a str>,
    clock: Clock,
}

impl<'a> Run<'a> {
    fn conflicts(&self, path: &str) -> bool {
        self.files.contains(path)
            || self.dirs.contains(path)
            || ancestors(path).any(|dir| self.files.contains(dir))
    }

    fn reserve(&mut self, waiting: Waiting<'a>) {
        let path = waiting.change.path.as_str();
        self.files.insert(path);
        self.dirs.extend(ancestors(path));
        self.reserved.push(waiting);
    }
}

/// `a/b/c` -> `a`, `a/b`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(end, _)| &path[..end])
}

/// The state of one `apply_batch` call.
struct Batch<'a> {
    target: &'a FilesTarget,
    results: Vec<Option<Result<Applied, TargetError>>>,
    run: Run<'a>,
    /// Changes whose writes are done, each with its outcome so far; they
    /// are finished once every directory they wait for is synced.
    waiting: Vec<(Waiting<'a>, Result<(), TargetError>)>,
    /// Directories to sync, by (dev, ino), with the changes waiting on each
    /// (positions in `waiting`).
    dirs: HashMap<(u64, u64), (OwnedFd, Vec<usize>)>,
    /// When syncfs stands for per-file syncs: the root's file system.
    whole: Option<WholeFs>,
    /// Changes waiting on directories `whole` covers: one syncfs for all.
    covered: Vec<usize>,
    /// Staged files per run.
    run_limit: usize,
}

impl FilesTarget {
    pub(super) fn apply_many(
        &self,
        changes: &[&Change],
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Vec<Result<Applied, TargetError>> {
        let whole = match self.whole_fs {
            true => self
                .tree_for_write()
                .ok()
                .and_then(|tree| tree.open_dir("", true).ok())
                .and_then(WholeFs::open),
            false => None,
        };
        let run_limit = match whole {
            Some(_) => whole_fs_run(),
            None => RUN,
        };
        let mut batch = Batch {
            target: self,
            results: (0..changes.len()).map(|_| None).collect(),
            run: Run::default(),
            waiting: Vec::new(),
            dirs: HashMap::new(),
            whole,
            covered: Vec::new(),
            run_limit,
        };
        for (index, &change) in changes.iter().enumerate() {
            if batch.run.conflicts(change.path.as_str())
                || batch.run.reserved.len() >= batch.run_limit
            {
                batch.land_run(content);
            }
            if !writes_content(change) {
                batch.results[index] = Some(self.apply_one(change, content, backup));
                continue;
            }
            let mut ops = self.ops(change, backup);
            ops.deferred = Some(Vec::new());
            batch.run.reserve(Waiting { index, change, ops });
        }
        batch.land_run(content);
        batch.sync_dirs();
        for (waiting, result) in std::mem::take(&mut batch.waiting) {
            batch.results[waiting.index] = Some(self.finish(waiting.ops, result));
        }
        batch
            .results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| Err(TargetError::Transient("left unapplied".into())))
            })
            .collect()
    }
}

impl<'a> Batch<'a> {
    /// Stages the run's replacements, makes their temp files durable, then
    /// renames each into place.
    fn land_run(&mut self, content: &dyn ContentSource) {
        let mut run = std::mem::take(&mut self.run);
        let reserved = std::mem::take(&mut run.reserved);
        let synced_fs = self.whole.as_ref().map(WholeFs::dev);
        let staged = self
            .target
            .stage_all(reserved, content, &mut run.clock, synced_fs);
        for (waiting, staged) in staged {
            match staged {
                Ok(Some(staged)) => run.staged.push((waiting, staged)),
                // Decided on the spot: nothing to do, a chmod, a refusal.
                other => self.settle(waiting, other.map(|_| ()), None),
            }
        }
        let staged: Vec<&Staged> = run.staged.iter().map(|(_, staged)| staged).collect();
        let synced = self.sync_staged(&staged);
        for ((mut waiting, staged), synced) in run.staged.into_iter().zip(synced) {
            let path = waiting.change.path.as_str();
            if let Err(e) = synced {
                staged.abandon();
                self.settle(waiting, Err(transient(path, "sync temp file", e)), None);
                continue;
            }
            match self.target.commit(waiting.change, staged, &mut waiting.ops) {
                Ok(dir) => self.settle(waiting, Ok(()), Some(dir)),
                Err(e) => self.settle(waiting, Err(e), None),
            }
        }
    }

    /// Makes staged files durable: one syncfs for those on the root's file
    /// system, fdatasync for the rest, and for all of them when the syncfs
    /// fails (their own results then say which failed). One result per
    /// file, in order.
    fn sync_staged(&self, staged: &[&Staged]) -> Vec<io::Result<()>> {
        let Some(whole) = &self.whole else {
            return sync_all(staged);
        };
        let synced = staged.iter().any(|s| whole.covers(s.dev()))
            && whole.sync(&self.target.fs_syncs).is_ok();
        let rest: Vec<usize> = (0..staged.len())
            .filter(|&i| !(synced && whole.covers(staged[i].dev())))
            .collect();
        let mut results: Vec<io::Result<()>> = staged.iter().map(|_| Ok(())).collect();
        let rest_staged: Vec<&Staged> = rest.iter().map(|&i| staged[i]).collect();
        for (i, result) in rest.into_iter().zip(sync_all(&rest_staged)) {
            results[i] = result;
        }
        results
    }

    /// Finishes a change at once, or, when directories it changed are
    /// still to be synced (`renamed_into` and any it made), sets it waiting
    /// for them.
    fn settle(
        &mut self,
        mut waiting: Waiting<'a>,
        result: Result<(), TargetError>,
        renamed_into: Option<OwnedFd>,
    ) {
        let mut dirs = waiting.ops.deferred.take().unwrap_or_default();
        dirs.extend(renamed_into);
        if dirs.is_empty() {
            self.results[waiting.index] = Some(self.target.finish(waiting.ops, result));
            return;
        }
        let position = self.waiting.len();
        self.waiting.push((waiting, result));
        for dir in dirs {
            self.hold(dir, position);
        }
    }

    fn hold(&mut self, dir: OwnedFd, position: usize) {
        let key = match rfs::fstat(&dir) {
            Ok(st) => {
                let meta = Meta::from_stat(&st);
                (meta.dev, meta.ino)
            }
            Err(_) => {
                // Unknown identity: synced alone rather than not at all.
                let synced = counted_fsync(&self.target.dir_syncs, dir.as_fd());
                return self.fail_on(synced, position);
            }
        };
        if self.whole.as_ref().is_some_and(|w| w.covers(key.0)) {
            self.covered.push(position);
            return;
        }
        if !self.dirs.contains_key(&key) && self.dirs.len() >= HELD_DIRS {
            self.sync_dirs();
        }
        match self.dirs.entry(key) {
            Entry::Occupied(held) => held.into_mut().1.push(position),
            Entry::Vacant(free) => {
                free.insert((dir, vec![position]));
            }
        }
    }

    /// Syncs each held directory once; a failure fails every change
    /// waiting on it, since what it wrote there may not survive a crash.
    fn sync_dirs(&mut self) {
        let covered = std::mem::take(&mut self.covered);
        if let (Some(whole), false) = (&self.whole, covered.is_empty()) {
            let synced = whole.sync(&self.target.fs_syncs);
            for position in covered {
                self.fail_on(synced, position);
            }
        }
        for (_, (dir, positions)) in std::mem::take(&mut self.dirs) {
            let synced = counted_fsync(&self.target.dir_syncs, dir.as_fd());
            for position in positions {
                self.fail_on(synced, position);
            }
        }
    }

    fn fail_on(&mut self, synced: rustix::io::Result<()>, position: usize) {
        let (waiting, result) = &mut self.waiting[position];
        if let (Err(e), Ok(())) = (synced, &result) {
            *result = Err(transient(
                waiting.change.path.as_str(),
                "fsync directory",
                e,
            ));
        }
    }
}

type StageResult = Result<Option<Staged>, TargetError>;

impl FilesTarget {
    /// Stages each reserved change, results in order. With many, the run
    /// is cut into stretches of neighbours that a few threads take in turn
    /// (the paths are distinct and none is under another, so the order
    /// among them does not matter); this thread works too, so a thread the
    /// system refuses only costs speed.
    fn stage_all<'a>(
        &self,
        reserved: Vec<Waiting<'a>>,
        content: &dyn ContentSource,
        clock: &mut Clock,
        synced_fs: Option<u64>,
    ) -> Vec<(Waiting<'a>, StageResult)> {
        let stage = |clock: &mut Clock, stretch: Vec<Waiting<'a>>| {
            stretch
                .into_iter()
                .map(|mut w| {
                    let staged = self.stage_change(w.change, content, &mut w.ops, clock, synced_fs);
                    (w, staged)
                })
                .collect::<Vec<_>>()
        };
        let stagers = stagers(reserved.len());
        if stagers < 2 {
            return stage(clock, reserved);
        }
        // One clock reading for the run, as one thread would take.
        clock.read(self);
        let clock = *clock;
        let size = reserved.len().div_ceil(stagers * STRETCHES_EACH);
        let mut stretches = Vec::new();
        let mut rest = reserved;
        while rest.len() > size {
            let tail = rest.split_off(size);
            stretches.push(Mutex::new(Some(rest)));
            rest = tail;
        }
        stretches.push(Mutex::new(Some(rest)));
        let staged = in_turn(&stretches, stagers, "tend-stage", |slot| {
            let stretch = slot.lock().map(|mut s| s.take()).ok().flatten();
            stage(&mut clock.clone(), stretch.unwrap_or_default())
        });
        staged.into_iter().flatten().collect()
    }
}

/// Threads to stage `n` changes: one per [`PER_STAGER`], up to the cores
/// there are and [`STAGERS`].
fn stagers(n: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (n / PER_STAGER).clamp(1, cores.min(STAGERS))
}

/// Staged files per run under syncfs: up to [`WHOLE_FS_RUN`], leaving most
/// of the descriptor limit's headroom to the rest of the process.
fn whole_fs_run() -> usize {
    use rustix::process::{getrlimit, Resource};
    let open = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let spare = open.saturating_sub(256) / 3;
    usize::try_from(spare)
        .unwrap_or(usize::MAX)
        .clamp(RUN, WHOLE_FS_RUN)
}

/// Whether a change replaces a file's content: the kind a batch stages.
/// Everything else takes the one-by-one path.
fn writes_content(change: &Change) -> bool {
    let file = matches!(
        change.desired.as_ref().map(|d| &d.spec),
        Some(Spec::File(_))
    );
    file && match change.action {
        Action::Create => true,
        Action::Update => change
            .fields
            .iter()
            .any(|f| matches!(f, Field::Content | Field::Type { .. })),
        Action::Delete => false,
    }
}

/// fdatasync of every staged file, by up to [`POOL`] threads at once, so the
/// filesystem commits them in a few journal transactions instead of one
/// each. One result per file, in order.
fn sync_all(staged: &[&Staged]) -> Vec<io::Result<()>> {
    if staged.len() < 2 {
        return staged.iter().map(|s| s.sync()).collect();
    }
    in_turn(staged, POOL.min(staged.len()), "tend-sync", |s| s.sync())
}

/// `work` done on each of `items` by up to `threads` threads, each taking
/// the next item not yet taken; results in the order of `items`. This
/// thread works too, so a thread the system refuses only costs speed; a
/// panic in a helper is resumed here.
fn in_turn<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    name: &str,
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let take_turns = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, work(item)));
        }
    };
    let mut done = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(scope, take_turns)
                    .ok()
            })
            .collect();
        let mut done = take_turns();
        for helper in helpers {
            match helper.join() {
                Ok(more) => done.extend(more),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

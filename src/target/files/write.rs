//! Create and update: applying the decided step; replacements are new files
//! or symlinks made under an exclusive temp name and renamed over the old
//! object. A file replacement is staged, made durable, then committed, so a
//! batch can make many durable together.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use git2::Oid;
use rustix::fs::{
    self as rfs, AtFlags, FileType, Gid, Mode, Timespec, Timestamps, Uid, UTIME_OMIT,
};
use rustix::io::Errno;

use super::at::is_absent;
use super::at::{read_regular, stat_at, Meta};
use super::decide::{decide, Step};
use super::observe::Batch;
use super::resolve::resolve_error;
use super::temp::{self, create_temp_file, temp_name, Temp};
use super::{transient, FilesTarget, Ops};
use crate::model::{Action, Change, ContentSource, FileSpec, Spec};
use crate::target::TargetError;

const NANOS: i64 = 1_000_000_000;

/// A file replacement made ready up to durability: the temp file holds the
/// content, owner, mode and mtime; nothing at the final name has changed.
pub(super) struct Staged {
    dir: OwnedFd,
    temp: Temp,
    file: File,
    blob: Oid,
    /// A decrypted secret: kept out of the stat cache.
    secret: bool,
    recorded: Option<i64>,
    /// The regular file it replaces, as observed.
    old: Option<Meta>,
    /// The device the temp file is on: a whole-file-system sync only
    /// covers files on the root's own.
    dev: u64,
    /// What kept trees sharing the replaced file, edited in place, held
    /// before the edit, when this revision declares the file anew.
    restore: Option<zeroize::Zeroizing<Vec<u8>>>,
}

impl Staged {
    /// Makes the content durable; a failure leaves the temp file for
    /// [`Staged::abandon`], never for a rename.
    pub(super) fn sync(&self) -> io::Result<()> {
        Ok(rfs::fdatasync(&self.file)?)
    }

    pub(super) fn dev(&self) -> u64 {
        self.dev
    }

    /// Throws the temp file away: the next attempt starts from a fresh one.
    pub(super) fn abandon(self) {
        if let Temp::Named(temp) = &self.temp {
            discard(self.dir.as_fd(), temp);
        }
    }
}

/// The filesystem clock, read at most once per apply or run, before the
/// first temp file is dated from it.
#[derive(Default, Clone, Copy)]
pub(super) struct Clock(Option<Option<i64>>);

impl Clock {
    fn now(&mut self, target: &FilesTarget) -> Option<i64> {
        *self.0.get_or_insert_with(|| target.cache.clock_now())
    }

    /// Reads the clock now, if not yet read, so copies share the reading.
    pub(super) fn read(&mut self, target: &FilesTarget) {
        self.now(target);
    }
}

impl FilesTarget {
    pub(super) fn apply_change(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let staged = self.stage_change(change, content, ops, &mut Clock::default(), None)?;
        let Some(staged) = staged else {
            return Ok(());
        };
        let path = change.path.as_str();
        if let Err(e) = staged.sync() {
            staged.abandon();
            return Err(transient(path, "sync temp file", e));
        }
        let dir = self.commit(change, staged, ops)?;
        ops.sync_dir(dir.as_fd())
            .map_err(|e| transient(path, "fsync directory", e))
    }

    /// Decides the step and carries it out, except a file replacement,
    /// which is only staged and handed back for syncing and [`Self::commit`].
    /// `synced_fs`: the device a sync of the whole file system covers
    /// after the commit, when one follows; a file observed absent is then
    /// staged unnamed.
    pub(super) fn stage_change(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        ops: &mut Ops,
        clock: &mut Clock,
        synced_fs: Option<u64>,
    ) -> Result<Option<Staged>, TargetError> {
        let spec = match (change.action, &change.desired) {
            (Action::Delete, _) => return self.delete(change, ops).map(|()| None),
            (_, Some(desired)) => &desired.spec,
            (action, None) => {
                return Err(TargetError::Terminal(format!(
                    "{}: {} without a desired state",
                    change.id,
                    action.as_str()
                )))
            }
        };
        let path = change.path.as_str();
        let (parent, name) = change.path.split_last();
        let tree = self.tree_for_write()?;
        let dir = match tree.open_dir(parent, true) {
            Ok(dir) => Some(dir),
            Err(e) if is_absent(e) => None,
            Err(e) => return Err(resolve_error(parent, e)),
        };
        let live = match &dir {
            Some(dir) => self
                .live_at(
                    dir.as_fd(),
                    &change.path,
                    name,
                    &mut Batch::one(matches!(spec, Spec::File(f) if f.secret)),
                )
                .map_err(|e| transient(path, "observe", e))?,
            None => None,
        };
        let step = match decide(change, spec, live.as_ref().map(|(_, l)| l)) {
            // A revision's tree shares unchanged files with other trees by
            // hard link: a chmod or chown in place would change them all,
            // so the file is replaced instead.
            Step::Attrs(_) if self.trees.is_some() => Step::Replace,
            step => step,
        };
        match (step, dir, live) {
            (Step::Nothing, ..) => Ok(None),
            (Step::Refuse(reason), ..) => Err(TargetError::Transient(reason)),
            (Step::Attrs(attrs), Some(dir), Some(_)) => self
                .set_attrs(dir.as_fd(), path, name, attrs, ops)
                .map(|()| None),
            (Step::Attrs(_), ..) => Err(TargetError::Transient(format!(
                "{path}: vanished while being applied"
            ))),
            (Step::Replace, dir, live) => {
                let dir = match dir {
                    Some(dir) => dir,
                    None => tree.ensure_dir(parent, ops)?,
                };
                let unnamed = synced_fs.filter(|_| live.is_none());
                let old = live
                    .map(|(meta, _)| meta)
                    .filter(|m| m.file_type() == FileType::RegularFile);
                match spec {
                    Spec::File(file) => self
                        .stage_file(dir, change, file, old, unnamed, content, ops, clock)
                        .map(Some),
                    Spec::Symlink { target } => self
                        .replace_symlink(dir.as_fd(), path, name, target, ops)
                        .map(|()| None),
                    Spec::Structured(s) => Err(TargetError::Terminal(format!(
                        "{path}: kind {} is not served by a files target",
                        s.kind
                    ))),
                }
            }
        }
    }

    /// Writes the content to a fresh temp file and sets owner then mode;
    /// durability and the rename are left to the caller. `unnamed`: the
    /// name was observed free, and a sync of this device follows the
    /// commit, so the temp file may be unnamed.
    #[allow(clippy::too_many_arguments)]
    fn stage_file(
        &self,
        dir: OwnedFd,
        change: &Change,
        spec: &FileSpec,
        old: Option<Meta>,
        unnamed: Option<u64>,
        content: &dyn ContentSource,
        ops: &mut Ops,
        clock: &mut Clock,
    ) -> Result<Staged, TargetError> {
        let path = change.path.as_str();
        // Wiped once written: the content may be a decrypted secret.
        let bytes = zeroize::Zeroizing::new(
            content
                .read(spec.blob)
                .map_err(|e| transient(path, "read desired content", e))?,
        );
        // An owner or group the declaration leaves out stays as it was.
        let uid = spec.uid.get().or(old.map(|m| m.uid));
        let gid = spec.gid.get().or(old.map(|m| m.gid));
        let recorded = clock.now(self);
        // Dated just before the clock reading, the file's stat is one the
        // cache can trust at once: any later write, by anyone, leaves a
        // newer mtime.
        let mtime = recorded.map(|t| t - 1);
        let restore = self
            .trees
            .as_ref()
            .and_then(|trees| self.kept_before_edit(trees, &change.path, spec.blob))
            .and_then(|seen| content.read(seen).ok())
            .map(zeroize::Zeroizing::new);
        let made = unnamed.and_then(|_| temp::create_unnamed(dir.as_fd(), ops));
        let (temp, mut file) = match made {
            Some(made) => made,
            None => {
                let (name, file) = create_temp_file(dir.as_fd(), path, ops)?;
                (Temp::Named(name), file)
            }
        };
        let dev = match fill(&mut file, &bytes, uid, gid, spec.mode & 0o7777, mtime, ops) {
            Ok(dev) => dev,
            Err(e) => {
                if let Temp::Named(temp) = &temp {
                    discard(dir.as_fd(), temp);
                }
                return Err(transient(path, "write temp file", e));
            }
        };
        // On another file system (a mount below the root) no sync of the
        // whole one follows the link: a temp name, and the path of old.
        let temp = match temp {
            Temp::Unnamed(how) if unnamed != Some(dev) => {
                match temp::name_it(how, &file, dir.as_fd()) {
                    Ok(name) => Temp::Named(name),
                    Err(e) => return Err(transient(path, "link temp file", e)),
                }
            }
            temp => temp,
        };
        Ok(Staged {
            dir,
            temp,
            file,
            blob: spec.blob,
            secret: spec.secret,
            recorded,
            old,
            dev,
            restore,
        })
    }

    /// Renames a durable staged file over the final name (backing up what
    /// it replaces) and records it in the stat cache. Returns the directory,
    /// which the caller must sync before reporting success.
    pub(super) fn commit(
        &self,
        change: &Change,
        mut staged: Staged,
        ops: &mut Ops,
    ) -> Result<OwnedFd, TargetError> {
        let path = change.path.as_str();
        let name = change.path.split_last().1;
        if let Err(e) = place(&mut staged, name, path, ops) {
            staged.abandon();
            return Err(e);
        }
        // Before the stat below: a link changes the file's ctime.
        if let (Some(trees), Some(old)) = (&self.trees, &staged.old) {
            self.mend_kept(
                trees,
                &change.path,
                old,
                staged.dir.as_fd(),
                &staged.file,
                staged.blob,
                staged.restore.as_deref().map(Vec::as_slice),
                ops,
            );
        }
        if let Ok(st) = rfs::fstat(&staged.file) {
            let meta = Meta::from_stat(&st);
            match staged.secret {
                true => self.cache.forget(path),
                false => self.cache.record(path, &meta, staged.blob, staged.recorded),
            }
            ops.left = Some(meta.left());
        }
        Ok(staged.dir)
    }

    fn replace_symlink(
        &self,
        dir: BorrowedFd,
        path: &str,
        name: &str,
        target: &str,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let mut made = None;
        for _ in 0..8 {
            let temp = temp_name();
            ops.writes += 1;
            match rfs::symlinkat(target, dir, temp.as_str()) {
                Ok(()) => {
                    made = Some(temp);
                    break;
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(transient(path, "create symlink", e)),
            }
        }
        let temp =
            made.ok_or_else(|| TargetError::Transient(format!("{path}: no free temp name")))?;
        if let Err(e) = swap_in(dir, &temp, name, path, ops) {
            discard(dir, &temp);
            return Err(e);
        }
        self.cache.forget(path);
        ops.left = stat_at(dir, name).ok().map(|m| m.left());
        ops.sync_dir(dir)
            .map_err(|e| transient(path, "fsync directory", e))
    }
}

/// Content, owner, then mode (chown would clear setuid bits set before it),
/// then the mtime if given; returns the file's device. Any failure here
/// means the temp file is thrown away.
pub(super) fn fill(
    file: &mut File,
    bytes: &[u8],
    uid: Option<u32>,
    gid: Option<u32>,
    mode: u32,
    mtime: Option<i64>,
    ops: &mut Ops,
) -> io::Result<u64> {
    file.write_all(bytes)?;
    let made = Meta::from_stat(&rfs::fstat(&*file)?);
    let uid = uid.filter(|u| *u != made.uid && *u != u32::MAX);
    let gid = gid.filter(|g| *g != made.gid && *g != u32::MAX);
    if uid.is_some() || gid.is_some() {
        ops.writes += 1;
        rfs::fchown(&*file, uid.map(Uid::from_raw), gid.map(Gid::from_raw))?;
    }
    ops.writes += 1;
    rfs::fchmod(&*file, Mode::from_raw_mode(mode))?;
    if let Some(mtime) = mtime {
        let omit = Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        };
        let modified = Timespec {
            tv_sec: mtime.div_euclid(NANOS),
            tv_nsec: mtime.rem_euclid(NANOS),
        };
        rfs::futimens(
            &*file,
            &Timestamps {
                last_access: omit,
                last_modification: modified,
            },
        )?;
    }
    Ok(made.dev)
}

/// Puts a staged file at `name`: an unnamed one is linked there; where the
/// name was taken since it was observed free, it is given a temp name and
/// swapped in like any.
fn place(staged: &mut Staged, name: &str, path: &str, ops: &mut Ops) -> Result<(), TargetError> {
    let how = match &staged.temp {
        Temp::Named(temp) => return swap_in(staged.dir.as_fd(), temp, name, path, ops),
        Temp::Unnamed(how) => *how,
    };
    match temp::link(how, &staged.file, staged.dir.as_fd(), name) {
        Ok(()) => {
            ops.writes += 1;
            Ok(())
        }
        Err(Errno::EXIST) => {
            let temp = temp::name_it(how, &staged.file, staged.dir.as_fd())
                .map_err(|e| transient(path, "link temp file", e))?;
            // Named now: a failure below leaves it for `abandon`.
            staged.temp = Temp::Named(temp.clone());
            swap_in(staged.dir.as_fd(), &temp, name, path, ops)
        }
        Err(e) => Err(transient(path, "link", e)),
    }
}

/// Renames `temp` over `name`: a regular file there is backed up first, an
/// empty directory removed; a non-empty one stops everything. The caller
/// syncs the directory.
fn swap_in(
    dir: BorrowedFd,
    temp: &str,
    name: &str,
    path: &str,
    ops: &mut Ops,
) -> Result<(), TargetError> {
    match stat_at(dir, name).map(|m| m.file_type()) {
        Ok(FileType::RegularFile) => {
            if let Some(old) =
                read_regular(dir, name).map_err(|e| transient(path, "read for backup", e))?
            {
                ops.save(path, &old)?;
            }
        }
        Ok(FileType::Directory) => {
            ops.writes += 1;
            rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(|e| match e {
                Errno::NOTEMPTY | Errno::EXIST => TargetError::Transient(format!(
                    "{path}: a directory holding unmanaged files stands there; nothing was deleted, a human has to move it"
                )),
                e => transient(path, "remove empty directory", e),
            })?;
        }
        Ok(_) => {}
        Err(e) if is_absent(e) => {}
        Err(e) => return Err(transient(path, "stat", e)),
    }
    ops.writes += 1;
    rfs::renameat(dir, temp, dir, name).map_err(|e| transient(path, "rename", e))
}

fn discard(dir: BorrowedFd, temp: &str) {
    // Best effort: a leftover is removed by the next clean_temp.
    let _ = rfs::unlinkat(dir, temp, AtFlags::empty());
}

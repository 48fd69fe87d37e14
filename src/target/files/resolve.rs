//! Path resolution inside the root: directories are opened with openat2
//! RESOLVE_IN_ROOT, so `..` and absolute symlinks never leave the root, and
//! are created (or repaired) component by component when a write needs them.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::at::{is_absent, read_regular, stat_at};
use super::{transient, Ops};
use crate::target::TargetError;

/// As if the root were `/`; magic links (`/proc/*/fd/*`) are refused since
/// they can point anywhere.
const IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// Mode of the parent directories tend creates.
const DIR_MODE: u32 = 0o755;

/// An open handle on a target root.
pub(super) struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

impl Root {
    pub(super) fn open(path: &Path) -> io::Result<Root> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rfs::open(path, flags, Mode::empty()).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("target root {}: {e}", path.display()),
            )
        })?;
        Ok(Root {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// A root already opened (an `O_PATH` directory handle), known by `path`.
    pub(super) fn from_fd(fd: OwnedFd, path: PathBuf) -> Root {
        Root { fd, path }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the root is the host's `/`, by identity rather than by name.
    pub(super) fn is_slash(&self) -> bool {
        let same = |a: &rfs::Stat, b: &rfs::Stat| a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        match (rfs::fstat(&self.fd), rfs::stat("/")) {
            (Ok(root), Ok(slash)) => same(&root, &slash),
            // Unknown: treated as `/`, the cautious choice.
            _ => true,
        }
    }

    /// Opens the directory at `rel` (`""` for the root itself). A `writable`
    /// handle can be listed and fsynced; the other kind only resolves names,
    /// which also works in directories that cannot be read.
    pub(super) fn open_dir(&self, rel: &str, writable: bool) -> Result<OwnedFd, Errno> {
        let rel = if rel.is_empty() { "." } else { rel };
        let access = if writable {
            OFlags::RDONLY
        } else {
            OFlags::PATH
        };
        let flags = access | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut retries = 0;
        loop {
            match rfs::openat2(&self.fd, rel, flags, Mode::empty(), IN_ROOT) {
                // openat2 gives EAGAIN when a rename raced with a `..` walk.
                Err(Errno::AGAIN) if retries < 16 => retries += 1,
                Err(Errno::INTR) => {}
                other => return other,
            }
        }
    }

    /// Opens the directory at `rel` for writing, creating missing components
    /// (mode 0755). A regular file where a directory is needed is backed up
    /// and replaced. A symlink is followed as the kernel resolves it inside
    /// the root (`var/run -> /run`); one that leads nowhere there, or to
    /// something that is no directory, is the operator's to settle: the
    /// write fails, is retried with backoff, and the link is left alone.
    pub(super) fn ensure_dir(&self, rel: &str, ops: &mut Ops) -> Result<OwnedFd, TargetError> {
        match self.open_dir(rel, true) {
            Ok(fd) => return Ok(fd),
            Err(e) if is_absent(e) => {}
            Err(e) => return Err(resolve_error(rel, e)),
        }
        let mut dir = self.open_dir("", true).map_err(|e| resolve_error("", e))?;
        let mut end = 0;
        for component in rel.split('/') {
            end += component.len();
            let prefix = &rel[..end];
            end += 1;
            let mut repaired = false;
            dir = loop {
                match self.open_dir(prefix, true) {
                    Ok(fd) => break fd,
                    Err(e) if is_absent(e) && !repaired => {
                        repair(dir.as_fd(), prefix, component, ops)?;
                        repaired = true;
                    }
                    Err(e) => return Err(resolve_error(prefix, e)),
                }
            };
        }
        Ok(dir)
    }
}

/// Makes `name` in `parent` a directory. `prefix` is its root-relative path.
fn repair(parent: BorrowedFd, prefix: &str, name: &str, ops: &mut Ops) -> Result<(), TargetError> {
    let meta = match stat_at(parent, name) {
        Ok(meta) => Some(meta),
        Err(e) if is_absent(e) => None,
        Err(e) => return Err(transient(prefix, "stat", e)),
    };
    match meta.map(|m| m.file_type()) {
        None => {}
        // Someone made it meanwhile; the caller resolves it again.
        Some(FileType::Directory) => return Ok(()),
        Some(FileType::Symlink) => {
            let link = rfs::readlinkat(parent, name, Vec::new())
                .map(|l| l.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Err(TargetError::Transient(format!(
                "{}: a symlink to {link:?} stands where a directory is needed, and it leads to no directory inside the root; make its target a directory, or remove it",
                super::shown(prefix)
            )));
        }
        Some(FileType::RegularFile) => {
            if let Some(bytes) =
                read_regular(parent, name).map_err(|e| transient(prefix, "read", e))?
            {
                ops.save(prefix, &bytes)?;
            }
            unlink(parent, prefix, name, ops)?;
        }
        Some(other) => {
            return Err(TargetError::Transient(format!(
                "{prefix}: a {} stands where a directory is needed",
                type_name(other)
            )))
        }
    }
    make_dir(parent, prefix, name, ops)
}

/// Removes the file standing where a directory is needed. Gone
/// already, or a directory by now (made by a thread staging a neighbour,
/// say, which removed it first): the caller resolves the path again.
fn unlink(parent: BorrowedFd, prefix: &str, name: &str, ops: &mut Ops) -> Result<(), TargetError> {
    match rfs::unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) => {
            ops.writes += 1;
            Ok(())
        }
        Err(Errno::NOENT | Errno::ISDIR) => Ok(()),
        Err(e) => Err(transient(prefix, "unlink", e)),
    }
}

fn make_dir(
    parent: BorrowedFd,
    prefix: &str,
    name: &str,
    ops: &mut Ops,
) -> Result<(), TargetError> {
    match rfs::mkdirat(parent, name, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) => ops.writes += 1,
        // Made meanwhile (by a thread staging a neighbour, say): not ours.
        Err(e) if e == Errno::EXIST => return Ok(()),
        Err(e) => return Err(transient(prefix, "mkdir", e)),
    }
    // The umask may have narrowed the mode. NOFOLLOW: if the new directory
    // was swapped for a symlink meanwhile, its target is left alone.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let made = rfs::openat(parent, name, flags, Mode::empty())
        .map_err(|e| transient(prefix, "open", e))?;
    let mode = rfs::fstat(&made)
        .map_err(|e| transient(prefix, "stat", e))?
        .st_mode;
    if mode & 0o7777 != DIR_MODE {
        ops.writes += 1;
        rfs::fchmod(&made, Mode::from_raw_mode(DIR_MODE))
            .map_err(|e| transient(prefix, "chmod", e))?;
    }
    ops.sync_dir_or_defer(parent)
        .map_err(|e| transient(prefix, "fsync parent directory", e))
}

/// Why a directory could not be opened, classified for the reconciler.
pub(super) fn resolve_error(rel: &str, e: Errno) -> TargetError {
    match e {
        Errno::LOOP | Errno::XDEV => TargetError::Terminal(format!(
            "{}: cannot be resolved inside the target root: {e}",
            super::shown(rel)
        )),
        Errno::NOSYS => TargetError::Terminal(format!(
            "{}: this kernel lacks openat2, which the files target needs to stay inside its root",
            super::shown(rel)
        )),
        _ => transient(rel, "open directory", e),
    }
}

/// A file type as messages name it.
pub(super) fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

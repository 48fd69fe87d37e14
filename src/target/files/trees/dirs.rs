//! tend's own directories for whole-tree publishing: `.tend/revs` and the
//! trees in it, opened never through a symlink, made 0755, listed, and
//! removed whole; what a stopped process left, and trees beyond `keep`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::super::at::is_absent;
use super::super::resolve::Root;
use super::super::temp::is_temp_name;
use super::super::FilesTarget;

const DIR_MODE: u32 = 0o755;
/// tend's own directories are opened beneath their parent and never
/// through a symlink: a link planted there is refused, not followed.
pub(super) const OWN: ResolveFlags = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::BENEATH);

pub(super) fn staging_name(hex: &str) -> String {
    format!(".{hex}.tmp")
}

/// A commit id in lower-case hex (SHA-1 or SHA-256).
pub(super) fn is_commit_name(name: &[u8]) -> bool {
    matches!(name.len(), 40 | 64)
        && name
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Opens a directory of tend's own in `dir`, making it when `make` is set.
pub(super) fn own_dir(dir: BorrowedFd, name: &str, make: bool) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut made = false;
    loop {
        match rfs::openat2(dir, name, flags, Mode::empty(), OWN) {
            Err(Errno::NOENT) if make && !made => {
                make_dir(dir, name)?;
                made = true;
            }
            Err(Errno::AGAIN | Errno::INTR) => {}
            other => return other,
        }
    }
}

/// mkdir with mode 0755 whatever the umask, then the parent synced; one
/// there already is fine.
pub(super) fn make_dir(parent: BorrowedFd, name: &str) -> Result<(), Errno> {
    match rfs::mkdirat(parent, name, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(()),
        Err(e) => return Err(e),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let made = rfs::openat(parent, name, flags, Mode::empty())?;
    if rfs::fstat(&made)?.st_mode & 0o7777 != DIR_MODE {
        rfs::fchmod(&made, Mode::from_raw_mode(DIR_MODE))?;
    }
    Ok(())
}

/// Removes the directory `name` in `parent` and everything in it, never
/// following a symlink.
fn remove_tree(parent: BorrowedFd, name: &[u8]) -> Result<(), Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match rfs::openat(parent, name, flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    let mut listing = rfs::Dir::read_from(&dir)?;
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            entries.push((child.to_vec(), entry.file_type()));
        }
    }
    for (child, kind) in entries {
        let kind = match kind {
            FileType::Unknown => {
                match rfs::statat(&dir, child.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(e),
                }
            }
            kind => kind,
        };
        match kind {
            FileType::Directory => remove_tree(dir.as_fd(), &child)?,
            _ => match rfs::unlinkat(&dir, child.as_slice(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(e),
            },
        }
    }
    match rfs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The directory at `rel` in `tree`, made (0755) where missing.
pub(super) fn make_dirs(tree: &Root, rel: &str) -> Result<OwnedFd, Errno> {
    match tree.open_dir(rel, true) {
        Err(e) if is_absent(e) => {}
        other => return other,
    }
    let mut dir = tree.open_dir("", true)?;
    let mut end = 0;
    for component in rel.split('/') {
        end += component.len();
        let prefix = &rel[..end];
        end += 1;
        if let Err(e) = tree.open_dir(prefix, true) {
            if !is_absent(e) {
                return Err(e);
            }
            make_dir(dir.as_fd(), component)?;
        }
        dir = tree.open_dir(prefix, true)?;
    }
    Ok(dir)
}

/// A directory's entries (names and types as listed); none when it cannot
/// be read.
pub(super) fn entries(dir: BorrowedFd) -> Vec<(Vec<u8>, FileType)> {
    let Ok(mut listing) = rfs::Dir::read_from(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(entry)) = listing.read() {
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push((name.to_vec(), entry.file_type()));
        }
    }
    out
}

impl FilesTarget {
    /// What a process stopped mid-way left: trees still under their temp
    /// name (never complete, never linked) and temp links in the root.
    pub(super) fn remove_leftovers(&self, revs: &OwnedFd) {
        for (name, kind) in entries(revs.as_fd()) {
            if kind == FileType::Directory && name.starts_with(b".") && name.ends_with(b".tmp") {
                match remove_tree(revs.as_fd(), &name) {
                    Ok(()) => {
                        tracing::info!(target = %self.name, tree = %String::from_utf8_lossy(&name), "removed an unfinished tree")
                    }
                    Err(e) => {
                        tracing::warn!(target = %self.name, error = %e, "cannot remove an unfinished tree")
                    }
                }
            }
        }
        let Ok(root) = self.base.open_dir("", true) else {
            return;
        };
        for (name, kind) in entries(root.as_fd()) {
            if kind != FileType::Directory && is_temp_name(&name) {
                let _ = rfs::unlinkat(&root, name.as_slice(), AtFlags::empty());
            }
        }
    }

    /// Removes the trees older than the `keep` newest besides `current`.
    pub(super) fn remove_old_trees(&self, revs: &OwnedFd, current: &str, keep: usize) {
        let mut others: Vec<(i64, Vec<u8>)> = entries(revs.as_fd())
            .into_iter()
            .filter(|(name, kind)| {
                *kind == FileType::Directory && is_commit_name(name) && name != current.as_bytes()
            })
            .filter_map(|(name, _)| {
                let st = rfs::statat(revs, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
                Some((
                    st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
                    name,
                ))
            })
            .collect();
        others.sort_by(|a, b| b.cmp(a));
        for (_, name) in others.into_iter().skip(keep) {
            match remove_tree(revs.as_fd(), &name) {
                Ok(()) => {
                    tracing::debug!(target = %self.name, tree = %String::from_utf8_lossy(&name), "removed an old tree")
                }
                Err(e) => {
                    tracing::warn!(target = %self.name, tree = %String::from_utf8_lossy(&name), error = %e, "cannot remove an old tree")
                }
            }
        }
    }
}

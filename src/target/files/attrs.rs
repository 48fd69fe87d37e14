//! Owner and mode changes in place: same inode, held by an O_PATH handle
//! opened without following, so a swapped-in symlink is never changed through.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{self as rfs, AtFlags, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

use super::at::{open_regular, Meta};
use super::decide::Attrs;
use super::{transient, FilesTarget, Ops};
use crate::target::TargetError;

impl FilesTarget {
    /// chown and chmod on the existing file, same inode. The file is held by
    /// an O_PATH handle opened without following, so a symlink swapped in
    /// meanwhile is never changed through.
    pub(super) fn set_attrs(
        &self,
        dir: BorrowedFd,
        path: &str,
        name: &str,
        attrs: Attrs,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd =
            rfs::openat(dir, name, flags, Mode::empty()).map_err(|e| transient(path, "open", e))?;
        let stat = |fd: &OwnedFd| {
            rfs::fstat(fd)
                .map(|st| Meta::from_stat(&st))
                .map_err(|e| transient(path, "stat", e))
        };
        let before = stat(&fd)?;
        if before.file_type() != FileType::RegularFile {
            return Err(TargetError::Transient(format!(
                "{path}: replaced while being applied"
            )));
        }
        let mut mode = attrs.mode;
        if attrs.uid.is_some() || attrs.gid.is_some() {
            let (uid, gid) = (
                owner_id(attrs.uid, path)?.map(Uid::from_raw),
                owner_id(attrs.gid, path)?.map(Gid::from_raw),
            );
            ops.writes += 1;
            rfs::chownat(&fd, "", uid, gid, AtFlags::EMPTY_PATH)
                .map_err(|e| transient(path, "chown", e))?;
            // chown clears setuid and setgid; the mode was not to change.
            if mode.is_none() && stat(&fd)?.perm() != before.perm() {
                mode = Some(before.perm());
            }
        }
        if let Some(mode) = mode {
            ops.writes += 1;
            chmod_opened(&fd, dir, name, mode).map_err(|e| transient(path, "chmod", e))?;
        }
        let after = stat(&fd)?;
        self.cache.carry(path, &before, &after);
        ops.left = Some(after.left());
        Ok(())
    }
}

/// `-1` means "unchanged" to chown, so it cannot name an owner.
fn owner_id(id: Option<u32>, path: &str) -> Result<Option<u32>, TargetError> {
    match id {
        Some(u32::MAX) => Err(TargetError::Terminal(format!(
            "{path}: owner or group id 4294967295 is not valid"
        ))),
        other => Ok(other),
    }
}

/// chmod through an O_PATH handle: via its /proc/self/fd link, which names
/// exactly that inode; without /proc, by reopening the name and checking it
/// is still the same file.
fn chmod_opened(fd: &OwnedFd, dir: BorrowedFd, name: &str, mode: u32) -> io::Result<()> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match rfs::chmod(link.as_str(), Mode::from_raw_mode(mode)) {
        Err(Errno::NOENT) => {}
        other => return other.map_err(io::Error::from),
    }
    let held = Meta::from_stat(&rfs::fstat(fd)?);
    match open_regular(dir, name)? {
        Some((file, now)) if (now.dev, now.ino) == (held.dev, held.ino) => {
            Ok(rfs::fchmod(&file, Mode::from_raw_mode(mode))?)
        }
        _ => Err(io::Error::other("replaced while being applied")),
    }
}

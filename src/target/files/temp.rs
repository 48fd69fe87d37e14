//! Where a staged file's content waits until it is committed: under a
//! temp name (`.tend-*.tmp`, created exclusively, so nothing planted is
//! ever opened) renamed over the final name; or, for a file observed
//! absent, with no name at all (`O_TMPFILE`), linked in at the final name.
//! An unnamed file makes one directory entry instead of a temp name and a
//! rename, leaves nothing to sweep after a crash, lets threads staging
//! neighbours create without taking the directory's lock, and fails,
//! rather than replaces, when something took the name since it was
//! observed absent.
//!
//! Linking a file by its descriptor takes CAP_DAC_READ_SEARCH
//! (`AT_EMPTY_PATH`) or /proc (`/proc/self/fd/N`); the first unnamed file
//! made finds out which works here by linking itself under a temp name.
//! Where neither does, or the file system has no unnamed files, files are
//! staged under temp names as before.

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::{transient, Ops};
use crate::target::TargetError;

/// How this process links a file by its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    EmptyPath,
    Proc,
}

/// Learned from the first unnamed file: `None` inside when neither works.
static HOW: OnceLock<Option<How>> = OnceLock::new();

/// Where a staged file's content waits until it is committed.
pub(super) enum Temp {
    /// A temp name in the file's directory, renamed over the final name.
    Named(String),
    /// No name: linked at the final name, which must still be free.
    Unnamed(How),
}

/// A new, empty file in `dir` made to be linked in later, or, for the one
/// that finds out how to link, already given a temp name; `None` where
/// unnamed files cannot be had, and the caller makes a named one.
pub(super) fn create_unnamed(dir: BorrowedFd, ops: &mut Ops) -> Option<(Temp, File)> {
    if HOW.get() == Some(&None) {
        return None;
    }
    let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
    let file = File::from(rfs::openat(dir, ".", flags, Mode::from_raw_mode(0o600)).ok()?);
    if let Some(&Some(how)) = HOW.get() {
        ops.writes += 1;
        return Some((Temp::Unnamed(how), file));
    }
    // Threads staging at once may each find out; they agree.
    let mut lacking = true;
    for how in [How::EmptyPath, How::Proc] {
        match name_it(how, &file, dir) {
            Ok(name) => {
                let _ = HOW.set(Some(how));
                ops.writes += 1;
                return Some((Temp::Named(name), file));
            }
            Err(e) => lacking &= means_unable(e),
        }
    }
    // Out of space, say: this file is made named, the next one finds out.
    if lacking {
        let _ = HOW.set(None);
    }
    None
}

/// What linking by descriptor fails with where this process cannot do it
/// at all: no CAP_DAC_READ_SEARCH for `AT_EMPTY_PATH` (ENOENT), no /proc.
fn means_unable(e: Errno) -> bool {
    matches!(
        e,
        Errno::NOENT | Errno::PERM | Errno::ACCESS | Errno::INVAL | Errno::NOTDIR
    )
}

/// `.tend-*.tmp`, the only names tend ever creates besides declared ones.
pub(super) fn is_temp_name(name: &[u8]) -> bool {
    name.len() >= ".tend-.tmp".len() && name.starts_with(b".tend-") && name.ends_with(b".tmp")
}

pub(super) fn temp_name() -> String {
    format!(".tend-{:016x}.tmp", rand::random::<u64>())
}

/// A new, empty temp file, created exclusively so nothing that already
/// exists (a planted symlink included) is ever opened.
pub(super) fn create_temp_file(
    dir: BorrowedFd,
    path: &str,
    ops: &mut Ops,
) -> Result<(String, File), TargetError> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..8 {
        let name = temp_name();
        ops.writes += 1;
        match rfs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(transient(path, "create temp file", e)),
        }
    }
    Err(TargetError::Transient(format!("{path}: no free temp name")))
}

/// Links `file` at `name` in `dir`; EEXIST when the name is taken,
/// whatever stands there (a symlink is never followed).
pub(super) fn link(how: How, file: &File, dir: BorrowedFd, name: &str) -> Result<(), Errno> {
    match how {
        How::EmptyPath => rfs::linkat(file, "", dir, name, AtFlags::EMPTY_PATH),
        How::Proc => {
            let own = format!("/proc/self/fd/{}", file.as_raw_fd());
            rfs::linkat(CWD, own.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW)
        }
    }
}

/// Links `file` under a fresh temp name in `dir`, returned.
pub(super) fn name_it(how: How, file: &File, dir: BorrowedFd) -> Result<String, Errno> {
    let mut last = Errno::EXIST;
    for _ in 0..8 {
        let name = temp_name();
        match link(how, file, dir, &name) {
            Ok(()) => return Ok(name),
            Err(e @ Errno::EXIST) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;

    use super::*;

    fn unnamed_in(dir: &File) -> File {
        let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
        File::from(rfs::openat(dir, ".", flags, Mode::from_raw_mode(0o600)).unwrap())
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn only_tend_temp_names_match() {
        assert!(is_temp_name(b".tend-0123456789abcdef.tmp"));
        assert!(
            is_temp_name(b".tend-.tmp"),
            "the glob's star may match nothing"
        );
        assert!(!is_temp_name(b".tend.tmp"));
        assert!(!is_temp_name(b"tend-x.tmp"));
        assert!(!is_temp_name(b".tend-x.tmp.bak"));
        assert!(!is_temp_name(b"notes.tmp"));
    }

    #[test]
    fn an_unnamed_file_is_seen_only_once_linked_and_never_over_a_taken_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = File::open(tmp.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let aimed = outside.path().join("aimed");
        // /proc is always there to link through; AT_EMPTY_PATH only with
        // CAP_DAC_READ_SEARCH, so it is tried where it works.
        let mut ways = vec![How::Proc];
        if name_it(How::EmptyPath, &unnamed_in(&dir), dir.as_fd())
            .is_ok_and(|name| std::fs::remove_file(tmp.path().join(name)).is_ok())
        {
            ways.push(How::EmptyPath);
        }
        for &how in &ways {
            let name = format!("{how:?}");
            let mut file = unnamed_in(&dir);
            file.write_all(b"staged").unwrap();
            assert!(!names(tmp.path()).contains(&name), "unseen while staged");

            link(how, &file, dir.as_fd(), &name).unwrap();
            assert_eq!(std::fs::read(tmp.path().join(&name)).unwrap(), b"staged");

            let other = unnamed_in(&dir);
            assert_eq!(link(how, &other, dir.as_fd(), &name), Err(Errno::EXIST));
            // A dangling symlink is a taken name too, never followed.
            let dangling = format!("{how:?}-link");
            std::os::unix::fs::symlink(&aimed, tmp.path().join(&dangling)).unwrap();
            assert_eq!(link(how, &other, dir.as_fd(), &dangling), Err(Errno::EXIST));
            assert!(!aimed.exists());
            std::fs::remove_file(tmp.path().join(&dangling)).unwrap();

            let temp = name_it(how, &other, dir.as_fd()).unwrap();
            assert!(temp.starts_with(".tend-"), "{temp}");
            assert_eq!(std::fs::read(tmp.path().join(&name)).unwrap(), b"staged");
            std::fs::remove_file(tmp.path().join(temp)).unwrap();
        }
        // Dropped unlinked, a staged file leaves nothing behind.
        drop(unnamed_in(&dir));
        let mut linked: Vec<String> = ways.iter().map(|how| format!("{how:?}")).collect();
        linked.sort();
        assert_eq!(names(tmp.path()), linked);
    }
}

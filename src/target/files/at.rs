//! Calls relative to a directory handle that never follow the last
//! component: stat a name, open and read a regular file; and the parts of
//! a stat result tend uses. The files target's lowest layer: it uses no
//! other part of it.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// The parts of a stat result tend uses, in fixed-width types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Meta {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: u64,
    pub uid: u32,
    pub gid: u32,
    /// Nanoseconds since the epoch.
    pub mtime: i64,
    pub ctime: i64,
}

impl Meta {
    // The stat field types differ between architectures; on some of them
    // these casts are no-ops.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn from_stat(st: &rfs::Stat) -> Meta {
        let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
        Meta {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            size: st.st_size as u64,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            mtime: ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: ns(st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }

    /// The stamp a watcher compares with what it finds later.
    pub(super) fn left(&self) -> crate::target::Left {
        crate::target::Left::Entry {
            dev: self.dev,
            ino: self.ino,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }

    pub(super) fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode)
    }

    /// Permission bits, with setuid, setgid and sticky.
    pub(super) fn perm(&self) -> u32 {
        self.mode & 0o7777
    }
}

/// Stats `name` in `dir` without following it.
pub(super) fn stat_at(dir: BorrowedFd, name: &str) -> Result<Meta, Errno> {
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| Meta::from_stat(&st))
}

/// Opens `name` in `dir` for reading if it is a regular file, never
/// following a symlink and never blocking on a fifo.
pub(super) fn open_regular(dir: BorrowedFd, name: &str) -> Result<Option<(File, Meta)>, Errno> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd: OwnedFd = match rfs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        // ELOOP: the last component is a symlink.
        Err(Errno::LOOP) => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = Meta::from_stat(&rfs::fstat(&fd)?);
    if meta.file_type() != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some((File::from(fd), meta)))
}

/// The bytes of the regular file `name` in `dir`; `None` if it is not one.
pub(super) fn read_regular(dir: BorrowedFd, name: &str) -> io::Result<Option<Vec<u8>>> {
    match open_regular(dir, name) {
        Ok(Some((mut file, meta))) => {
            let mut bytes =
                Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0).min(1 << 24));
            file.read_to_end(&mut bytes)?;
            Ok(Some(bytes))
        }
        Ok(None) => Ok(None),
        Err(e) if is_absent(e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// ENOENT anywhere along the path, or a component that is no directory:
/// the object is not there.
pub(super) fn is_absent(e: Errno) -> bool {
    e == Errno::NOENT || e == Errno::NOTDIR
}

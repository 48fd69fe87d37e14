//! Durability for a whole batch at once: one syncfs on the root's file
//! system stands for an fdatasync of every file and an fsync of every
//! directory on it. Never used for a root of `/`, where it would flush the
//! host's whole file system.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs as rfs;

/// A handle on the root's file system, and its device: what a syncfs on it
/// covers.
pub(super) struct WholeFs {
    fd: OwnedFd,
    dev: u64,
}

impl WholeFs {
    /// `None` when the root cannot be opened or stat'ed: the caller then
    /// syncs file by file.
    pub(super) fn open(root: OwnedFd) -> Option<WholeFs> {
        let dev = rfs::fstat(&root).ok()?.st_dev as u64;
        Some(WholeFs { fd: root, dev })
    }

    /// Whether a syncfs here covers an object on device `dev`: a mount
    /// below the root is another file system.
    pub(super) fn covers(&self, dev: u64) -> bool {
        self.dev == dev
    }

    /// The device of the file system a sync covers.
    pub(super) fn dev(&self) -> u64 {
        self.dev
    }

    pub(super) fn sync(&self, counter: &AtomicU64) -> rustix::io::Result<()> {
        counter.fetch_add(1, Ordering::Relaxed);
        rfs::syncfs(self.fd.as_fd())
    }
}

/// syncfs reports writeback errors only since Linux 5.8; before, a failed
/// write would go unnoticed, so older kernels sync file by file.
pub(super) fn syncfs_reports_errors() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|release| at_least(&release, (5, 8)))
        .unwrap_or(false)
}

/// `6.1.0-18-amd64` -> compared as (6, 1).
fn at_least(release: &str, want: (u32, u32)) -> Option<bool> {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let minor = parts.next()?.ok()?;
    Some((major, minor) >= want)
}

#[cfg(test)]
mod tests {
    use super::at_least;

    #[test]
    fn kernel_releases_compare_by_major_then_minor() {
        assert_eq!(at_least("6.18.44-fc-v595\n", (5, 8)), Some(true));
        assert_eq!(at_least("5.8.0", (5, 8)), Some(true));
        assert_eq!(at_least("5.4.0-150-generic", (5, 8)), Some(false));
        assert_eq!(at_least("4.19.0", (5, 8)), Some(false));
        assert_eq!(at_least("10.0", (5, 8)), Some(true));
        assert_eq!(at_least("garbage", (5, 8)), None);
    }
}

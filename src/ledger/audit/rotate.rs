//! Rotation of the audit log by size and age (`policy.audit_max`,
//! `policy.audit_retention`): the current file moves to `audit.jsonl.1`,
//! older generations move up to `.4`, and generations past the retention or
//! past the size cap are deleted, oldest first.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Rotated generations kept at most, beside the current file.
pub const KEEP: usize = 4;

/// How the log is kept within bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The current file and its rotated generations together stay within
    /// this many bytes.
    pub max: u64,
    /// A rotated generation whose newest line is older than this goes.
    pub retention: Duration,
}

impl Default for Rotation {
    fn default() -> Rotation {
        Rotation {
            max: 64 << 20,
            retention: Duration::from_secs(30 * 86400),
        }
    }
}

impl Rotation {
    /// The size past which the current file moves aside: a share of `max`,
    /// so that it and [`KEEP`] generations fit in `max` together.
    fn file_max(&self) -> u64 {
        (self.max / (KEEP as u64 + 1)).max(1)
    }

    /// The age of its oldest line at which the current file moves aside: a
    /// share of `retention`, so that a generation goes (its newest line past
    /// the retention) holding nothing much older than that.
    fn file_span(&self) -> Duration {
        self.retention / KEEP as u32
    }

    /// Whether the current file, `len` bytes long and started at
    /// `started`, moves aside before `incoming` more bytes are appended. A
    /// clock that went back ages nothing.
    pub(super) fn due(
        &self,
        len: u64,
        incoming: u64,
        started: SystemTime,
        now: SystemTime,
    ) -> bool {
        let age = now.duration_since(started).unwrap_or(Duration::ZERO);
        len > 0 && (len.saturating_add(incoming) > self.file_max() || age >= self.file_span())
    }
}

fn generation(dir: &Path, name: &str, n: usize) -> PathBuf {
    dir.join(format!("{name}.{n}"))
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Opens (creating, mode 0600) the current file for appending.
pub(super) fn open_current(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// Moves the current file to `.1` (and `.n` to `.n+1`, deleting what would
/// pass [`KEEP`], and any generation up to `most` a larger setting left)
/// and returns a new, empty current file. Renames keep every line; a crash
/// between them leaves at worst no current file, which the next open
/// creates.
pub(super) fn rotate(dir: &Path, name: &str, most: usize) -> std::io::Result<File> {
    for n in (KEEP..=most.max(KEEP)).rev() {
        remove(&generation(dir, name, n))?;
    }
    for n in (1..KEEP).rev() {
        match std::fs::rename(generation(dir, name, n), generation(dir, name, n + 1)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    let current = dir.join(name);
    std::fs::rename(&current, generation(dir, name, 1))?;
    let file = open_current(&current)?;
    File::open(dir)?.sync_all()?;
    Ok(file)
}

/// Deletes rotated generations, oldest first, while the oldest is past the
/// retention (its last write, the file's mtime, is its newest line) or the
/// log with `current_len` bytes in its current file is past `max`.
pub(super) fn prune(
    dir: &Path,
    name: &str,
    rotation: &Rotation,
    current_len: u64,
    now: SystemTime,
) -> std::io::Result<()> {
    let mut gens = Vec::new();
    for n in 1..=KEEP {
        match std::fs::metadata(generation(dir, name, n)) {
            Ok(m) => gens.push((n, m.len(), m.modified()?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let mut total = current_len + gens.iter().map(|g| g.1).sum::<u64>();
    let horizon = now.checked_sub(rotation.retention);
    for (n, len, modified) in gens.into_iter().rev() {
        let expired = horizon.is_some_and(|h| modified < h);
        if !expired && total <= rotation.max {
            break;
        }
        remove(&generation(dir, name, n))?;
        total -= len;
    }
    Ok(())
}

/// When the current file was started: its birth time where the file
/// system keeps one (a rotation makes a new file), else the time of its
/// first line, read from its first 64 KiB, else its mtime.
pub(super) fn started(file: &File) -> std::io::Result<SystemTime> {
    let meta = file.metadata()?;
    if let Ok(born) = meta.created() {
        return Ok(born);
    }
    let mut head = vec![0u8; (64 << 10).min(meta.len() as usize)];
    let mut got = 0;
    while got < head.len() {
        match file.read_at(&mut head[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    head.truncate(got);
    let first = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let time = serde_json::from_slice::<serde_json::Value>(first)
        .ok()
        .and_then(|v| v.get("time")?.as_str().map(String::from))
        .and_then(|t| humantime::parse_rfc3339_weak(&t).ok());
    match time {
        Some(t) => Ok(t),
        None => meta.modified(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_file_is_due_past_a_fifth_of_the_cap_or_a_quarter_of_the_retention() {
        let r = Rotation {
            max: 5000,
            retention: Duration::from_secs(40 * 86400),
        };
        let now = SystemTime::now();
        let day = Duration::from_secs(86400);
        assert!(!r.due(900, 100, now, now), "exactly a fifth fits");
        assert!(r.due(900, 101, now, now));
        assert!(!r.due(0, 5000, now, now), "an empty file takes any batch");
        assert!(!r.due(10, 0, now - 9 * day, now));
        assert!(r.due(10, 0, now - 10 * day, now));
        assert!(
            !r.due(0, 10, now - 10 * day, now),
            "an empty file has no old line"
        );
        assert!(
            !r.due(10, 0, now + 100 * day, now),
            "a clock that went back"
        );
    }
}

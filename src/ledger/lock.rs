//! The one-writer rule: an exclusive, non-blocking flock on the state
//! directory itself (unlinking a path cannot undo it), and on
//! `<state_dir>/lock`, whose holder writes who it is into the file for the
//! next contender's error. When that note is gone (the file was removed),
//! the holder is found in /proc/locks.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation, OFlags};

use super::{create_state_dir, LedgerError};

pub const LOCK_FILE: &str = "lock";

/// Held by `run` and `sync` for their lifetime; released on drop, and by the
/// kernel if the process dies, so a crash never leaves a stale lock.
#[derive(Debug)]
pub struct StateLock {
    /// The state directory, locked: what makes the lock one writer's.
    _dir: File,
    /// The lock file, locked too (as tend before did, so an older tend is
    /// kept out as well), holding the holder's note.
    file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock or fails at once with [`LedgerError::Locked`] naming the
    /// holder. `what` says what the holder is doing (`run`, `sync`).
    pub fn acquire(state_dir: &Path, what: &str) -> Result<StateLock, LedgerError> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(LOCK_FILE);
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags((OFlags::DIRECTORY | OFlags::NOFOLLOW).bits() as i32)
            .open(state_dir)
            .map_err(|e| LedgerError::io(state_dir, e))?;
        match flock(&dir, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(LedgerError::Locked {
                    holder: holder(state_dir, &dir),
                })
            }
            Err(e) => return Err(LedgerError::io(state_dir, e.into())),
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| LedgerError::io(&path, e))?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = read_note(&mut file).unwrap_or_else(not_identified);
                return Err(LedgerError::Locked { holder });
            }
            Err(e) => return Err(LedgerError::io(&path, e.into())),
        }
        let note = format!("pid {} ({what})\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(note.as_bytes()))
            .map_err(|e| LedgerError::io(&path, e))?;
        Ok(StateLock {
            _dir: dir,
            file,
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        // Best effort: the lock, not the note, is what matters, and closing
        // the files releases it whatever happens here.
        let _ = self.file.set_len(0);
    }
}

fn not_identified() -> String {
    "another process (it has not identified itself yet)".to_string()
}

/// Who holds the lock on `dir`: the note in the lock file, else the process
/// /proc/locks names.
fn holder(state_dir: &Path, dir: &File) -> String {
    let path = state_dir.join(LOCK_FILE);
    let note = OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .ok()
        .and_then(|mut f| read_note(&mut f));
    if let Some(note) = note {
        return note;
    }
    let from_proc = dir
        .metadata()
        .ok()
        .and_then(|m| locker_of(m.dev(), m.ino()));
    match from_proc {
        Some(pid) => format!("pid {pid} ({})", command_of(pid)),
        None => not_identified(),
    }
}

/// The holder writes its note just after taking the lock, so a contender can
/// arrive in between and find the file empty.
fn read_note(file: &mut File) -> Option<String> {
    let mut note = String::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.take(256).read_to_string(&mut note));
    let note = note.trim();
    (!note.is_empty()).then(|| note.to_string())
}

/// The process holding an flock on the inode (`dev`, `ino`), from
/// /proc/locks (`1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<ino> 0 EOF`,
/// the device numbers in hex).
fn locker_of(dev: u64, ino: u64) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let want = format!(
        "{:02x}:{:02x}:{ino}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    );
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Waiters are listed as `1: -> FLOCK ...`.
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, file, ..] if *file == want => pid.parse().ok(),
            _ => None,
        }
    })
}

/// A process's program (its file name) and first argument, for naming it.
fn command_of(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut words = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned());
    let program = words.next().map(|p| match p.rsplit_once('/') {
        Some((_, name)) => name.to_string(),
        None => p,
    });
    let line = match (program, words.next()) {
        (Some(p), Some(arg)) => format!("{p} {arg}"),
        (Some(p), None) => p,
        (None, _) => "command unknown".into(),
    };
    line.chars().take(120).collect()
}

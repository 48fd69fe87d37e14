//! The one-writer rule: an exclusive, non-blocking flock on `<state_dir>/lock`
//! whose holder writes who it is into the file for the next contender's error.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use super::{create_state_dir, LedgerError};

pub const LOCK_FILE: &str = "lock";

/// Held by `run` and `sync` for their lifetime; released on drop, and by the
/// kernel if the process dies, so a crash never leaves a stale lock.
#[derive(Debug)]
pub struct StateLock {
    file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock or fails at once with [`LedgerError::Locked`] naming the
    /// holder. `what` says what the holder is doing (`run`, `sync`).
    pub fn acquire(state_dir: &Path, what: &str) -> Result<StateLock, LedgerError> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc_o_nofollow())
            .open(&path)
            .map_err(|e| LedgerError::io(&path, e))?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = read_holder(&mut file);
                return Err(LedgerError::Locked { holder });
            }
            Err(e) => return Err(LedgerError::io(&path, e.into())),
        }
        let note = format!("pid {} ({what})\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(note.as_bytes()))
            .map_err(|e| LedgerError::io(&path, e))?;
        Ok(StateLock { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        // Best effort: the lock, not the note, is what matters, and closing
        // the file releases it whatever happens here.
        let _ = self.file.set_len(0);
    }
}

/// The holder writes its note just after taking the lock, so a contender can
/// arrive in between and find the file empty.
fn read_holder(file: &mut File) -> String {
    let mut note = String::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.take(256).read_to_string(&mut note));
    match note.trim() {
        "" => "another process (it has not identified itself yet)".to_string(),
        note => note.to_string(),
    }
}

/// The state dir belongs to tend; a symlink planted at its lock path is not
/// followed.
fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

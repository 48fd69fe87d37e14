//! Notes about the ledger kept beside it, in files of their own, since the
//! ledger may be what cannot be read or written:
//! - `ledger.damaged`: a writer met damage (a pass reading a scribbled
//!   page); `tend status` reports it for as long as the note names the
//!   database file there (the same inode). A ledger moved aside and made
//!   afresh, or found sound again by an integrity check, leaves it behind.
//! - `ledger.unrecorded`: the daemon could not record its last outcomes (a
//!   full disk); removed once they are recorded.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{LedgerError, DATABASE_FILE};

pub const DAMAGE_FILE: &str = "ledger.damaged";
pub const UNRECORDED_FILE: &str = "ledger.unrecorded";

/// The most of a note read back.
const NOTE_MAX: u64 = 4096;

impl LedgerError {
    /// The database file's content is damaged (not merely unreachable).
    pub fn is_damage(&self) -> bool {
        matches!(self, LedgerError::Corrupt { path, .. } if path.file_name() == Some(DATABASE_FILE.as_ref()))
    }
}

fn identity(state_dir: &Path) -> Option<String> {
    let m = std::fs::metadata(state_dir.join(DATABASE_FILE)).ok()?;
    Some(format!("{}:{}", m.dev(), m.ino()))
}

/// Notes `err` when it is damage of the database. Best effort: a state dir
/// that cannot take the note still has the error reported by its caller.
pub fn note_damage(state_dir: &Path, err: &LedgerError) {
    if !err.is_damage() {
        return;
    }
    let Some(id) = identity(state_dir) else {
        return;
    };
    let when = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    if let Err(e) = put(
        state_dir,
        DAMAGE_FILE,
        &format!("{id}\n{err} (found {when})\n"),
    ) {
        tracing::warn!(error = %e, "cannot note the ledger's damage");
    }
}

/// Replaces a note whole (a temp file renamed over it).
fn put(state_dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let temp = state_dir.join(format!(".tend-note-{:016x}.tmp", rand::random::<u64>()));
    let written =
        std::fs::write(&temp, text).and_then(|()| std::fs::rename(&temp, state_dir.join(name)));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

fn read(state_dir: &Path, name: &str) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(state_dir.join(name))
        .ok()?
        .take(NOTE_MAX)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Notes that the daemon's outcomes since `since` could not be recorded,
/// and why. Fails as any write to a full disk may.
pub fn note_write_failure(state_dir: &Path, why: &str) -> std::io::Result<()> {
    put(state_dir, UNRECORDED_FILE, &format!("{why}\n"))
}

/// Why the daemon could not record its last outcomes, if it could not.
pub fn noted_write_failure(state_dir: &Path) -> Option<String> {
    let text = read(state_dir, UNRECORDED_FILE)?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The outcomes are recorded: the note goes.
pub fn clear_write_failure(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(UNRECORDED_FILE));
}

/// The damage noted for the database file now in `state_dir`, if any.
pub fn noted_damage(state_dir: &Path) -> Option<String> {
    let text = read(state_dir, DAMAGE_FILE)?;
    let (id, message) = text.split_once('\n')?;
    (Some(id) == identity(state_dir).as_deref()).then(|| message.trim().to_string())
}

/// Removes the note (the ledger was found sound).
pub fn clear_damage(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(DAMAGE_FILE));
}

//! Notes about the ledger kept beside it, in files of their own, since the
//! ledger may be what cannot be read or written:
//! - `ledger.damaged`: a writer met damage (a pass reading a scribbled
//!   page); `tend status` reports it for as long as the note names the
//!   database file there (the same inode). A ledger moved aside and made
//!   afresh, or found sound again by an integrity check, leaves it behind.
//! - `ledger.unrecorded`: the daemon could not record its last outcomes (a
//!   full disk); blank once they are recorded. It keeps its space, so it
//!   can still be written when the disk is full.

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

/// The size the write-failure note keeps allocated, so that it can be
/// written on a file system that is full: overwriting bytes a file holds
/// needs no new space on most file systems.
const UNRECORDED_SIZE: usize = 4096;

/// At a daemon's start: makes sure the write-failure note has its space,
/// and returns what it says (a previous process's failure, whose outcomes
/// the first pass looks at again).
pub fn reserve_write_failure_note(state_dir: &Path) -> Option<String> {
    let noted = noted_write_failure(state_dir);
    let path = state_dir.join(UNRECORDED_FILE);
    let long_enough = std::fs::metadata(&path).is_ok_and(|m| m.len() >= UNRECORDED_SIZE as u64);
    if !long_enough {
        let _ = overwrite(state_dir, noted.as_deref().unwrap_or(""));
    }
    noted
}

/// Writes `text` over the note's bytes, padded with spaces to its size.
fn overwrite(state_dir: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut bytes: Vec<u8> = text.bytes().take(UNRECORDED_SIZE - 1).collect();
    bytes.push(b'\n');
    bytes.resize(UNRECORDED_SIZE, b' ');
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(state_dir.join(UNRECORDED_FILE))?;
    f.write_all(&bytes)?;
    f.sync_data()
}

/// Notes that the daemon could not record its outcomes, and why.
pub fn note_write_failure(state_dir: &Path, why: &str) -> std::io::Result<()> {
    overwrite(state_dir, why.trim())
}

/// Why the daemon could not record its last outcomes, if it could not.
pub fn noted_write_failure(state_dir: &Path) -> Option<String> {
    let text = read(state_dir, UNRECORDED_FILE)?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The outcomes are recorded: the note says nothing (and keeps its space).
pub fn clear_write_failure(state_dir: &Path) {
    if noted_write_failure(state_dir).is_some() {
        let _ = overwrite(state_dir, "");
    }
}

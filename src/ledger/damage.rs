//! A damaged ledger, noted beside it: a writer that meets the damage (a
//! pass reading a scribbled page) writes `<state_dir>/ledger.damaged`, and
//! `tend status` reports it for as long as the note names the database file
//! there (the same inode). A ledger moved aside and made afresh, or found
//! sound again by an integrity check, leaves the note behind.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{LedgerError, DATABASE_FILE};

pub const DAMAGE_FILE: &str = "ledger.damaged";

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
    let text = format!("{id}\n{err} (found {when})\n");
    let temp = state_dir.join(format!(".tend-damage-{:016x}.tmp", rand::random::<u64>()));
    let written = std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, state_dir.join(DAMAGE_FILE)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        tracing::warn!(error = %e, "cannot note the ledger's damage");
    }
}

/// The damage noted for the database file now in `state_dir`, if any.
pub fn noted_damage(state_dir: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(state_dir.join(DAMAGE_FILE))
        .ok()?
        .take(NOTE_MAX)
        .read_to_string(&mut text)
        .ok()?;
    let (id, message) = text.split_once('\n')?;
    (Some(id) == identity(state_dir).as_deref()).then(|| message.trim().to_string())
}

/// Removes the note (the ledger was found sound).
pub fn clear_damage(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(DAMAGE_FILE));
}

//! tend's persisted state under the state dir (everything but the Git mirror):
//! the writer lock, the SQLite ledger (inventory, drift ledger, pauses,
//! intents, source state), content-addressed backups, the audit log and the
//! per-state-dir key for hashing sensitive content.

mod audit;
mod backup;
pub mod day;
mod db;
mod declared;
mod hashkey;
mod lock;
mod notes;
mod pauses;
mod records;
mod schema;
mod trust;
mod tx;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use audit::{
    tail as audit_tail, AuditEntry, AuditLog, Backwards as AuditBackwards,
    Rotation as AuditRotation, Tail as AuditTail, TAIL_BYTES as AUDIT_TAIL_BYTES,
};
pub use backup::BackupStore;
pub use db::Ledger;
pub use declared::Digest;
pub use hashkey::HashKey;
pub use lock::StateLock;
pub use notes::{
    clear_damage, clear_write_failure, note_damage, note_write_failure, noted_damage,
    noted_write_failure, reserve_write_failure_note, DAMAGE_FILE, UNRECORDED_FILE,
};
pub use records::{
    next_drift_since, Intent, IntentKind, InventoryEntry, PauseRecord, PinRecord, RefusalRecord,
    ResourceRecord, SourceRecord, State,
};
pub use tx::Tx;

/// The database file inside the state dir.
pub const DATABASE_FILE: &str = "ledger.db";

/// Everything that can go wrong with persisted state. Every variant names the
/// file involved, so an operator knows where to look.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Database {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{} is corrupt: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "{} has schema version {found}, newer than this tend understands ({supported}); \
         upgrade tend or use another state dir",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error(
        "{} has schema version {found}, older than this tend's ({supported}); \
         `tend sync` or `tend run` upgrades it",
        path.display()
    )]
    OlderSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("no ledger at {}: tend has not run with this state dir yet", path.display())]
    NotFound { path: PathBuf },
    /// Another process holds `<state_dir>/lock`; `holder` is what it wrote
    /// there, its pid and command.
    #[error("state dir is locked by {holder}")]
    Locked { holder: String },
    #[error("{}: invalid backup reference {reference:?}: expected hmac-sha256:<64 hex digits>", path.display())]
    BadReference { path: PathBuf, reference: String },
}

impl LedgerError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LedgerError::Io {
            path: path.into(),
            source,
        }
    }

    /// SQLite reports a file that is not a database, or a damaged one, through
    /// these codes; they deserve words an operator can act on.
    pub(crate) fn db(path: &Path, source: rusqlite::Error) -> Self {
        use rusqlite::Error::{
            FromSqlConversionFailure, IntegralValueOutOfRange, InvalidColumnType,
        };
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        // A value of a type the schema never stores is damage too: a page
        // scribbled over can read back as cells that SQLite accepts.
        let misread = matches!(
            source,
            InvalidColumnType(..) | FromSqlConversionFailure(..) | IntegralValueOutOfRange(..)
        );
        match source.sqlite_error_code() {
            _ if misread => LedgerError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("{source}; move it aside to start with empty state"),
            },
            Some(NotADatabase) | Some(DatabaseCorrupt) => LedgerError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("{source}; move it aside to start with empty state"),
            },
            _ => LedgerError::Database {
                path: path.to_path_buf(),
                source,
            },
        }
    }
}

/// Unix milliseconds, as times are stored. Times before 1970 are negative
/// rather than an error: a skewed clock must not make state unwritable.
pub(crate) fn to_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn from_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// Creates the state dir, and any missing parent, readable by its owner only:
/// it holds backups of overwritten content and the hashing key.
pub(crate) fn create_state_dir(state_dir: &Path) -> Result<(), LedgerError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .map_err(|e| LedgerError::io(state_dir, e))
}

/// Makes a rename or a new entry in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LedgerError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LedgerError::io(dir, e))
}

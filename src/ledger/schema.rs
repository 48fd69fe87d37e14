//! The ledger's schema, the one place it is defined, and its migrations.
//! `PRAGMA user_version` records how many migrations a database has had.

use std::path::Path;

use rusqlite::Connection;

use super::LedgerError;

/// Migration `i` takes a database from version `i` to `i + 1`. Append only:
/// a released migration is never edited, a change is a new entry.
const MIGRATIONS: &[&str] = &[
    FIRST_SCHEMA,
    TYPED_META,
    TRUST,
    SOURCE_NOTES,
    HA_ROLE,
    ROLLOUT,
];

/// 1: the first schema. Times are unix milliseconds.
pub(crate) const FIRST_SCHEMA: &str = "
    CREATE TABLE inventory (
        id     TEXT PRIMARY KEY NOT NULL,
        target TEXT NOT NULL,
        path   TEXT NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE resources (
        id           TEXT PRIMARY KEY NOT NULL,
        state        TEXT NOT NULL,
        drift_since  INTEGER,
        attempts     INTEGER NOT NULL DEFAULT 0,
        reason       TEXT,
        next_retry   INTEGER,
        last_applied INTEGER,
        corrections  TEXT NOT NULL DEFAULT '[]'  -- JSON array of times
    ) WITHOUT ROWID;

    -- scope '' pauses everything; otherwise it is a resource id.
    CREATE TABLE pauses (
        scope TEXT PRIMARY KEY NOT NULL,
        until INTEGER
    ) WITHOUT ROWID;

    -- AUTOINCREMENT: a cleared intent's number is never handed out again.
    CREATE TABLE intents (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        kind       TEXT NOT NULL,
        id         TEXT NOT NULL,
        detail     TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX intents_by_kind ON intents (kind, seq);

    CREATE TABLE source (
        singleton        INTEGER PRIMARY KEY CHECK (singleton = 1),
        repo             TEXT NOT NULL,
        reference        TEXT,
        fetched_revision TEXT,
        applied_revision TEXT,
        last_fetch_at    INTEGER,
        last_fetch_error TEXT,
        last_success_at  INTEGER,
        drift_since      INTEGER
    );

    CREATE TABLE meta (
        key   TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    ) WITHOUT ROWID;
    ";

/// 2: the text-keyed meta rows become columns. Per identity: the
/// declaration it was last applied from, the one a terminal error blocked,
/// the fields of a structured resource tend set (a JSON array). For the
/// whole state dir: one row of markers and status lines. An empty meta
/// value meant a cleared key: it becomes NULL.
const TYPED_META: &str = "
    CREATE TABLE declared (
        id             TEXT PRIMARY KEY NOT NULL,
        applied_digest TEXT,
        blocked_digest TEXT,
        managed_fields TEXT
    ) WITHOUT ROWID;
    INSERT INTO declared (id, applied_digest, blocked_digest, managed_fields)
    SELECT id,
        (SELECT NULLIF(value, '') FROM meta WHERE key = 'applied:' || id),
        (SELECT NULLIF(value, '') FROM meta WHERE key = 'blocked:' || id),
        (SELECT NULLIF(value, '') FROM meta WHERE key = 'managed:' || id)
    FROM (SELECT DISTINCT substr(key, instr(key, ':') + 1) AS id FROM meta
          WHERE (key LIKE 'applied:%' OR key LIKE 'blocked:%' OR key LIKE 'managed:%')
            AND value <> '');

    -- temp_files_swept: no temp file of tend's is left beside managed paths.
    -- records_settled: every record InSync with nothing pending, naming
    -- which identities (any record write clears it). declaration_problems:
    -- a JSON array of the last revision's problems.
    CREATE TABLE overall (
        singleton            INTEGER PRIMARY KEY CHECK (singleton = 1),
        temp_files_swept     INTEGER NOT NULL DEFAULT 0,
        records_settled      TEXT,
        watcher              TEXT,
        declaration_problems TEXT
    );
    INSERT INTO overall VALUES (1,
        EXISTS (SELECT 1 FROM meta WHERE key = 'temp_files_swept'),
        (SELECT NULLIF(value, '') FROM meta WHERE key = 'records_settled'),
        (SELECT NULLIF(value, '') FROM meta WHERE key = 'watcher'),
        (SELECT NULLIF(value, '') FROM meta WHERE key = 'problems'));

    DROP TABLE meta;
    ";

/// 3: trust in the source (SPEC §9). The newest revision applied per
/// repository and ref (the high-water mark), the refusal of the last
/// fetched revision, the operator's pin, and who signed what was applied.
const TRUST: &str = "
    CREATE TABLE source_marks (
        repo       TEXT NOT NULL,
        reference  TEXT NOT NULL,  -- '' for the remote's HEAD
        revision   TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (repo, reference)
    ) WITHOUT ROWID;

    CREATE TABLE source_refusal (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        revision  TEXT NOT NULL,
        reason    TEXT NOT NULL,
        detail    TEXT NOT NULL,
        at        INTEGER NOT NULL
    );

    CREATE TABLE source_pin (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        revision  TEXT NOT NULL,
        until     INTEGER,
        pinned_at INTEGER NOT NULL
    );

    CREATE TABLE signers (
        revision   TEXT PRIMARY KEY NOT NULL,
        signer     TEXT NOT NULL,
        applied_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    ";

/// 4: what the source section of status says besides the fetch: what the
/// revision last worked on leaves out (a JSON array: submodules), and when
/// and how the mirror was last repaired.
const SOURCE_NOTES: &str = "
    ALTER TABLE overall ADD COLUMN source_warnings TEXT;
    ALTER TABLE overall ADD COLUMN mirror_repaired TEXT;
    ";

/// 5: with `ha`, this replica's role (`leader`, `follower`) and the
/// leader's name as the daemon last saw them.
const HA_ROLE: &str = "
    ALTER TABLE overall ADD COLUMN ha_role TEXT;
    ALTER TABLE overall ADD COLUMN ha_leader TEXT;
    ";

/// 6: with `fleet.rollout`, where this host's staged rollout stands
/// (SPEC §12), as JSON.
const ROLLOUT: &str = "
    ALTER TABLE overall ADD COLUMN rollout TEXT;
    ";

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub fn version(conn: &Connection, path: &Path) -> Result<i64, LedgerError> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| LedgerError::db(path, e))
}

/// Brings a writable database up to [`SCHEMA_VERSION`], each step in its own
/// transaction together with its version bump, so a crash leaves a database
/// at some whole version.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), LedgerError> {
    let found = version(conn, path)?;
    if found > SCHEMA_VERSION {
        return Err(LedgerError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for (step, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| LedgerError::db(path, e))?;
        // Another writer (e.g. `tend pause` racing a first `tend run`) may
        // have migrated while this one waited for the write lock.
        if version(&tx, path)? > step as i64 {
            continue;
        }
        tx.execute_batch(sql)
            .map_err(|e| LedgerError::db(path, e))?;
        tx.pragma_update(None, "user_version", step as i64 + 1)
            .map_err(|e| LedgerError::db(path, e))?;
        tx.commit().map_err(|e| LedgerError::db(path, e))?;
    }
    Ok(())
}

/// A read-only connection cannot migrate: it accepts only the current schema.
pub fn check_current(conn: &Connection, path: &Path) -> Result<(), LedgerError> {
    let found = version(conn, path)?;
    match found.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(LedgerError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        }),
        std::cmp::Ordering::Less => Err(LedgerError::OlderSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        }),
    }
}

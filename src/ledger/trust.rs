//! What the ledger keeps of trust in the source (SPEC §9): the high-water
//! mark per repository and ref, the refusal of the last fetched revision,
//! the operator's pin, and the signer of each revision applied.

use std::time::SystemTime;

use rusqlite::{params, OptionalExtension};

use super::records::{PinRecord, RefusalRecord};
use super::tx::Tx;
use super::{from_millis, to_millis, Ledger, LedgerError};

type Res<T> = Result<T, LedgerError>;

/// Signers of this many revisions applied last are kept.
const SIGNERS_KEPT: i64 = 100;

impl Tx<'_> {
    fn run(&self, sql: &str, p: impl rusqlite::Params) -> Res<()> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(p))
            .map(drop)
            .map_err(|e| LedgerError::db(self.path, e))
    }

    /// The newest revision applied from `repo` at `reference` (`None`: the
    /// remote's HEAD).
    pub fn high_water(&self, repo: &str, reference: Option<&str>) -> Res<Option<String>> {
        self.conn
            .prepare_cached("SELECT revision FROM source_marks WHERE repo = ?1 AND reference = ?2")
            .and_then(|mut s| {
                s.query_row(params![repo, reference.unwrap_or("")], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| LedgerError::db(self.path, e))
    }

    /// Every high-water mark, of any repository and ref: revisions the
    /// mirror's collection keeps.
    pub fn high_water_marks(&self) -> Res<Vec<String>> {
        self.conn
            .prepare_cached("SELECT DISTINCT revision FROM source_marks")
            .and_then(|mut s| {
                s.query_map([], |r| r.get(0))
                    .and_then(|rows| rows.collect())
            })
            .map_err(|e| LedgerError::db(self.path, e))
    }

    pub fn set_high_water(&self, repo: &str, reference: Option<&str>, revision: &str) -> Res<()> {
        self.run(
            "INSERT OR REPLACE INTO source_marks (repo, reference, revision, updated_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                repo,
                reference.unwrap_or(""),
                revision,
                to_millis(SystemTime::now())
            ],
        )
    }

    pub fn refusal(&self) -> Res<Option<RefusalRecord>> {
        self.conn
            .query_row(
                "SELECT revision, reason, detail, at FROM source_refusal WHERE singleton = 1",
                [],
                |r| {
                    Ok(RefusalRecord {
                        revision: r.get(0)?,
                        reason: r.get(1)?,
                        detail: r.get(2)?,
                        at: from_millis(r.get(3)?),
                    })
                },
            )
            .optional()
            .map_err(|e| LedgerError::db(self.path, e))
    }

    /// Records a refusal; `None` clears it (a revision was admitted).
    pub fn set_refusal(&self, refusal: Option<&RefusalRecord>) -> Res<()> {
        match refusal {
            Some(r) => self.run(
                "INSERT OR REPLACE INTO source_refusal (singleton, revision, reason, detail, at)
                 VALUES (1, ?1, ?2, ?3, ?4)",
                params![r.revision, r.reason, r.detail, to_millis(r.at)],
            ),
            None => self.run("DELETE FROM source_refusal", []),
        }
    }

    /// The pin in force at `now`; an expired one is not returned.
    pub fn pin_at(&self, now: SystemTime) -> Res<Option<PinRecord>> {
        self.conn
            .query_row(
                "SELECT revision, until, pinned_at FROM source_pin
                 WHERE singleton = 1 AND (until IS NULL OR until > ?1)",
                params![to_millis(now)],
                |r| {
                    Ok(PinRecord {
                        revision: r.get(0)?,
                        until: r.get::<_, Option<i64>>(1)?.map(from_millis),
                        pinned_at: from_millis(r.get(2)?),
                    })
                },
            )
            .optional()
            .map_err(|e| LedgerError::db(self.path, e))
    }

    /// Sets the pin; `None` lifts it.
    pub fn set_pin(&self, pin: Option<&PinRecord>) -> Res<()> {
        match pin {
            Some(p) => self.run(
                "INSERT OR REPLACE INTO source_pin (singleton, revision, until, pinned_at)
                 VALUES (1, ?1, ?2, ?3)",
                params![p.revision, p.until.map(to_millis), to_millis(p.pinned_at)],
            ),
            None => self.run("DELETE FROM source_pin", []),
        }
    }

    /// Notes who signed a revision applied now; older notes beyond the
    /// last [`SIGNERS_KEPT`] go.
    pub fn note_signer(&self, revision: &str, signer: &str) -> Res<()> {
        self.run(
            "INSERT OR REPLACE INTO signers (revision, signer, applied_at) VALUES (?1, ?2, ?3)",
            params![revision, signer, to_millis(SystemTime::now())],
        )?;
        self.run(
            "DELETE FROM signers WHERE revision NOT IN
                 (SELECT revision FROM signers ORDER BY applied_at DESC LIMIT ?1)",
            params![SIGNERS_KEPT],
        )
    }

    pub fn signer_of(&self, revision: &str) -> Res<Option<String>> {
        self.conn
            .prepare_cached("SELECT signer FROM signers WHERE revision = ?1")
            .and_then(|mut s| s.query_row(params![revision], |r| r.get(0)).optional())
            .map_err(|e| LedgerError::db(self.path, e))
    }
}

impl Ledger {
    /// See [`Tx::high_water`].
    pub fn high_water(&self, repo: &str, reference: Option<&str>) -> Res<Option<String>> {
        self.q().high_water(repo, reference)
    }
    pub fn high_water_marks(&self) -> Res<Vec<String>> {
        self.q().high_water_marks()
    }
    pub fn set_high_water(&self, repo: &str, reference: Option<&str>, revision: &str) -> Res<()> {
        self.q().set_high_water(repo, reference, revision)
    }
    pub fn refusal(&self) -> Res<Option<RefusalRecord>> {
        self.q().refusal()
    }
    pub fn set_refusal(&self, refusal: Option<&RefusalRecord>) -> Res<()> {
        self.q().set_refusal(refusal)
    }
    /// The pin in force now.
    pub fn pin(&self) -> Res<Option<PinRecord>> {
        self.q().pin_at(SystemTime::now())
    }
    /// The pin in force at `now`.
    pub fn pin_at(&self, now: SystemTime) -> Res<Option<PinRecord>> {
        self.q().pin_at(now)
    }
    pub fn set_pin(&self, pin: Option<&PinRecord>) -> Res<()> {
        self.q().set_pin(pin)
    }
    pub fn note_signer(&self, revision: &str, signer: &str) -> Res<()> {
        self.q().note_signer(revision, signer)
    }
    pub fn signer_of(&self, revision: &str) -> Res<Option<String>> {
        self.q().signer_of(revision)
    }
}

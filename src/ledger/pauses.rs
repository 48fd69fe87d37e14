//! What the ledger keeps of pauses (`tend pause`, `tend resume`): one
//! resource's or every resource's, until a time or until resumed, and the
//! resources resumed while a pause of everything lasts.

use std::time::SystemTime;

use rusqlite::params;

use super::records::PauseRecord;
use super::tx::Tx;
use super::{from_millis, to_millis, LedgerError};

type Res<T> = Result<T, LedgerError>;

/// Scope prefix of a resource resumed while a global pause lasts.
const RESUMED: &str = "!";

impl Tx<'_> {
    /// Pauses one resource, or all with `None`; a second pause of the same
    /// scope replaces the first's expiry.
    pub fn pause(&self, id: Option<&str>, until: Option<SystemTime>) -> Res<()> {
        // A global pause pauses everything, resources resumed under an
        // earlier one too; pausing one resource ends its exception.
        match id {
            Some(id) => self.exec(
                "DELETE FROM pauses WHERE scope = ?1",
                params![format!("{RESUMED}{id}")],
            )?,
            None => self.exec(
                "DELETE FROM pauses WHERE substr(scope, 1, 1) = ?1",
                params![RESUMED],
            )?,
        }
        self.exec(
            "INSERT OR REPLACE INTO pauses (scope, until) VALUES (?1, ?2)",
            params![id.unwrap_or(""), until.map(to_millis)],
        )
    }

    /// Lifts the pause of one resource; `None` lifts every pause, global and
    /// per resource. A resource resumed while a global pause lasts is
    /// excepted from it for as long as it lasts.
    pub fn resume(&self, id: Option<&str>) -> Res<()> {
        match id {
            Some(id) => {
                self.exec("DELETE FROM pauses WHERE scope = ?1", params![id])?;
                self.exec(
                    "INSERT OR REPLACE INTO pauses (scope, until) \
                     SELECT ?1, until FROM pauses WHERE scope = ''",
                    params![format!("{RESUMED}{id}")],
                )
            }
            None => self.exec("DELETE FROM pauses", []),
        }
    }

    /// The pauses in force now.
    pub fn pauses(&self) -> Res<Vec<PauseRecord>> {
        self.pauses_at(SystemTime::now())
    }

    /// The pauses in force at `now`; expired ones are left out (and left in
    /// the table, so a reader never has to write).
    pub fn pauses_at(&self, now: SystemTime) -> Res<Vec<PauseRecord>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT scope, until FROM pauses WHERE until IS NULL OR until > ?1 ORDER BY scope",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![to_millis(now)], |r| {
                let scope: String = r.get(0)?;
                let resumed = scope.strip_prefix(RESUMED).map(str::to_string);
                Ok(PauseRecord {
                    excepted: resumed.is_some(),
                    id: resumed.or((!scope.is_empty()).then_some(scope)),
                    until: r.get::<_, Option<i64>>(1)?.map(from_millis),
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

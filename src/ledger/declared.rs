//! What the ledger keeps of each identity's declaration (the digest it was
//! last applied from, the one a terminal error blocked, the fields tend set
//! on a structured resource) and of the state dir as a whole (markers and
//! status lines), as typed columns of `declared` and `overall`.

use rusqlite::{params, OptionalExtension};

use super::tx::Tx;
use super::LedgerError;

type Res<T> = Result<T, LedgerError>;

/// Which digest of a declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    /// The declaration a resource was last applied from.
    Applied,
    /// The declaration a terminal error blocked: it stays blocked until
    /// its declaration changes.
    Blocked,
}

impl Digest {
    fn column(self) -> &'static str {
        match self {
            Digest::Applied => "applied_digest",
            Digest::Blocked => "blocked_digest",
        }
    }
}

impl Tx<'_> {
    pub fn digest(&self, which: Digest, id: &str) -> Res<Option<String>> {
        let sql = format!("SELECT {} FROM declared WHERE id = ?1", which.column());
        self.one(&sql, params![id]).map(Option::flatten)
    }

    /// How many identities hold a digest of `which`, counting no further
    /// than `cap`.
    pub fn digest_count(&self, which: Digest, cap: u64) -> Res<u64> {
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM declared WHERE {} IS NOT NULL LIMIT ?1)",
            which.column()
        );
        self.conn
            .prepare_cached(&sql)
            .and_then(|mut s| s.query_row(params![cap as i64], |r| r.get::<_, i64>(0)))
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }

    /// Every (identity, digest) of `which`.
    pub fn digests(&self, which: Digest) -> Res<Vec<(String, String)>> {
        let sql = format!(
            "SELECT id, {0} FROM declared WHERE {0} IS NOT NULL",
            which.column()
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }

    /// What `id` was applied from; applying clears a block.
    pub fn set_applied_digest(&self, id: &str, digest: &str) -> Res<()> {
        self.exec(
            "INSERT INTO declared (id, applied_digest) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET applied_digest = ?2, blocked_digest = NULL",
            params![id, digest],
        )
    }

    pub fn set_blocked_digest(&self, id: &str, digest: &str) -> Res<()> {
        self.exec(
            "INSERT INTO declared (id, blocked_digest) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET blocked_digest = ?2",
            params![id, digest],
        )
    }

    /// The fields tend set on a structured resource, as a JSON array.
    pub fn managed_fields(&self, id: &str) -> Res<Option<String>> {
        self.one(
            "SELECT managed_fields FROM declared WHERE id = ?1",
            params![id],
        )
        .map(Option::flatten)
    }

    pub fn set_managed_fields(&self, id: &str, json: &str) -> Res<()> {
        self.exec(
            "INSERT INTO declared (id, managed_fields) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET managed_fields = ?2",
            params![id, json],
        )
    }

    /// Forgets everything of `id`'s declaration.
    pub fn forget_declared(&self, id: &str) -> Res<()> {
        self.exec("DELETE FROM declared WHERE id = ?1", params![id])
    }

    /// Whether the last sweep left no temp file of tend's.
    pub fn temp_swept(&self) -> Res<bool> {
        self.one("SELECT temp_files_swept FROM overall", [])
            .map(|v: Option<bool>| v.unwrap_or(false))
    }

    pub fn set_temp_swept(&self, swept: bool) -> Res<()> {
        self.exec("UPDATE overall SET temp_files_swept = ?1", params![swept])
    }

    /// The watcher's line for status.
    pub fn watcher(&self) -> Res<Option<String>> {
        self.one("SELECT watcher FROM overall", [])
            .map(Option::flatten)
    }

    pub fn set_watcher(&self, line: &str) -> Res<()> {
        self.exec("UPDATE overall SET watcher = ?1", params![line])
    }

    /// The problems of the revision last worked on.
    pub fn declaration_problems(&self) -> Res<Vec<String>> {
        let raw: Option<String> = self
            .one("SELECT declaration_problems FROM overall", [])
            .map(Option::flatten)?;
        match raw {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(&text).map_err(|e| LedgerError::Corrupt {
                path: self.path.to_path_buf(),
                detail: format!("declaration problems: {e}"),
            }),
        }
    }

    pub fn set_declaration_problems(&self, problems: &[String]) -> Res<()> {
        let text =
            (!problems.is_empty()).then(|| serde_json::to_string(problems).expect("strings"));
        self.exec(
            "UPDATE overall SET declaration_problems = ?1",
            params![text],
        )
    }

    /// What the revision last worked on leaves out (submodules).
    pub fn source_warnings(&self) -> Res<Vec<String>> {
        let raw: Option<String> = self
            .one("SELECT source_warnings FROM overall", [])
            .map(Option::flatten)?;
        match raw {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(&text).map_err(|e| LedgerError::Corrupt {
                path: self.path.to_path_buf(),
                detail: format!("source warnings: {e}"),
            }),
        }
    }

    pub fn set_source_warnings(&self, warnings: &[String]) -> Res<()> {
        let text =
            (!warnings.is_empty()).then(|| serde_json::to_string(warnings).expect("strings"));
        self.exec("UPDATE overall SET source_warnings = ?1", params![text])
    }

    /// With `ha`: this replica's role and the leader's name, when known.
    pub fn ha_role(&self) -> Res<Option<(String, Option<String>)>> {
        let row: Option<(Option<String>, Option<String>)> = self
            .conn
            .prepare_cached("SELECT ha_role, ha_leader FROM overall")
            .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.err(e))?;
        Ok(row.and_then(|(role, leader)| role.map(|role| (role, leader))))
    }

    pub fn set_ha_role(&self, role: &str, leader: Option<&str>) -> Res<()> {
        self.exec(
            "UPDATE overall SET ha_role = ?1, ha_leader = ?2",
            params![role, leader],
        )
    }

    /// With `fleet.rollout`: this host's part in the rollout, as JSON.
    pub fn rollout(&self) -> Res<Option<String>> {
        self.one("SELECT rollout FROM overall", [])
            .map(Option::flatten)
    }

    pub fn set_rollout(&self, json: Option<&str>) -> Res<()> {
        self.exec("UPDATE overall SET rollout = ?1", params![json])
    }

    /// When and how the mirror was last repaired.
    pub fn mirror_repaired(&self) -> Res<Option<String>> {
        self.one("SELECT mirror_repaired FROM overall", [])
            .map(Option::flatten)
    }

    pub fn set_mirror_repaired(&self, line: &str) -> Res<()> {
        self.exec("UPDATE overall SET mirror_repaired = ?1", params![line])
    }

    pub(crate) fn records_settled_marker(&self) -> Res<Option<String>> {
        self.one("SELECT records_settled FROM overall", [])
            .map(Option::flatten)
    }

    pub(crate) fn set_records_settled_marker(&self, digest: Option<&str>) -> Res<()> {
        self.exec("UPDATE overall SET records_settled = ?1", params![digest])
    }

    fn one<T: rusqlite::types::FromSql>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Res<Option<T>> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row(params, |r| r.get(0)).optional())
            .map_err(|e| self.err(e))
    }
}

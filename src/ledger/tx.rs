//! The ledger's queries over one connection, used directly by
//! [`Ledger`](super::Ledger)'s methods and, batched, inside a transaction:
//! the inventory, resource records, intents and the source here; pauses,
//! trust and declarations in files of their own beside it.

use std::cell::Cell;
use std::path::Path;
use std::time::SystemTime;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::records::{Intent, IntentKind, InventoryEntry, ResourceRecord, SourceRecord, State};
use super::{from_millis, to_millis, LedgerError};

/// A view of the ledger inside one transaction (or a single statement when
/// reached through a [`Ledger`](super::Ledger) method). Readers of the
/// database see all of a transaction's writes or none.
pub struct Tx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) path: &'a Path,
    /// A record was written or removed through this view: the settled
    /// marker is already gone.
    pub(crate) unsettled: Cell<bool>,
}

type Res<T> = Result<T, LedgerError>;

fn opt_ms(t: Option<SystemTime>) -> Option<i64> {
    t.map(to_millis)
}

fn opt_time(ms: Option<i64>) -> Option<SystemTime> {
    ms.map(from_millis)
}

impl Tx<'_> {
    pub(super) fn err(&self, e: rusqlite::Error) -> LedgerError {
        LedgerError::db(self.path, e)
    }

    fn corrupt(&self, detail: String) -> LedgerError {
        LedgerError::Corrupt {
            path: self.path.to_path_buf(),
            detail,
        }
    }

    /// Every member, in identity order.
    pub fn inventory(&self) -> Res<Vec<InventoryEntry>> {
        let mut out = Vec::new();
        self.for_each_inventory(|id, target, path| {
            out.push(InventoryEntry {
                id: id.into(),
                target: target.into(),
                path: path.into(),
            })
        })?;
        Ok(out)
    }

    /// Calls `f` with each member's identity, target and path, in identity
    /// order, borrowed from the row: nothing is kept unless `f` keeps it.
    pub fn for_each_inventory(&self, mut f: impl FnMut(&str, &str, &str)) -> Res<()> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, target, path FROM inventory ORDER BY id")
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let text = |i| {
                row.get_ref(i)
                    .and_then(|v| v.as_str().map_err(Into::into))
                    .map_err(|e| self.corrupt(format!("inventory: {e}")))
            };
            f(text(0)?, text(1)?, text(2)?);
        }
        Ok(())
    }

    /// The member with this identity, if tend manages it.
    pub fn inventory_entry(&self, id: &str) -> Res<Option<InventoryEntry>> {
        self.conn
            .prepare_cached("SELECT id, target, path FROM inventory WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row(params![id], |r| {
                    Ok(InventoryEntry {
                        id: r.get(0)?,
                        target: r.get(1)?,
                        path: r.get(2)?,
                    })
                })
                .optional()
            })
            .map_err(|e| self.err(e))
    }

    /// How many identities tend manages.
    pub fn inventory_count(&self) -> Res<usize> {
        self.conn
            .prepare_cached("SELECT COUNT(*) FROM inventory")
            .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
            .map(|n| n.max(0) as usize)
            .map_err(|e| self.err(e))
    }

    /// Adds or refreshes a member; adding one twice is harmless.
    pub fn inventory_add(&self, e: &InventoryEntry) -> Res<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO inventory (id, target, path) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET target = excluded.target, path = excluded.path",
            )
            .and_then(|mut s| s.execute(params![e.id, e.target, e.path]))
            .map(drop)
            .map_err(|e| self.err(e))
    }

    pub fn inventory_remove(&self, id: &str) -> Res<()> {
        self.exec("DELETE FROM inventory WHERE id = ?1", params![id])
    }

    fn resource_from_row(&self, r: &Row<'_>) -> Res<ResourceRecord> {
        let get = |e| self.err(e);
        let id: String = r.get(0).map_err(get)?;
        // Read in place: a full pass reads every record.
        let text = |i: usize| {
            r.get_ref(i)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(get)
        };
        let state: State = text(1)?
            .parse()
            .map_err(|e| self.corrupt(format!("resource {id}: {e}")))?;
        let corrections: Vec<i64> = match text(7)? {
            "[]" => Vec::new(),
            json => serde_json::from_str(json)
                .map_err(|e| self.corrupt(format!("resource {id}: corrections: {e}")))?,
        };
        Ok(ResourceRecord {
            state,
            drift_since: opt_time(r.get(2).map_err(get)?),
            attempts: r.get(3).map_err(get)?,
            reason: r.get(4).map_err(get)?,
            next_retry: opt_time(r.get(5).map_err(get)?),
            last_applied: opt_time(r.get(6).map_err(get)?),
            corrections: corrections.into_iter().map(from_millis).collect(),
            id,
        })
    }

    const RESOURCE_COLUMNS: &'static str =
        "id, state, drift_since, attempts, reason, next_retry, last_applied, corrections";

    pub fn resources(&self) -> Res<Vec<ResourceRecord>> {
        let mut out = Vec::new();
        self.for_each_resource(|r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Every record, one at a time in identity order (byte order, as Rust
    /// orders strings), without holding them all.
    pub fn for_each_resource(&self, mut f: impl FnMut(ResourceRecord) -> Res<()>) -> Res<()> {
        let sql = format!(
            "SELECT {} FROM resources ORDER BY id",
            Self::RESOURCE_COLUMNS
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            f(self.resource_from_row(row)?)?;
        }
        Ok(())
    }

    /// How many records are in each state.
    pub fn state_counts(&self) -> Res<Vec<(State, usize)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT state, COUNT(*) FROM resources GROUP BY state")
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let state: String = row.get(0).map_err(|e| self.err(e))?;
            let n: i64 = row.get(1).map_err(|e| self.err(e))?;
            let state = state
                .parse()
                .map_err(|e| self.corrupt(format!("resource state: {e}")))?;
            out.push((state, n.max(0) as usize));
        }
        Ok(out)
    }

    /// The records of resources not in sync, by identity.
    pub fn resources_not_in_sync(&self) -> Res<Vec<ResourceRecord>> {
        let sql = format!(
            "SELECT {} FROM resources WHERE state != 'InSync' ORDER BY id",
            Self::RESOURCE_COLUMNS
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            out.push(self.resource_from_row(row)?);
        }
        Ok(out)
    }

    /// At most `limit` records of resources not in sync, the longest
    /// drifting first (then by identity): what a page of them shows,
    /// without reading the rest.
    pub fn resources_not_in_sync_oldest(&self, limit: usize) -> Res<Vec<ResourceRecord>> {
        let sql = format!(
            "SELECT {} FROM resources WHERE state != 'InSync' \
             ORDER BY drift_since IS NULL, drift_since, id LIMIT ?1",
            Self::RESOURCE_COLUMNS
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows = stmt.query(params![limit]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            out.push(self.resource_from_row(row)?);
        }
        Ok(out)
    }

    pub fn resource(&self, id: &str) -> Res<Option<ResourceRecord>> {
        let sql = format!(
            "SELECT {} FROM resources WHERE id = ?1",
            Self::RESOURCE_COLUMNS
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query(params![id]).map_err(|e| self.err(e))?;
        match rows.next().map_err(|e| self.err(e))? {
            Some(row) => self.resource_from_row(row).map(Some),
            None => Ok(None),
        }
    }

    /// Removes the settled marker before the first record write.
    fn unsettle(&self) -> Res<()> {
        if !self.unsettled.replace(true) {
            self.set_records_settled_marker(None)?;
        }
        Ok(())
    }

    /// Marks the records settled, as they are after this transaction's
    /// writes: every one says InSync with nothing pending, and together they
    /// are the identities `digest` names. Cleared by any later record write.
    pub fn settle_records(&self, digest: &str) -> Res<()> {
        self.set_records_settled_marker(Some(digest))?;
        // A record written after this in the same view removes it again.
        self.unsettled.set(false);
        Ok(())
    }

    /// The digest given to [`Tx::settle_records`], if no record was written
    /// since.
    pub fn records_settled(&self) -> Res<Option<String>> {
        self.records_settled_marker()
    }

    pub fn put_resource(&self, r: &ResourceRecord) -> Res<()> {
        self.unsettle()?;
        let corrections: Vec<i64> = r.corrections.iter().copied().map(to_millis).collect();
        let corrections =
            serde_json::to_string(&corrections).expect("a list of integers serializes");
        self.exec(
            "INSERT OR REPLACE INTO resources
                 (id, state, drift_since, attempts, reason, next_retry, last_applied, corrections)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                r.id,
                r.state.as_str(),
                opt_ms(r.drift_since),
                r.attempts,
                r.reason,
                opt_ms(r.next_retry),
                opt_ms(r.last_applied),
                corrections
            ],
        )
    }

    pub fn remove_resource(&self, id: &str) -> Res<()> {
        self.unsettle()?;
        self.exec("DELETE FROM resources WHERE id = ?1", params![id])
    }

    /// Records an intent and returns its number for [`Tx::clear_intent`].
    pub fn add_intent(&self, kind: IntentKind, id: &str, detail: &str) -> Res<i64> {
        self.exec(
            "INSERT INTO intents (kind, id, detail, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![kind.as_str(), id, detail, to_millis(SystemTime::now())],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn clear_intent(&self, seq: i64) -> Res<()> {
        self.exec("DELETE FROM intents WHERE seq = ?1", params![seq])
    }

    /// Outstanding intents of one kind, oldest first.
    pub fn intents(&self, kind: IntentKind) -> Res<Vec<Intent>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, kind, id, detail FROM intents WHERE kind = ?1 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![kind.as_str()], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get(2)?,
                    r.get(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, k, id, detail) = row.map_err(|e| self.err(e))?;
            let kind = IntentKind::parse(&k)
                .ok_or_else(|| self.corrupt(format!("intent {seq}: kind {k:?}")))?;
            out.push(Intent {
                seq,
                kind,
                id,
                detail,
            });
        }
        Ok(out)
    }

    pub fn source(&self) -> Res<Option<SourceRecord>> {
        self.conn
            .query_row(
                "SELECT repo, reference, fetched_revision, applied_revision, last_fetch_at,
                        last_fetch_error, last_success_at, drift_since
                 FROM source WHERE singleton = 1",
                [],
                |r| {
                    Ok(SourceRecord {
                        repo: r.get(0)?,
                        reference: r.get(1)?,
                        fetched_revision: r.get(2)?,
                        applied_revision: r.get(3)?,
                        last_fetch_at: opt_time(r.get(4)?),
                        last_fetch_error: r.get(5)?,
                        last_success_at: opt_time(r.get(6)?),
                        drift_since: opt_time(r.get(7)?),
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    pub fn put_source(&self, s: &SourceRecord) -> Res<()> {
        self.exec(
            "INSERT OR REPLACE INTO source
                 (singleton, repo, reference, fetched_revision, applied_revision, last_fetch_at,
                  last_fetch_error, last_success_at, drift_since)
             VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                s.repo,
                s.reference,
                s.fetched_revision,
                s.applied_revision,
                opt_ms(s.last_fetch_at),
                s.last_fetch_error,
                opt_ms(s.last_success_at),
                opt_ms(s.drift_since)
            ],
        )
    }

    pub(super) fn exec(&self, sql: &str, params: impl rusqlite::Params) -> Res<()> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map(drop)
            .map_err(|e| self.err(e))
    }
}

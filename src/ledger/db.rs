//! The ledger database: opening it for the writer or for a reader beside a
//! running daemon, and the transaction boundary a pass writes through.

use std::cell::Cell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::declared::Digest;
use super::records::{
    Intent, IntentKind, InventoryEntry, PauseRecord, ResourceRecord, SourceRecord, State,
};
use super::tx::Tx;
use super::{create_state_dir, schema, sync_dir, LedgerError, DATABASE_FILE};

/// Long enough to outwait another process's transaction (a pass commit, a
/// `tend pause`), short enough that a wedged peer shows up as an error.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Up to this many records are read by identity; more, by one scan.
const LOOKUPS_OVER_SCAN: usize = 2048;

/// tend's transactional state: inventory, drift ledger, pauses, intents,
/// source state and small counters, in SQLite (WAL) at `<state_dir>/ledger.db`.
pub struct Ledger {
    conn: Connection,
    state_dir: PathBuf,
    path: PathBuf,
    read_only: bool,
}

type Res<T> = Result<T, LedgerError>;

impl Ledger {
    /// Opens the ledger for writing, creating the state dir (mode 0700) and
    /// the database as needed and migrating its schema.
    pub fn open(state_dir: &Path) -> Res<Ledger> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(DATABASE_FILE);
        if !path.exists() {
            create(state_dir, &path)?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(&path, flags).map_err(|e| LedgerError::db(&path, e))?;
        let err = |e| LedgerError::db(&path, e);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(LedgerError::Corrupt {
                path: path.clone(),
                detail: format!("cannot switch to WAL journaling (got {mode:?}); is the state dir on a network file system?"),
            });
        }
        // FULL: an intent must be on disk before the effect it announces.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        // A pass reads the ledger in order, once: pages beyond a few
        // hundred KiB would only hold what the kernel's page cache holds
        // anyway, in the process's memory (2 MiB by default).
        conn.pragma_update(None, "cache_size", CACHE_KIB)
            .map_err(err)?;
        // Every commit is already durable in the WAL; checkpointing it into
        // the database at close would only add two syncs to each command.
        // The next writer's automatic checkpoints fold it in.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(err)?;
        schema::migrate(&mut conn, &path)?;
        Ok(Ledger {
            conn,
            state_dir: state_dir.to_path_buf(),
            path,
            read_only: false,
        })
    }

    /// An empty ledger in memory, for a command that must change nothing
    /// durable (`diff` on a state dir that has no ledger yet): what it
    /// reads is what a fresh ledger holds, and what it writes is dropped.
    pub fn open_in_memory(state_dir: &Path) -> Res<Ledger> {
        let path = state_dir.join(DATABASE_FILE);
        let mut conn = Connection::open_in_memory().map_err(|e| LedgerError::db(&path, e))?;
        schema::migrate(&mut conn, &path)?;
        Ok(Ledger {
            conn,
            state_dir: state_dir.to_path_buf(),
            path,
            read_only: false,
        })
    }

    /// Opens an existing ledger for reading beside a running writer (`status`,
    /// `diff`): creates nothing, and WAL keeps it from blocking the writer.
    pub fn open_read_only(state_dir: &Path) -> Res<Ledger> {
        let path = state_dir.join(DATABASE_FILE);
        match std::fs::metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LedgerError::NotFound { path })
            }
            Err(e) => return Err(LedgerError::io(path, e)),
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(&path, flags).map_err(|e| LedgerError::db(&path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| LedgerError::db(&path, e))?;
        schema::check_current(&conn, &path)?;
        Ok(Ledger {
            conn,
            state_dir: state_dir.to_path_buf(),
            path,
            read_only: true,
        })
    }

    /// SQLite's own check of every page (`PRAGMA quick_check`): `None` when
    /// sound, else the first problem it found.
    pub fn quick_check(&self) -> Res<Option<String>> {
        let found: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(|e| LedgerError::db(&self.path, e))?;
        Ok((found != "ok").then_some(found))
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The database file, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one transaction: committed if it returns `Ok`, rolled back
    /// otherwise. Readers see all of its writes or none, and a batch of
    /// thousands of writes costs one commit. On a read-only ledger it is a
    /// consistent snapshot for several reads.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Res<T>) -> Res<T> {
        // A writer takes the write lock up front: upgrading a read lock later
        // can fail at once with SQLITE_BUSY instead of waiting.
        let behavior = if self.read_only {
            TransactionBehavior::Deferred
        } else {
            TransactionBehavior::Immediate
        };
        let path = &self.path;
        let tx = self
            .conn
            .transaction_with_behavior(behavior)
            .map_err(|e| LedgerError::db(path, e))?;
        let value = f(&Tx {
            conn: &tx,
            path,
            unsettled: Cell::new(false),
        })?;
        tx.commit().map_err(|e| LedgerError::db(path, e))?;
        Ok(value)
    }

    pub(super) fn q(&self) -> Tx<'_> {
        Tx {
            conn: &self.conn,
            path: &self.path,
            unsettled: Cell::new(false),
        }
    }

    pub fn inventory(&self) -> Res<Vec<InventoryEntry>> {
        self.q().inventory()
    }
    /// See [`Tx::for_each_inventory`].
    pub fn for_each_inventory(&self, f: impl FnMut(&str, &str, &str)) -> Res<()> {
        self.q().for_each_inventory(f)
    }
    /// `get` for each of `ids`, the ones found, in the order of `ids`.
    fn each_of<'a, T>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
        get: impl Fn(&Tx<'_>, &str) -> Res<Option<T>>,
    ) -> Res<Vec<T>> {
        // One read transaction for all the lookups: one snapshot, and one
        // lock taken and released rather than one per statement.
        let read = match self.conn.is_autocommit() {
            true => Some(
                self.conn
                    .unchecked_transaction()
                    .map_err(|e| self.q().err(e))?,
            ),
            false => None,
        };
        let q = self.q();
        let mut out = Vec::new();
        for id in ids {
            out.extend(get(&q, id)?);
        }
        if let Some(read) = read {
            read.commit().map_err(|e| q.err(e))?;
        }
        Ok(out)
    }
    /// The members among `ids`, in the order of `ids`; one indexed lookup
    /// each, so a keyed pass costs what its keys cost.
    pub fn inventory_of<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Res<Vec<InventoryEntry>> {
        self.each_of(ids, |q, id| q.inventory_entry(id))
    }
    pub fn inventory_count(&self) -> Res<usize> {
        self.q().inventory_count()
    }
    /// Idempotent.
    pub fn inventory_add(&self, e: &InventoryEntry) -> Res<()> {
        self.q().inventory_add(e)
    }
    pub fn inventory_remove(&self, id: &str) -> Res<()> {
        self.q().inventory_remove(id)
    }
    pub fn resources(&self) -> Res<Vec<ResourceRecord>> {
        self.q().resources()
    }
    /// See [`Tx::for_each_resource`].
    pub fn for_each_resource(&self, f: impl FnMut(ResourceRecord) -> Res<()>) -> Res<()> {
        self.q().for_each_resource(f)
    }
    pub fn resource(&self, id: &str) -> Res<Option<ResourceRecord>> {
        self.q().resource(id)
    }
    pub fn state_counts(&self) -> Res<Vec<(State, usize)>> {
        self.q().state_counts()
    }
    pub fn resources_not_in_sync(&self) -> Res<Vec<ResourceRecord>> {
        self.q().resources_not_in_sync()
    }
    /// See [`Tx::resources_not_in_sync_oldest`].
    pub fn resources_not_in_sync_oldest(&self, limit: usize) -> Res<Vec<ResourceRecord>> {
        self.q().resources_not_in_sync_oldest(limit)
    }
    /// The records among `ids`, in no promised order: one indexed lookup
    /// each for a few, one scan of every record for many.
    pub fn resources_of<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Res<Vec<ResourceRecord>> {
        let ids: Vec<&str> = ids.into_iter().collect();
        if ids.len() <= LOOKUPS_OVER_SCAN {
            return self.each_of(ids, |q, id| q.resource(id));
        }
        let wanted: HashSet<&str> = ids.into_iter().collect();
        let mut out = Vec::new();
        self.for_each_resource(|r| {
            if wanted.contains(r.id.as_str()) {
                out.push(r);
            }
            Ok(())
        })?;
        Ok(out)
    }
    pub fn put_resource(&self, r: &ResourceRecord) -> Res<()> {
        self.q().put_resource(r)
    }
    pub fn remove_resource(&self, id: &str) -> Res<()> {
        self.q().remove_resource(id)
    }
    /// See [`Tx::pause`].
    pub fn pause(&self, id: Option<&str>, until: Option<SystemTime>) -> Res<()> {
        self.q().pause(id, until)
    }
    /// See [`Tx::resume`]: `None` clears every pause.
    pub fn resume(&self, id: Option<&str>) -> Res<()> {
        self.q().resume(id)
    }
    /// The pauses in force now; expired ones are not returned.
    pub fn pauses(&self) -> Res<Vec<PauseRecord>> {
        self.q().pauses()
    }
    pub fn pauses_at(&self, now: SystemTime) -> Res<Vec<PauseRecord>> {
        self.q().pauses_at(now)
    }
    /// Records an intent before its effect; durable when this returns.
    pub fn add_intent(&self, kind: IntentKind, id: &str, detail: &str) -> Res<i64> {
        self.q().add_intent(kind, id, detail)
    }
    pub fn clear_intent(&self, seq: i64) -> Res<()> {
        self.q().clear_intent(seq)
    }
    pub fn intents(&self, kind: IntentKind) -> Res<Vec<Intent>> {
        self.q().intents(kind)
    }
    pub fn source(&self) -> Res<Option<SourceRecord>> {
        self.q().source()
    }
    pub fn put_source(&self, s: &SourceRecord) -> Res<()> {
        self.q().put_source(s)
    }
    /// See [`Tx::records_settled`].
    pub fn records_settled(&self) -> Res<Option<String>> {
        self.q().records_settled()
    }
    /// See [`Tx::settle_records`].
    pub fn settle_records(&self, digest: &str) -> Res<()> {
        self.q().settle_records(digest)
    }
    pub fn digest(&self, which: Digest, id: &str) -> Res<Option<String>> {
        self.q().digest(which, id)
    }
    /// See [`Tx::digest_count`].
    pub fn digest_count(&self, which: Digest, cap: u64) -> Res<u64> {
        self.q().digest_count(which, cap)
    }
    pub fn digests(&self, which: Digest) -> Res<Vec<(String, String)>> {
        self.q().digests(which)
    }
    pub fn set_blocked_digest(&self, id: &str, digest: &str) -> Res<()> {
        self.q().set_blocked_digest(id, digest)
    }
    pub fn managed_fields(&self, id: &str) -> Res<Option<String>> {
        self.q().managed_fields(id)
    }
    pub fn set_managed_fields(&self, id: &str, json: &str) -> Res<()> {
        self.q().set_managed_fields(id, json)
    }
    pub fn temp_swept(&self) -> Res<bool> {
        self.q().temp_swept()
    }
    pub fn set_temp_swept(&self, swept: bool) -> Res<()> {
        self.q().set_temp_swept(swept)
    }
    pub fn watcher(&self) -> Res<Option<String>> {
        self.q().watcher()
    }
    pub fn set_watcher(&self, line: &str) -> Res<()> {
        self.q().set_watcher(line)
    }
    pub fn declaration_problems(&self) -> Res<Vec<String>> {
        self.q().declaration_problems()
    }
    pub fn set_declaration_problems(&self, problems: &[String]) -> Res<()> {
        self.q().set_declaration_problems(problems)
    }
    pub fn source_warnings(&self) -> Res<Vec<String>> {
        self.q().source_warnings()
    }
    pub fn set_source_warnings(&self, warnings: &[String]) -> Res<()> {
        self.q().set_source_warnings(warnings)
    }
    pub fn ha_role(&self) -> Res<Option<(String, Option<String>)>> {
        self.q().ha_role()
    }
    pub fn set_ha_role(&self, role: &str, leader: Option<&str>) -> Res<()> {
        self.q().set_ha_role(role, leader)
    }
    pub fn rollout(&self) -> Res<Option<String>> {
        self.q().rollout()
    }
    pub fn set_rollout(&self, json: Option<&str>) -> Res<()> {
        self.q().set_rollout(json)
    }
    pub fn mirror_repaired(&self) -> Res<Option<String>> {
        self.q().mirror_repaired()
    }
    pub fn set_mirror_repaired(&self, line: &str) -> Res<()> {
        self.q().set_mirror_repaired(line)
    }
}

/// Makes a new ledger (WAL, current schema) under a temp name with syncs off,
/// then makes it durable at once and links it into place: two syncs where
/// creating it in place costs about ten (a rollback journal to switch to WAL,
/// each migration's commit, the checkpoint at close). Another process
/// creating one at the same time wins or loses whole: its ledger is kept.
fn create(state_dir: &Path, path: &Path) -> Res<()> {
    let temp = state_dir.join(format!(".tend-ledger-{:016x}.tmp", rand::random::<u64>()));
    let built = build(&temp).and_then(|()| {
        std::fs::File::open(&temp)
            .and_then(|f| f.sync_all())
            .map_err(|e| LedgerError::io(&temp, e))?;
        match std::fs::hard_link(&temp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            // A file system without hard links (vfat, some network and FUSE
            // mounts): a rename, unless another process made one meanwhile.
            Err(_) if !path.exists() => {
                std::fs::rename(&temp, path).map_err(|e| LedgerError::io(path, e))
            }
            Err(_) => Ok(()),
        }
    });
    for leftover in ["", "-wal", "-shm", "-journal"] {
        let mut name = temp.clone().into_os_string();
        name.push(leftover);
        let _ = std::fs::remove_file(name);
    }
    built?;
    sync_dir(state_dir)
}

/// SQLite's page cache of a connection, in KiB (as a negative count).
const CACHE_KIB: i64 = -512;

fn build(temp: &Path) -> Res<()> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let err = |e| LedgerError::db(temp, e);
    let mut conn = Connection::open_with_flags(temp, flags).map_err(err)?;
    // Nothing is durable, or visible, until the whole file is synced and
    // linked into place.
    conn.pragma_update(None, "synchronous", "OFF")
        .map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    schema::migrate(&mut conn, temp)?;
    // Closing checkpoints the WAL into the file and removes it.
    conn.close().map_err(|(_, e)| err(e))
}

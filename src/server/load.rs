//! What the handlers read (the ledger, the audit log's end, one resource's
//! diff), off the async threads and a few at a time: concurrent requests
//! hold a bounded number of threads and documents, whatever their number.

use std::path::PathBuf;
use std::time::SystemTime;

use tokio::sync::Semaphore;

use super::{AppState, ReadError};
use crate::ledger::{AuditLog, AuditTail, Ledger};
use crate::status::{ResourceStatus, StatusDoc};

/// Ledger and audit reads at once; more requests wait their turn.
static READS: Semaphore = Semaphore::const_new(4);
/// Diffs at once: each prepares against the current revision under the
/// loop's own lock, so more would only queue there, holding threads.
static DIFFS: Semaphore = Semaphore::const_new(1);

/// Runs `work` on the blocking pool once `gate` lets it. The permit goes
/// with the work: a request dropped at its timeout frees it only when the
/// work ends, so no more than the gate allows ever runs.
pub(super) async fn gated<T: Send + 'static>(
    gate: &'static Semaphore,
    work: impl FnOnce() -> Result<T, ReadError> + Send + 'static,
) -> Result<T, ReadError> {
    let permit = gate.acquire().await?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await?
}

fn ledger(dir: &std::path::Path) -> Result<Ledger, ReadError> {
    Ok(Ledger::open_read_only(dir)?)
}

/// The status document as `tend status -o json` builds it, every resource,
/// with what the daemon knows beyond its ledger laid over it.
pub(super) async fn status(state: &AppState) -> Result<StatusDoc, ReadError> {
    let (dir, overlay) = (state.state_dir.clone(), state.overlay.clone());
    gated(&READS, move || {
        let mut doc = crate::status::build(&ledger(&dir)?, SystemTime::now())?;
        if let Some(overlay) = overlay {
            overlay(&mut doc);
        }
        Ok(doc)
    })
    .await
}

/// Every count, and at most `rows` resources not in sync, with the
/// daemon's overlay.
pub(super) async fn summary(state: &AppState, rows: usize) -> Result<StatusDoc, ReadError> {
    let (dir, overlay) = (state.state_dir.clone(), state.overlay.clone());
    gated(&READS, move || {
        let mut doc = crate::status::summary(&ledger(&dir)?, SystemTime::now(), rows)?;
        if let Some(overlay) = overlay {
            overlay(&mut doc);
        }
        Ok(doc)
    })
    .await
}

/// One resource's status entry, looked up alone (the daemon's overlay
/// may hold a newer one), and the time it was read.
pub(super) async fn resource(
    state: &AppState,
    id: String,
) -> Result<(String, Option<ResourceStatus>), ReadError> {
    let (dir, overlay) = (state.state_dir.clone(), state.overlay.clone());
    gated(&READS, move || {
        let now = SystemTime::now();
        let ledger = ledger(&dir)?;
        let mut entry = crate::status::resource(&ledger, &id, now)?;
        if let Some(overlay) = overlay {
            let mut doc = crate::status::summary(&ledger, now, 0)?;
            doc.resources = entry.into_iter().collect();
            overlay(&mut doc);
            entry = doc.resources.into_iter().find(|r| r.id == id);
        }
        Ok((humantime::format_rfc3339_seconds(now).to_string(), entry))
    })
    .await
}

/// The last `n` audit entries, newest first, read from the log's end with
/// at most `cap` bytes: the work is the same for a log of any size. Read
/// without opening the log for appending: opening it cuts a torn tail,
/// which beside a running daemon could cut a line it is writing.
pub(super) async fn audit(dir: PathBuf, n: usize, cap: u64) -> Result<AuditTail, ReadError> {
    gated(&READS, move || Ok(AuditLog::tail(&dir, n, cap)?)).await
}

/// Every host's status in the fleet, with `fleet:`.
pub(super) async fn fleet(
    state: &AppState,
) -> Option<Result<crate::fleet::status::Fleet, ReadError>> {
    let read = state.fleet.clone()?;
    Some(gated(&READS, move || Ok(read()?)).await)
}

/// The diff the loop's owner supplies.
pub(super) async fn diff(state: &AppState, id: String) -> Option<String> {
    let diff = state.resource_diff.clone();
    gated(&DIFFS, move || Ok(diff(&id))).await.ok().flatten()
}

/// Where the resource comes from and what happened to it; it reads the
/// ledger and the audit log's end, so it waits its turn with the reads.
pub(super) async fn explain(state: &AppState, id: String) -> Option<crate::explain::Explanation> {
    let explain = state.resource_explain.clone();
    gated(&READS, move || Ok(explain(&id))).await.ok().flatten()
}

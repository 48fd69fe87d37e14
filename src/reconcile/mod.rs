//! The reconciler: fetch, prepare, apply, record. `sync` runs one pass; the
//! daemon runs passes continuously.

mod apply;
mod backoff;
mod context;
mod control;
pub mod daemon;
mod hooks;
mod http;
mod notify;
mod pass;
mod pass_next;
mod prepare;
mod publish;
mod queue;
mod record;
pub mod show;
mod watch;

use std::time::SystemTime;

use git2::Oid;

pub use apply::apply;
pub use context::{BuildError, Context, PassContent};
pub use control::Control;
pub use pass::{load, PassError, PassOptions, PassReport, Revision, Scope};
pub use pass_next::{load_next, Next};
pub use prepare::{prepare, pruning, spec_digest, Prepared, Pruning};
pub use queue::{Action, Queue};
pub use record::{Outcome, Recorder};

use crate::config::Settings;
use crate::ledger::{Ledger, LedgerError, SourceRecord, StateLock};
use crate::model::RelPath;

/// A writer's start: the state-dir lock, the ledger, the targets and the
/// mirror, then recovery from whatever the last process left behind.
pub fn open_writer(
    settings: Settings,
    what: &str,
) -> Result<(StateLock, Context, Recorder), String> {
    let lock = StateLock::acquire(&settings.state_dir, what).map_err(|e| e.to_string())?;
    let ledger = Ledger::open(&settings.state_dir).map_err(|e| e.to_string())?;
    let ctx = Context::build(settings).map_err(|e| e.to_string())?;
    let mut rec = Recorder::open(ledger).map_err(|e| e.to_string())?;
    recover(&ctx, &mut rec).map_err(|e| e.to_string())?;
    Ok((lock, ctx, rec))
}

/// After a restart: remove tend's leftover temp files beside managed paths
/// (unless the ledger says no write happened since a sweep that left none)
/// and run hooks that were pending when the last process stopped.
pub fn recover(ctx: &Context, rec: &mut Recorder) -> Result<(), LedgerError> {
    // A dry run touches no target and runs no command: what is pending
    // waits for a process that may act.
    if ctx.settings.policy.dry_run {
        return Ok(());
    }
    if !rec.temp_swept() {
        sweep_temp(ctx, rec)?;
    }
    rec.run_pending_hooks(ctx, false).map(|_| ())
}

fn sweep_temp(ctx: &Context, rec: &mut Recorder) -> Result<(), LedgerError> {
    let inventory = rec.ledger.inventory()?;
    let mut left = 0;
    for (name, target) in &ctx.targets {
        let paths: Vec<RelPath> = inventory
            .iter()
            .filter(|e| &e.target == name)
            .filter_map(|e| RelPath::parse(&e.path).ok())
            .collect();
        let refs: Vec<&RelPath> = paths.iter().collect();
        let swept = target.clean_temp(&refs);
        if swept.removed > 0 {
            tracing::info!(target = %name, removed = swept.removed, "removed leftover temp files");
        }
        if swept.left > 0 {
            tracing::warn!(target = %name, left = swept.left, "cannot remove every leftover temp file");
        }
        left += swept.left;
    }
    // Members of a target not configured now were not swept: their temp
    // files wait for the start that configures it again.
    let unswept = inventory
        .iter()
        .any(|e| !ctx.targets.contains_key(e.target.as_str()));
    if left == 0 && !unswept {
        rec.mark_temp_swept()?;
    }
    Ok(())
}

/// Fetches and records the outcome in the source ledger.
pub fn fetch(
    ctx: &Context,
    rec: &Recorder,
    now: SystemTime,
) -> Result<Oid, crate::source::SourceError> {
    let mut s = rec
        .ledger
        .source()
        .ok()
        .flatten()
        .unwrap_or_else(|| SourceRecord {
            repo: ctx.settings.source.repo.clone(),
            reference: ctx.settings.source.reference.clone(),
            fetched_revision: None,
            applied_revision: None,
            last_fetch_at: None,
            last_fetch_error: None,
            last_success_at: None,
            drift_since: None,
        });
    s.repo = crate::source::redact_url(&ctx.settings.source.repo);
    s.reference = ctx.settings.source.reference.clone();
    s.last_fetch_at = Some(now);
    let result = ctx.mirror.fetch();
    if let Some(repair) = ctx.mirror.take_repair() {
        if let Err(e) = rec.ledger.set_meta(crate::status::REPAIRED_KEY, &repair) {
            tracing::warn!(error = %e, "cannot record the mirror's repair");
        }
    }
    match &result {
        Ok(rev) => {
            s.last_fetch_error = None;
            s.last_success_at = Some(now);
            let rev = rev.to_string();
            if s.applied_revision.as_deref() != Some(&rev) && s.drift_since.is_none() {
                s.drift_since = Some(now);
            }
            s.fetched_revision = Some(rev);
        }
        Err(e) => s.last_fetch_error = Some(e.to_string()),
    }
    if let Err(e) = rec.ledger.put_source(&s) {
        tracing::warn!(error = %e, "cannot record the fetch");
    }
    result
}

/// Marks a revision applied: the source no longer drifts.
pub fn record_applied(rec: &Recorder, revision: Oid) -> Result<(), LedgerError> {
    if let Some(mut s) = rec.ledger.source()? {
        s.applied_revision = Some(revision.to_string());
        if s.fetched_revision == s.applied_revision {
            s.drift_since = None;
        }
        rec.ledger.put_source(&s)?;
    }
    Ok(())
}

/// Prepare and apply one revision, then record it applied and trim backups.
pub fn full_pass(
    ctx: &Context,
    rec: &mut Recorder,
    rev: &Revision,
    opts: PassOptions,
    ctl: &Control,
) -> Result<PassReport, PassError> {
    let report = pruning_pass(ctx, rec, rev, Scope::All, opts, ctl)?;
    let policy = &ctx.settings.policy;
    if let Err(e) = rec
        .backup_store()
        .prune(policy.backup_retention, policy.backup_max)
    {
        tracing::warn!(error = %e, "cannot trim the backup store");
    }
    Ok(report)
}

/// A pass that may prune (a full pass, or the changes of a new revision):
/// the revision is recorded applied when it ran to its end.
pub fn pruning_pass(
    ctx: &Context,
    rec: &mut Recorder,
    rev: &Revision,
    scope: Scope,
    opts: PassOptions,
    ctl: &Control,
) -> Result<PassReport, PassError> {
    debug_assert!(scope.prunes());
    let prepared = prepare(ctx, rev, &rec.ledger, scope)?;
    let report = apply(ctx, rec, rev, &prepared, opts, ctl)?;
    record_problems(rec, crate::status::PROBLEMS_KEY, &rev.declared.problems)?;
    record_problems(rec, crate::status::WARNINGS_KEY, &rev.declared.notes)?;
    if !opts.dry_run && !report.cancelled {
        record_applied(rec, rev.id)?;
    }
    Ok(report)
}

/// Problems listed in the ledger at most; the rest are counted.
const PROBLEMS_KEPT: usize = 100;

/// Keeps the problems of the revision a pass worked on in the ledger, so
/// `tend status` and the page show them (a document without a path has no
/// resource to be Blocked). Written only when they change.
fn record_problems(
    rec: &Recorder,
    key: &str,
    problems: &[crate::declare::Problem],
) -> Result<(), LedgerError> {
    let mut lines: Vec<String> = problems
        .iter()
        .take(PROBLEMS_KEPT)
        .map(|p| p.to_string())
        .collect();
    if problems.len() > PROBLEMS_KEPT {
        lines.push(format!("... and {} more", problems.len() - PROBLEMS_KEPT));
    }
    let text = if lines.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&lines).expect("strings serialize")
    };
    if rec.ledger.meta(key)?.unwrap_or_default() != text {
        rec.ledger.set_meta(key, &text)?;
    }
    Ok(())
}

//! The pass, synchronous and free of any runtime: fetch, prepare, apply,
//! record, hooks. `sync` runs one pass; the daemon (src/daemon) schedules
//! passes continuously.

mod apply;
// The one retry rule lives beside the crate root: targets reconnect by it too.
pub use crate::backoff;
mod clock;
mod context;
mod control;
mod decide;
mod gc;
mod hooks;
mod outcome;
mod outcomes;
mod pass;
mod pass_next;
mod pause;
mod policy;
mod prepare;
mod publish;
mod record;
mod run;
pub mod show;
pub mod trust;
mod write;

use std::time::SystemTime;

use git2::Oid;

pub use apply::apply;
pub use clock::{Clock, SystemClock};
pub use context::{mirror_spec, BuildError, Context, PassContent};
pub use control::{unix_millis, Control};
pub use decide::{pruning, spec_digest, Pruning};
pub use gc::{collect_mirror_if_due, mirror_gc_due, MirrorGc};
pub use outcome::{next_record, Outcome};
pub use outcomes::Outcomes;
pub use pass::{load, PassError, PassOptions, PassReport, Provenance, Revision, Scope};
pub use pass_next::{load_next, Next};
pub(crate) use policy::{gives_up, next_fetch, next_full_pass, period};
pub use policy::{next_step, NextStep, StepKind};
pub use prepare::{prepare, Prepared};
pub use record::Recorder;

use crate::config::Settings;
use crate::ledger::{Ledger, LedgerError, SourceRecord, StateLock};
use crate::model::RelPath;

/// Why a writer could not start: the lock or the ledger, or a target or
/// the mirror that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// A writer's start: the state-dir lock, the ledger, the targets and the
/// mirror, then recovery from whatever the last process left behind.
pub fn open_writer(
    settings: Settings,
    what: &str,
) -> Result<(StateLock, Context, Recorder), WriterError> {
    let lock = StateLock::acquire(&settings.state_dir, what)?;
    let dir = settings.state_dir.clone();
    let noted = |e: LedgerError| {
        crate::ledger::note_damage(&dir, &e);
        WriterError::Ledger(e)
    };
    let ledger = Ledger::open(&dir).map_err(noted)?;
    recheck_damage(&ledger);
    let ctx = Context::build(settings)?;
    let mut rec = Recorder::open(ledger).map_err(noted)?;
    rec.set_audit_rotation(ctx.settings.policy.audit_rotation());
    recover(&ctx, &mut rec).map_err(noted)?;
    Ok((lock, ctx, rec))
}

/// A ledger noted as damaged is checked whole once at a writer's start:
/// found sound (mended in place), the note goes; still damaged, it stays
/// and the writer goes on with what can be read.
fn recheck_damage(ledger: &Ledger) {
    let dir = ledger.state_dir();
    if crate::ledger::noted_damage(dir).is_none() {
        return;
    }
    match ledger.quick_check() {
        Ok(None) => crate::ledger::clear_damage(dir),
        Ok(Some(problem)) => tracing::warn!(%problem, "the ledger is damaged"),
        Err(e) => tracing::warn!(error = %e, "the ledger is damaged"),
    }
}

/// After a restart: remove tend's leftover temp files beside managed paths
/// (unless the ledger says no write happened since a sweep that left none)
/// and run hooks that were pending when the last process stopped.
pub fn recover(ctx: &Context, rec: &mut Recorder) -> Result<(), LedgerError> {
    // A dry run touches no target and runs no command: what is pending
    // waits for a process that may act.
    if ctx.settings.policy.dry_run || !ctx.fence.may_write() {
        return Ok(());
    }
    if !rec.temp_swept() {
        sweep_temp(ctx, rec)?;
    }
    // What a pending hook was for may not be published yet (a tree being
    // built when the last process stopped): the first pass runs it, after
    // publishing.
    if ctx.targets.values().any(|t| t.unpublished()) {
        return Ok(());
    }
    // The revision they were for was being applied when the last process
    // stopped: the last fetched one.
    let source = rec.ledger.source()?;
    let revision = source
        .and_then(|s| s.fetched_revision.or(s.applied_revision))
        .unwrap_or_default();
    hooks::run_pending(
        ctx,
        &mut rec.ledger,
        &mut rec.hook_retries,
        &revision,
        &|| false,
    )
    .map(|_| ())
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
    let repo = crate::source::redact_url(&ctx.settings.source.repo);
    let reference = ctx.settings.source.reference.clone();
    // Marks are kept per repository and ref, so another ref than last
    // time has a mark of its own: none if never applied (a deliberate
    // choice starts anew), its own newest if it was (switching away and
    // back never lowers it).
    s.repo = repo;
    s.reference = reference;
    s.last_fetch_at = Some(now);
    let result = ctx.mirror.fetch();
    if let Some(repair) = ctx.mirror.take_repair() {
        if let Err(e) = rec.ledger.set_mirror_repaired(&repair) {
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

/// Marks a revision applied: the source no longer drifts, and, unless a
/// pin holds it, the revision is the new high-water mark (the gate let it
/// through: it descends from the old one, or a rewind was allowed).
pub fn record_applied(ctx: &Context, rec: &Recorder, rev: &Revision) -> Result<(), LedgerError> {
    let revision = rev.id.to_string();
    if let Some(mut s) = rec.ledger.source()? {
        s.applied_revision = Some(revision.clone());
        if s.fetched_revision == s.applied_revision {
            s.drift_since = None;
        }
        rec.ledger.put_source(&s)?;
    }
    if !rev.provenance.pinned {
        let (repo, reference) = trust::mark_key(ctx);
        if rec.ledger.high_water(&repo, reference.as_deref())?.as_ref() != Some(&revision) {
            rec.ledger
                .set_high_water(&repo, reference.as_deref(), &revision)?;
        }
    }
    if let Some(signer) = &rev.provenance.signer {
        if rec.ledger.signer_of(&revision)?.as_ref() != Some(signer) {
            rec.ledger.note_signer(&revision, signer)?;
        }
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
    if let Err(e) = rec.maintain_audit() {
        tracing::warn!(error = %e, "cannot rotate the audit log");
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
    let opts = opts.for_role(&ctx.fence);
    if !opts.dry_run {
        publish::begin(ctx, rec, rev);
    }
    let prepared = prepare(ctx, rev, &rec.ledger, scope)?;
    let report = apply(ctx, rec, rev, prepared, opts, ctl)?;
    let recorded = record_problems(rec, &rev.declared).and_then(|()| {
        match !opts.dry_run && !report.cancelled && report.unpublished.is_none() {
            true => record_applied(ctx, rec, rev),
            false => Ok(()),
        }
    });
    match recorded {
        Ok(()) => Ok(report),
        Err(error) => Err(PassError::Unrecorded {
            report: Box::new(report),
            error,
        }),
    }
}

/// A pass over the named identities (events, retries): it never prunes.
pub fn keyed_pass(
    ctx: &Context,
    rec: &mut Recorder,
    rev: &Revision,
    keys: std::collections::BTreeSet<crate::model::ResourceId>,
    opts: PassOptions,
    ctl: &Control,
) -> Result<PassReport, PassError> {
    let opts = opts.for_role(&ctx.fence);
    if !opts.dry_run {
        publish::begin(ctx, rec, rev);
    }
    let prepared = prepare(ctx, rev, &rec.ledger, Scope::Keys(keys))?;
    apply(ctx, rec, rev, prepared, opts, ctl)
}

/// Problems listed in the ledger at most; the rest are counted.
const PROBLEMS_KEPT: usize = 100;

/// At most [`PROBLEMS_KEPT`] lines of `problems`, the rest counted.
fn kept_lines(problems: &[crate::declare::Problem]) -> Vec<String> {
    let mut lines: Vec<String> = problems
        .iter()
        .take(PROBLEMS_KEPT)
        .map(|p| p.to_string())
        .collect();
    if problems.len() > PROBLEMS_KEPT {
        lines.push(format!("... and {} more", problems.len() - PROBLEMS_KEPT));
    }
    lines
}

/// Keeps the problems of the revision a pass worked on in the ledger, so
/// `tend status` and the page show them (a document without a path has no
/// resource to be Blocked), and what it leaves out (submodules) as source
/// warnings. Written only when they change.
fn record_problems(rec: &Recorder, declared: &crate::declare::Declared) -> Result<(), LedgerError> {
    let lines = kept_lines(&declared.problems);
    if rec.ledger.declaration_problems()? != lines {
        rec.ledger.set_declaration_problems(&lines)?;
    }
    let warnings = kept_lines(&declared.notes);
    if rec.ledger.source_warnings()? != warnings {
        rec.ledger.set_source_warnings(&warnings)?;
    }
    Ok(())
}

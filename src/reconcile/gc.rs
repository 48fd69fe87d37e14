//! When the mirror is collected, and which revisions it must keep besides
//! what its refs reach: those the ledger names (applied, fetched, pinned,
//! every high-water mark) and those whose trees a target keeps (files with
//! `link`), so a rollback or a pin never finds its revision gone. `sync`
//! collects after its pass; the daemon takes the job after a poll and runs
//! it beside the loop, so passes and the watchdog never wait for it. Only
//! when due (`source.gc.interval`), never in a dry run.

use git2::Oid;

use super::{mirror_spec, Context, Recorder};
use crate::source::{Collected, GcSpec, Mirror};

/// A collection due, with what it must keep: it needs neither the context
/// nor the ledger any more, so it can run on a thread of its own.
pub struct MirrorGc {
    mirror: Mirror,
    keep: Vec<Oid>,
    spec: GcSpec,
}

/// The collection to run now, or `None` when none is due or what it must
/// keep cannot be read (then logged: nothing is known safe to drop).
pub fn mirror_gc_due(ctx: &Context, rec: &Recorder) -> Option<MirrorGc> {
    let mut spec = ctx.settings.source.gc;
    if ctx.settings.policy.dry_run || !ctx.mirror.gc_due(spec.interval) {
        return None;
    }
    let mut keep = match kept(rec) {
        Ok(keep) => keep,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the revisions to keep; the mirror is not collected");
            return None;
        }
    };
    keep.extend(ctx.targets.values().flat_map(|t| t.kept_revisions()));
    keep.sort_unstable();
    keep.dedup();
    // A fetch waits for the collection's lock for at most its timeout: a
    // collection stops well before, so no fetch fails for it.
    spec.budget = spec.budget.min(ctx.settings.source.timeout / 2);
    // A handle of its own: the context's stays with the worker.
    let mirror = match Mirror::open(&ctx.settings.state_dir, mirror_spec(&ctx.settings)) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the mirror to collect it");
            return None;
        }
    };
    Some(MirrorGc { mirror, keep, spec })
}

impl MirrorGc {
    /// Collects, logging what was done; `None` when it failed (logged).
    pub fn run(self) -> Option<Collected> {
        match self.mirror.collect_garbage(&self.keep, &self.spec) {
            Ok(done) => {
                tracing::info!(
                    loose = done.loose,
                    packs = done.packs,
                    packed = done.packed,
                    finished = done.finished,
                    "mirror collected"
                );
                Some(done)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot collect the mirror's garbage");
                None
            }
        }
    }
}

/// Collects the mirror now when a collection is due.
pub fn collect_mirror_if_due(ctx: &Context, rec: &Recorder) -> Option<Collected> {
    mirror_gc_due(ctx, rec)?.run()
}

/// The revisions the ledger names. A stored id that is not one is passed
/// over: it names nothing the mirror could hold.
fn kept(rec: &Recorder) -> Result<Vec<Oid>, crate::ledger::LedgerError> {
    let mut ids: Vec<String> = rec.ledger.high_water_marks()?;
    if let Some(s) = rec.ledger.source()? {
        ids.extend(s.applied_revision);
        ids.extend(s.fetched_revision);
    }
    if let Some(pin) = rec.ledger.pin()? {
        ids.push(pin.revision);
    }
    Ok(ids.iter().filter_map(|i| Oid::from_str(i).ok()).collect())
}

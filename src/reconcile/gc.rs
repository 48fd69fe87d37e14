//! When the mirror is collected, and which revisions it must keep besides
//! what its refs reach: those the ledger names (applied, fetched, pinned,
//! every high-water mark) and those whose trees a target keeps (files with
//! `link`), so a rollback or a pin never finds its revision gone. The daemon calls this after a poll, `sync` after its pass; both
//! only when a collection is due (`source.gc.interval`).

use git2::Oid;

use super::{Context, Recorder};
use crate::source::Collected;

/// Collects the mirror's garbage when due; what was done, or `None` when
/// nothing was due or it could not run (then logged).
pub fn collect_mirror_if_due(ctx: &Context, rec: &Recorder) -> Option<Collected> {
    let spec = ctx.settings.source.gc;
    // A dry run writes nothing, the state dir's mirror included.
    if ctx.settings.policy.dry_run || !ctx.mirror.gc_due(spec.interval) {
        return None;
    }
    let keep = match kept(rec) {
        Ok(mut keep) => {
            keep.extend(ctx.targets.values().flat_map(|t| t.kept_revisions()));
            keep
        }
        Err(e) => {
            // Without the ledger's revisions nothing is known safe to drop.
            tracing::warn!(error = %e, "cannot read the revisions to keep; the mirror is not collected");
            return None;
        }
    };
    match ctx.mirror.collect_garbage(&keep, &spec) {
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
    let mut keep: Vec<Oid> = ids.iter().filter_map(|i| Oid::from_str(i).ok()).collect();
    keep.sort_unstable();
    keep.dedup();
    Ok(keep)
}

//! Whole-tree publishing as the pass sees it: before writing a revision,
//! each target that publishes whole trees makes the revision's tree (from
//! the published one, for what it manages); at the end of the pass it
//! shows it to readers, unless something in it is left to write.

use super::context::Context;
use super::pass::Revision;
use super::record::Recorder;
use crate::ledger::State;
use crate::model::{RelPath, ResourceId};

/// Before a pass that writes `rev`. A target that cannot make the tree
/// says so; what it holds is then unknown to the pass, which writes
/// nothing there and retries.
pub(super) fn begin(ctx: &Context, rec: &Recorder, rev: &Revision) {
    for (name, target) in &ctx.targets {
        let carried = || {
            let mut paths = Vec::new();
            let listed = rec.ledger.for_each_inventory(|_, t, path| {
                if t == name {
                    paths.extend(RelPath::parse(path).ok());
                }
            });
            if let Err(e) = listed {
                tracing::warn!(target = %name, error = %e, "cannot read the inventory; the new tree starts empty");
            }
            paths
        };
        if let Err(e) = target.begin(rev.id, &carried) {
            tracing::warn!(target = %name, revision = %rev.id, error = %e, "cannot make the tree for the revision; its resources are unknown until it can");
        }
    }
}

/// At the end of a pass over `rev` that wrote (its outcomes given): each
/// target with an unpublished tree publishes it, unless a resource of its
/// in scope is still to be written (failed, or not observed) or the pass
/// was cut short, so a reader never gets a tree holding some files of an
/// older revision. A target itself refuses while an earlier write into the
/// tree failed. Returns why something stays unpublished.
pub(super) fn show<'a>(
    ctx: &Context,
    rev: &Revision,
    outcomes: impl Iterator<Item = (&'a ResourceId, State)> + Clone,
    cancelled: bool,
) -> Option<String> {
    let mut unpublished = None;
    for target in ctx.targets.values().filter(|t| t.unpublished()) {
        let name = target.name();
        let left = outcomes
            .clone()
            .filter(|(id, state)| {
                id.target() == name && matches!(state, State::Failed | State::Unknown)
            })
            .count();
        let why = match (cancelled, left) {
            (true, _) => Some("the pass was cut short".to_string()),
            (false, 0) => target.publish().err().map(|e| e.to_string()),
            (false, n) => Some(format!("{n} of its resources are still to be written")),
        };
        if let Some(why) = why {
            tracing::warn!(target = name, revision = %rev.id, reason = %why, "not published yet; readers keep the previous tree");
            unpublished = Some(format!("target {name}: {why}"));
        }
    }
    unpublished
}

//! Shows a planned change as `tend diff` does: reads the live and desired
//! bytes a content diff needs, and never shows sensitive content.

use super::context::Context;
use super::pass::Revision;
use crate::ledger::HashKey;
use crate::model::{Action, Change, ContentSource, Field, Spec};
use crate::render::{self, Shown};

/// Text or JSON of one change.
pub fn change(
    ctx: &Context,
    rev: &Revision,
    change: &Change,
    key: &HashKey,
    color: bool,
    json: bool,
) -> String {
    let content_changes = change.action == Action::Create
        || change
            .fields
            .iter()
            .any(|f| matches!(f, Field::Content | Field::Type { .. }));
    // A pruned file's content is not shown: whether it was sensitive is no
    // longer declared.
    // A decrypted secret is never read to be shown: it shows as changed.
    let secret = change.desired.as_ref().is_some_and(|d| d.decrypted);
    let live = match ctx.targets.get(&change.target) {
        Some(t) if content_changes && !secret && change.action == Action::Update => {
            t.read_live(&change.path).ok().flatten()
        }
        _ => None,
    };
    let desired = match change.desired.as_ref().map(|d| &d.spec) {
        Some(Spec::File(f)) if content_changes && !secret => rev.content.read(f.blob).ok(),
        _ => None,
    };
    let hash = |b: &[u8]| key.hash(crate::model::blob_id(b).as_bytes());
    let shown = Shown {
        live: live.as_deref(),
        desired: desired.as_deref(),
        hash: &hash,
        sensitive: change.desired.as_ref().is_some_and(|d| d.sensitive),
        color,
    };
    if json {
        render::json(change, &shown).to_string()
    } else {
        render::text(change, &shown)
    }
}

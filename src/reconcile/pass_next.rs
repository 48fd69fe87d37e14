//! A new revision read from the one before it: when the previous revision
//! was fully applied, only what the commits' trees say changed is read
//! again, and only those identities are reconciled (`Scope::Changes`).
//! Anything that cannot be patched safely is read whole and gets a full
//! pass, as before.

use std::collections::BTreeSet;
use std::sync::Arc;

use git2::Oid;

use super::context::{Context, PassContent};
use super::pass::{load, PassError, Revision};
use crate::model::ResourceId;

/// How a new revision is to be reconciled.
pub enum Next {
    /// Patched from the previous revision; only these identities changed.
    Changes {
        rev: Revision,
        keys: BTreeSet<ResourceId>,
    },
    /// Read whole: a full pass.
    Whole(Revision),
}

/// Reads revision `id`, from `prev` when given (a revision fully applied,
/// which nothing else holds on to, so its desired state is reused rather
/// than copied). On error `prev` is handed back: the last good state stays.
pub fn load_next(
    ctx: &Context,
    prev: Option<Arc<Revision>>,
    id: Oid,
) -> Result<Next, (PassError, Option<Arc<Revision>>)> {
    let Some(prev) = prev else {
        return load(ctx, id).map(Next::Whole).map_err(|e| (e, None));
    };
    match patch(ctx, &prev, id) {
        Ok(Some((snapshot, update))) => {
            let content = match snapshot.content_source() {
                Ok(blobs) => blobs,
                Err(e) => return Err((e.into(), Some(prev))),
            };
            let basis = prev.basis.clone();
            let declared = match Arc::try_unwrap(prev) {
                Ok(r) => r.declared,
                Err(shared) => shared.declared.clone(),
            };
            let keys = update.touched.clone();
            let declared = update.apply(declared);
            // Kept for the next process, which then reads none of it.
            crate::declare::cache::store(
                &crate::declare::cache::path(&ctx.settings.state_dir),
                &crate::declare::cache::key(id, &basis),
                &declared,
            );
            #[cfg(debug_assertions)]
            if let Ok(whole) = ctx.declare(&snapshot) {
                assert_eq!(
                    whole, declared,
                    "a patched declaration differs from a whole read"
                );
            }
            let rev = Revision {
                id,
                provenance: Default::default(),
                content: PassContent {
                    inline: declared.inline.clone(),
                    secrets: declared.secrets.clone(),
                    blobs: content,
                },
                declared,
                basis,
            };
            Ok(Next::Changes { rev, keys })
        }
        Ok(None) => load(ctx, id).map(Next::Whole).map_err(|e| (e, Some(prev))),
        Err(e) => Err((e, Some(prev))),
    }
}

/// The change from `prev` to `id` as a patch, or `None` when the revision
/// must be read whole.
fn patch(
    ctx: &Context,
    prev: &Revision,
    id: Oid,
) -> Result<Option<(crate::source::Snapshot, crate::declare::Update)>, PassError> {
    if prev.basis != ctx.declare_basis() {
        return Ok(None);
    }
    let snapshot = ctx.mirror.snapshot(id)?;
    let changed = match snapshot.changed_paths(prev.id) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "cannot compare revisions; reading the new one whole");
            return Ok(None);
        }
    };
    match ctx.declare_update(&prev.declared, &snapshot, &changed) {
        Ok(update) => Ok(update.map(|u| (snapshot, u))),
        Err(e) => {
            tracing::debug!(error = %e, "cannot patch the declaration; reading the revision whole");
            Ok(None)
        }
    }
}

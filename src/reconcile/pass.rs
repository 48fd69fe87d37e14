//! One pass, first half: a revision's desired state, fresh observations of
//! what a scope names, the plan, and the guards on pruning. `apply.rs` does
//! the second half.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use git2::Oid;

use super::context::{Context, PassContent};
use super::record::Outcome;
use crate::declare::{Declared, Problem};
use crate::diff::{self, Owned, Plan};
use crate::ledger::InventoryEntry;
use crate::model::{Desired, Observed, RelPath, ResourceId, Spec};

#[derive(Debug, Clone, Copy, Default)]
pub struct PassOptions {
    pub allow_mass_prune: bool,
    /// Observe and record, never write.
    pub dry_run: bool,
}

/// Which resources a pass looks at.
#[derive(Debug, Clone)]
pub enum Scope {
    /// The whole desired state and the whole inventory; only these prune.
    All,
    /// The named identities (events, retries).
    Keys(BTreeSet<ResourceId>),
}

/// What a pass did, for exit codes, logs, metrics and requeueing.
#[derive(Debug, Default)]
pub struct PassReport {
    pub revision: Option<Oid>,
    pub applied: usize,
    pub deleted: usize,
    pub failed: usize,
    pub writes: u64,
    pub writes_by_target: BTreeMap<String, u64>,
    pub problems: Vec<Problem>,
    pub prune_blocked: Option<String>,
    pub outcomes: BTreeMap<ResourceId, Outcome>,
    /// Every resource in scope is InSync and nothing is blocked.
    pub converged: bool,
    /// Hooks run at the end of the pass, and whether each succeeded.
    pub hooks: Vec<(String, bool)>,
    /// The pass stopped early because shutdown was asked for.
    pub cancelled: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
}

/// A revision's desired state, read once and reused by every pass over it.
pub struct Revision {
    pub id: Oid,
    pub declared: Declared,
    pub content: PassContent,
}

pub fn load(ctx: &Context, id: Oid) -> Result<Revision, PassError> {
    let snapshot = ctx.mirror.snapshot(id)?;
    let declared = ctx.declare(&snapshot)?;
    let content = PassContent {
        inline: declared.inline.clone(),
        blobs: snapshot.content_source()?,
    };
    Ok(Revision {
        id,
        declared,
        content,
    })
}

fn owned(inventory: &[InventoryEntry]) -> Vec<Owned> {
    inventory
        .iter()
        .filter_map(|e| {
            let path = RelPath::parse(&e.path).ok()?;
            Some(Owned {
                id: ResourceId::from_string(e.id.clone()),
                target: e.target.clone(),
                path,
            })
        })
        .collect()
}

/// A short, stable digest of what a declaration asks for; tells a new
/// declaration from drift of an applied one.
pub fn spec_digest(d: &Desired) -> String {
    match &d.spec {
        Spec::File(f) => format!("file:{}:{:o}:{:?}:{:?}", f.blob, f.mode, f.uid, f.gid),
        Spec::Symlink { target } => format!("symlink:{target}"),
    }
}

/// Observations and the plan for one pass.
pub struct Prepared {
    pub scope: Scope,
    pub inventory: Vec<Owned>,
    pub observed: HashMap<ResourceId, Observed>,
    pub plan: Plan,
}

/// Observes what the scope names and plans the corrections.
pub fn prepare(
    ctx: &Context,
    rev: &Revision,
    inventory: &[InventoryEntry],
    scope: Scope,
) -> Prepared {
    let in_scope = |id: &ResourceId| match &scope {
        Scope::All => true,
        Scope::Keys(keys) => keys.contains(id),
    };
    let inventory = owned(inventory);
    let desired: BTreeMap<ResourceId, Desired> = rev
        .declared
        .resources
        .iter()
        .filter(|(id, _)| in_scope(id))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let scoped_inventory: Vec<Owned> = inventory
        .iter()
        .filter(|o| in_scope(&o.id))
        .cloned()
        .collect();
    let items = desired
        .values()
        .map(|d| (&d.id, d.target.as_str(), &d.path))
        .chain(
            scoped_inventory
                .iter()
                .map(|o| (&o.id, o.target.as_str(), &o.path)),
        );
    let observed = ctx.observe(items);
    let keep = |id: &ResourceId| rev.declared.blocked.contains_key(id);
    let plan = diff::plan(&desired, &keep, &scoped_inventory, &observed);
    Prepared {
        scope,
        inventory,
        observed,
        plan,
    }
}

/// Why prune is held back this pass, if it is.
pub fn prune_guard(
    ctx: &Context,
    rev: &Revision,
    p: &Prepared,
    opts: PassOptions,
) -> Option<String> {
    let policy = &ctx.settings.policy;
    if p.plan.deletes.is_empty() {
        return None;
    }
    if !matches!(p.scope, Scope::All) {
        return Some("only full passes prune".into());
    }
    if !policy.prune {
        return Some("policy.prune is false".into());
    }
    if !rev.declared.is_complete() {
        return Some(
            "the revision has invalid declarations; nothing is pruned until they are fixed".into(),
        );
    }
    if rev.declared.resources.is_empty() && rev.declared.blocked.is_empty() && !policy.allow_empty {
        return Some(format!(
            "the revision declares nothing; pruning all {} managed resources needs policy.allow_empty",
            p.inventory.len()
        ));
    }
    let allowed = policy.max_prune.allowed(p.inventory.len());
    if p.plan.deletes.len() > allowed && !opts.allow_mass_prune {
        return Some(format!(
            "the pass would prune {} of {} managed resources, over policy.max_prune ({allowed}); raise the limit or run `tend sync --allow-mass-prune`",
            p.plan.deletes.len(),
            p.inventory.len()
        ));
    }
    None
}

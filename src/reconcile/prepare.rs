//! Before a pass writes anything: observe what its scope names, plan the
//! corrections against the ledger's inventory and managed fields, and decide
//! whether pruning is held back.

use std::collections::{BTreeMap, HashMap};

use super::context::Context;
use super::pass::{PassOptions, Revision, Scope};
use super::record::{managed_fields, Recorder};
use crate::diff::{self, Owned, Plan};
use crate::ledger::{InventoryEntry, Ledger, LedgerError};
use crate::model::{Desired, RelPath, ResourceId, Spec};

fn owned(inventory: Vec<InventoryEntry>) -> Vec<Owned> {
    inventory
        .into_iter()
        .filter_map(|e| {
            Some(Owned {
                path: RelPath::parse_owned(e.path).ok()?,
                id: ResourceId::from_string(e.id),
                target: e.target,
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
        Spec::Structured(s) => {
            use sha2::Digest;
            let text = serde_json::json!([s.kind, s.name, s.spec, s.ignore]).to_string();
            format!(
                "object:{}",
                hex::encode(sha2::Sha256::digest(text.as_bytes()))
            )
        }
    }
}

/// Observations and the plan for one pass.
pub struct Prepared {
    pub scope: Scope,
    pub inventory: Vec<Owned>,
    /// The fields tend set before on the structured resources in scope.
    pub managed: HashMap<ResourceId, Vec<String>>,
    pub plan: Plan,
}

/// Observes what the scope names and plans the corrections, with the
/// inventory and the managed fields read from the ledger.
pub fn prepare(
    ctx: &Context,
    rev: &Revision,
    ledger: &Ledger,
    scope: Scope,
) -> Result<Prepared, LedgerError> {
    let in_scope = |id: &ResourceId| match &scope {
        Scope::All => true,
        Scope::Keys(keys) => keys.contains(id),
    };
    let inventory = owned(ledger.inventory()?);
    // A full pass borrows the whole declaration and inventory.
    let (filtered, scoped): (BTreeMap<ResourceId, Desired>, Vec<Owned>) = match &scope {
        Scope::All => Default::default(),
        Scope::Keys(_) => (
            rev.declared
                .resources
                .iter()
                .filter(|(id, _)| in_scope(id))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            inventory
                .iter()
                .filter(|o| in_scope(&o.id))
                .cloned()
                .collect(),
        ),
    };
    let (desired, scoped_inventory) = match &scope {
        Scope::All => (&rev.declared.resources, inventory.as_slice()),
        Scope::Keys(_) => (&filtered, scoped.as_slice()),
    };
    let mut managed = HashMap::new();
    for d in desired.values() {
        if matches!(d.spec, Spec::Structured(_)) {
            managed.insert(d.id.clone(), managed_fields(ledger, &d.id)?);
        }
    }
    let items = desired
        .values()
        .map(|d| (&d.id, d.target.as_str(), &d.path, Some(&d.spec)))
        .chain(
            scoped_inventory
                .iter()
                .map(|o| (&o.id, o.target.as_str(), &o.path, None)),
        );
    let observed = ctx.observe(items);
    let keep = |id: &ResourceId| rev.declared.blocked.contains_key(id);
    let plan = diff::plan(desired, &keep, scoped_inventory, &observed, &managed);
    Ok(Prepared {
        scope,
        inventory,
        managed,
        plan,
    })
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

/// Records the fields of a structured resource that tend now manages (its
/// declared fields, once live state holds them), when they changed.
pub(super) fn claim_fields(
    rec: &Recorder,
    d: &Desired,
    before: Option<&Vec<String>>,
) -> Result<(), LedgerError> {
    if let Spec::Structured(s) = &d.spec {
        let now = crate::ownership::managed_fields(&s.spec);
        if before != Some(&now) {
            rec.set_managed(&d.id, &now)?;
        }
    }
    Ok(())
}

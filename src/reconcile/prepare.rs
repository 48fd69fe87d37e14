//! Before a pass decides anything: observe what its scope names and plan
//! the corrections against the ledger's inventory and managed fields.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::context::Context;
use super::pass::{Revision, Scope};
use super::record::managed_fields;
use crate::diff::{self, Owned, Plan};
use crate::ledger::{Ledger, LedgerError, State};
use crate::model::{Desired, RelPath, ResourceId, Spec};

/// An inventory member as the plan compares it. Identity, target and path
/// still declared are shared with the declaration rather than held twice.
fn owned(id: &str, target: &str, path: &str, declared: Option<&Desired>) -> Option<Owned> {
    Some(match declared {
        Some(d) if d.target() == target && d.path.as_str() == path => Owned {
            id: d.id.clone(),
            target: d.id.target_shared(),
            path: d.path.clone(),
            declared: true,
        },
        Some(d) => Owned {
            id: d.id.clone(),
            target: target.into(),
            path: RelPath::parse(path).ok()?,
            declared: true,
        },
        None => Owned {
            id: ResourceId::from_string(id.to_string()),
            target: target.into(),
            path: RelPath::parse(path).ok()?,
            declared: false,
        },
    })
}

/// The whole inventory, read as a stream; the ledger lists it in identity
/// order, so one walk along the declaration finds each member's.
fn whole_inventory(
    ledger: &Ledger,
    declared: &BTreeMap<ResourceId, Desired>,
) -> Result<Vec<Owned>, LedgerError> {
    let mut out = Vec::new();
    let mut along = diff::Along::new(declared);
    ledger.for_each_inventory(|id, target, path| {
        out.extend(owned(id, target, path, along.find(id)));
    })?;
    Ok(out)
}

/// Observations and the plan for one pass.
pub struct Prepared {
    pub scope: Scope,
    /// The inventory members in scope.
    pub inventory: Vec<Owned>,
    /// How many identities tend manages in all, for the prune limits; read
    /// only when they apply (0 for a keyed scope that does not prune).
    pub managed_count: usize,
    /// The fields tend set before on the structured resources in scope.
    pub managed: HashMap<ResourceId, Vec<String>>,
    pub plan: Plan,
    /// In a keyed scope, the deletes that retry one a pruning pass decided
    /// and that failed (their record says Failed): those a keyed pass may
    /// carry out. Empty for scopes that prune.
    pub deletes_retried: HashSet<ResourceId>,
}

/// Observes what the scope names and plans the corrections, with the
/// inventory and the managed fields read from the ledger. A keyed scope
/// reads and looks up only its keys.
pub fn prepare(
    ctx: &Context,
    rev: &Revision,
    ledger: &Ledger,
    scope: Scope,
) -> Result<Prepared, LedgerError> {
    // A full pass borrows the whole declaration; a keyed one looks up and
    // reads only its keys.
    let filtered: BTreeMap<ResourceId, Desired>;
    let (desired, inventory, managed_count) = match scope.keys() {
        None => {
            let inventory = whole_inventory(ledger, &rev.declared.resources)?;
            let count = inventory.len();
            (&rev.declared.resources, inventory, count)
        }
        Some(keys) => {
            filtered = keys
                .iter()
                .filter_map(|id| rev.declared.resources.get(id))
                .map(|d| (d.id.clone(), d.clone()))
                .collect();
            let inventory = ledger
                .inventory_of(keys.iter().map(|k| k.as_str()))?
                .into_iter()
                .filter_map(|e| {
                    let d = rev.declared.resources.get(e.id.as_str());
                    owned(&e.id, &e.target, &e.path, d)
                })
                .collect();
            // The count is read below, only when it can matter.
            (&filtered, inventory, 0)
        }
    };
    let mut managed = HashMap::new();
    for d in desired.values() {
        if matches!(d.spec, Spec::Structured(_)) {
            managed.insert(d.id.clone(), managed_fields(ledger, &d.id)?);
        }
    }
    // A member still declared is observed once, as declared (on a no-op
    // pass that is every member); one declared but blocked is kept as it
    // is. Only the rest, which the plan may prune, are observed apart.
    let keep = |id: &ResourceId| rev.declared.blocked.contains_key(id);
    let apart: Vec<&Owned> = inventory
        .iter()
        .filter(|o| !o.declared && !keep(&o.id))
        .collect();
    let items = desired
        .values()
        .map(|d| (&d.id, d.target(), &d.path, Some(&d.spec)))
        .chain(
            apart
                .iter()
                .map(|o| (&o.id, o.target.as_str(), &o.path, None)),
        );
    let mut declared = ctx.observe(items);
    let others = declared.split_off(desired.len().min(declared.len()));
    let observed = diff::Observations {
        declared,
        others: apart.iter().map(|o| o.id.clone()).zip(others).collect(),
    };
    let plan = diff::plan(desired, &keep, &inventory, &observed, &managed);
    // Only the prune limits need the whole count: a keyed scope that would
    // prune reads it.
    let managed_count = if scope.keys().is_some() && scope.prunes() && !plan.deletes.is_empty() {
        ledger.inventory_count()?
    } else {
        managed_count
    };
    let deletes_retried = match scope.prunes() || plan.deletes.is_empty() {
        true => HashSet::new(),
        false => ledger
            .resources_of(plan.deletes.iter().map(|c| c.id.as_str()))?
            .into_iter()
            .filter(|r| r.state == State::Failed)
            .map(|r| ResourceId::from_string(r.id))
            .collect(),
    };
    Ok(Prepared {
        scope,
        inventory,
        managed_count,
        managed,
        plan,
        deletes_retried,
    })
}

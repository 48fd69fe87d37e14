//! Before a pass decides anything: observe what its scope names and plan
//! the corrections against the ledger's inventory and managed fields.

use std::collections::{HashMap, HashSet};

use super::context::Context;
use super::pass::{Revision, Scope};
use super::record::managed_fields;
use crate::diff::{self, Inventory, Owned, Plan, Planner};
use crate::ledger::{Ledger, LedgerError, State};
use crate::model::{Desired, RelPath, ResourceId, Resources, Spec};
use crate::target::Probe;

/// The ledger's inventory, placed by the declaration; the ledger lists it
/// in identity order, so one walk along the declaration finds each
/// member's declaration.
fn inventory_of(
    declared: &Resources,
    members: impl FnOnce(&mut dyn FnMut(&str, &str, &str)) -> Result<(), LedgerError>,
) -> Result<Inventory, LedgerError> {
    let mut inventory = Inventory::new(declared.len());
    let mut along = diff::Along::new(declared);
    members(&mut |id, target, path| inventory.add(&mut along, id, target, path))?;
    Ok(inventory)
}

/// What a pass observes: a declared resource, or an inventory member no
/// longer declared.
#[derive(Clone, Copy)]
enum Item<'a> {
    Declared(&'a Desired),
    Member(&'a Owned),
}

fn probe<'a>(id: &'a ResourceId, path: RelPath, spec: Option<&'a Spec>) -> Probe<'a> {
    Probe { id, path, spec }
}

/// The declared resources and the members no longer declared, both in
/// identity order, merged into one.
fn in_identity_order<'a>(
    declared: impl Iterator<Item = &'a Desired>,
    members: Vec<&'a Owned>,
) -> impl Iterator<Item = Item<'a>> {
    let mut declared = declared.peekable();
    let mut members = members.into_iter().peekable();
    std::iter::from_fn(move || match (declared.peek(), members.peek()) {
        (Some(d), Some(o)) if o.id < d.id => members.next().map(Item::Member),
        (Some(_), _) => declared.next().map(Item::Declared),
        (None, _) => members.next().map(Item::Member),
    })
}

/// Observations and the plan for one pass.
pub struct Prepared {
    pub scope: Scope,
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
/// reads and looks up only its keys. Each observation is compared as it
/// comes: no more of them are held at once than a target observes at once.
pub fn prepare(
    ctx: &Context,
    rev: &Revision,
    ledger: &Ledger,
    scope: Scope,
) -> Result<Prepared, LedgerError> {
    // A full pass borrows the whole declaration; a keyed one looks up and
    // reads only its keys.
    let filtered: Resources;
    let (desired, inventory) = match scope.keys() {
        None => {
            let declared = &rev.declared.resources;
            let inventory = inventory_of(declared, |f| ledger.for_each_inventory(f))?;
            (declared, inventory)
        }
        Some(keys) => {
            filtered = keys
                .iter()
                .filter_map(|id| rev.declared.resources.get(id))
                .cloned()
                .collect();
            let inventory = inventory_of(&filtered, |f| {
                for e in ledger.inventory_of(keys.iter().map(|k| k.as_str()))? {
                    f(&e.id, &e.target, &e.path);
                }
                Ok(())
            })?;
            (&filtered, inventory)
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
    let mut planner = Planner::new(&inventory, &keep);
    let mut apart: Vec<&Owned> = inventory
        .undeclared
        .iter()
        .filter(|o| !keep(&o.id))
        .collect();
    apart.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    // Both in identity order, so each target's resources come together
    // and a target that reads its whole store per call reads it once.
    let items = in_identity_order(desired.values(), apart).map(|item| match item {
        Item::Declared(d) => (d.target(), probe(&d.id, d.path(), Some(&d.spec)), item),
        Item::Member(o) => (o.target.as_str(), probe(&o.id, o.path.clone(), None), item),
    });
    ctx.observe_each(items, |item, observed| match item {
        Item::Declared(d) => {
            let before = managed.get(&d.id).map(Vec::as_slice).unwrap_or_default();
            planner.declared(d, observed, before);
        }
        Item::Member(o) => planner.undeclared(o, observed),
    });
    let plan = planner.finish();
    // Only the prune limits need the whole count: a keyed scope that would
    // prune reads it.
    let managed_count = match scope.keys() {
        None => inventory.count,
        Some(_) if scope.prunes() && !plan.deletes.is_empty() => ledger.inventory_count()?,
        Some(_) => 0,
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
        managed_count,
        managed,
        plan,
        deletes_retried,
    })
}

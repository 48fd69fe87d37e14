//! A plan from comparisons: every declared resource against what was
//! observed of it, and every inventory member no longer declared, one
//! at a time ([`Planner`]), with the inventory placed by the declaration.

use std::collections::HashMap;

use super::{compare, Comparison};
use crate::model::{Action, Change, Desired, Observed, RelPath, ResourceId, Resources, SharedStr};

/// An inventory member no longer declared in this revision: something
/// tend created or adopted, which the plan may prune.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub id: ResourceId,
    pub target: SharedStr,
    pub path: RelPath,
}

/// The inventory as a plan needs it: the members no longer declared, and
/// which declared identities are members, one flag each in the
/// declaration's order (a member still declared, on a no-op pass every
/// one, is held by nothing larger).
#[derive(Debug, Default)]
pub struct Inventory {
    /// Members not declared in this revision, in the ledger's order.
    pub undeclared: Vec<Owned>,
    held: Vec<bool>,
    /// Members in all.
    pub count: usize,
}

impl Inventory {
    /// An empty inventory beside `declared` declarations.
    pub fn new(declared: usize) -> Inventory {
        Inventory {
            undeclared: Vec::new(),
            held: vec![false; declared],
            count: 0,
        }
    }

    /// The `i`-th declaration's identity is a member (wherever it was
    /// made: a member declared at another path is no prune candidate).
    pub fn held(&mut self, i: usize) {
        self.held[i] = true;
        self.count += 1;
    }

    pub fn undeclared(&mut self, owned: Owned) {
        self.undeclared.push(owned);
        self.count += 1;
    }

    /// A ledger's member, placed by the declaration: `along` walks it.
    pub fn add(&mut self, along: &mut Along, id: &str, target: &str, path: &str) {
        match along.find(id) {
            Some((i, _)) => self.held(i),
            None => {
                if let Ok(path) = RelPath::parse(path) {
                    self.undeclared(Owned {
                        id: ResourceId::from_string(id.to_string()),
                        target: target.into(),
                        path,
                    });
                }
            }
        }
    }

    fn holds(&self, i: usize) -> bool {
        self.held.get(i).copied().unwrap_or(false)
    }
}

/// What a pass saw: one observation per declared resource, in the order of
/// the declaration, and those of the inventory members no longer declared.
#[derive(Debug, Default)]
pub struct Observations {
    pub declared: Vec<Observed>,
    pub others: HashMap<ResourceId, Observed>,
}

/// Finds declarations by identity, with their place in the declaration.
/// Identities asked in ascending order (as the ledger lists its inventory)
/// are found by one walk along it; one asked out of order is looked up.
pub struct Along<'a> {
    all: &'a [Desired],
    next: usize,
}

impl<'a> Along<'a> {
    pub fn new(declared: &'a Resources) -> Along<'a> {
        Along {
            all: declared.as_slice(),
            next: 0,
        }
    }

    pub fn find(&mut self, id: &str) -> Option<(usize, &'a Desired)> {
        let behind = self.next > 0 && id <= self.all[self.next - 1].id.as_str();
        if behind {
            let i = self.all.binary_search_by(|d| d.id.as_str().cmp(id)).ok()?;
            return Some((i, &self.all[i]));
        }
        while self.next < self.all.len() && self.all[self.next].id.as_str() < id {
            self.next += 1;
        }
        let d = self.all.get(self.next).filter(|d| d.id.as_str() == id)?;
        self.next += 1;
        Some((self.next - 1, d))
    }
}

/// Everything one pass would do.
#[derive(Debug, Default)]
pub struct Plan {
    /// Creates and updates, in identity order.
    pub applies: Vec<Change>,
    /// Prunes of inventory members no longer declared, deepest paths first.
    pub deletes: Vec<Change>,
    pub in_sync: Vec<ResourceId>,
    pub unknown: Vec<(ResourceId, String)>,
    /// Inventory members no longer declared and already gone.
    pub forgotten: Vec<ResourceId>,
    /// Declared identities whose object is there but not in the
    /// inventory (objects tend did not create, to adopt or, with
    /// `policy.adopt: false`, to leave alone): those in sync, and those to
    /// be updated.
    pub unowned: Unowned,
}

/// See [`Plan::unowned`].
#[derive(Debug, Default)]
pub struct Unowned {
    pub in_sync: Vec<ResourceId>,
    pub updates: Vec<ResourceId>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.applies.is_empty() && self.deletes.is_empty()
    }
    /// Creates and updates before deletes (SPEC §5).
    pub fn changes(&self) -> impl Iterator<Item = &Change> {
        self.applies.iter().chain(self.deletes.iter())
    }
}

/// Builds a [`Plan`] one observation at a time, so a pass need not hold
/// every observation at once: each declared resource in the declaration's
/// order, then each inventory member no longer declared. `keep` names
/// identities that are declared but blocked, which are never pruned.
pub struct Planner<'a> {
    plan: Plan,
    inventory: &'a Inventory,
    keep: &'a dyn Fn(&ResourceId) -> bool,
    next: usize,
}

impl<'a> Planner<'a> {
    pub fn new(inventory: &'a Inventory, keep: &'a dyn Fn(&ResourceId) -> bool) -> Planner<'a> {
        let mut plan = Plan::default();
        // Most are in sync: room for each, not twice as much grown to.
        plan.in_sync.reserve_exact(inventory.held.len());
        Planner {
            plan,
            inventory,
            keep,
            next: 0,
        }
    }

    /// The next declared resource and what was observed of it; `before`
    /// lists the fields tend set on it earlier (structured resources).
    pub fn declared(&mut self, d: &Desired, observed: Observed, before: &[String]) {
        let held = self.inventory.holds(self.next);
        self.next += 1;
        let plan = &mut self.plan;
        match compare(d, &observed, before) {
            Comparison::InSync => {
                if !held {
                    plan.unowned.in_sync.push(d.id.clone());
                }
                plan.in_sync.push(d.id.clone());
            }
            Comparison::Unknown(reason) => plan.unknown.push((d.id.clone(), reason)),
            Comparison::Differs { action, fields } => {
                if action == Action::Update && !held {
                    plan.unowned.updates.push(d.id.clone());
                }
                plan.applies.push(Change {
                    id: d.id.clone(),
                    target: d.target().to_string(),
                    path: d.path(),
                    action,
                    fields,
                    desired: Some(d.clone()),
                    observed,
                });
            }
        }
    }

    /// An inventory member no longer declared, and what was observed of it.
    pub fn undeclared(&mut self, owned: &Owned, observed: Observed) {
        if (self.keep)(&owned.id) {
            return;
        }
        let plan = &mut self.plan;
        match observed {
            Observed::Absent => plan.forgotten.push(owned.id.clone()),
            Observed::Unknown(reason) => plan.unknown.push((owned.id.clone(), reason)),
            Observed::Present(_) => plan.deletes.push(Change {
                id: owned.id.clone(),
                target: owned.target.to_string(),
                path: owned.path.clone(),
                action: Action::Delete,
                fields: Vec::new(),
                desired: None,
                observed,
            }),
        }
    }

    pub fn finish(mut self) -> Plan {
        self.plan.deletes.sort_by(|a, b| {
            let depth = |c: &Change| c.path.components().count();
            depth(b).cmp(&depth(a)).then_with(|| a.id.cmp(&b.id))
        });
        self.plan
    }
}

/// Compares the whole desired state with observations made beforehand:
/// [`Planner`] fed from `observed`, which must hold an answer for every
/// desired identity, in order, and every member no longer declared
/// (one missing is taken as not observed).
pub fn plan(
    desired: &Resources,
    keep: &dyn Fn(&ResourceId) -> bool,
    inventory: &Inventory,
    observed: &Observations,
    managed: &HashMap<ResourceId, Vec<String>>,
) -> Plan {
    let missing = || Observed::Unknown("not observed".into());
    let mut planner = Planner::new(inventory, keep);
    for (i, d) in desired.values().enumerate() {
        let obs = observed.declared.get(i).cloned().unwrap_or_else(missing);
        let before = managed.get(&d.id).map(Vec::as_slice).unwrap_or_default();
        planner.declared(d, obs, before);
    }
    for owned in &inventory.undeclared {
        let obs = observed.others.get(&owned.id).cloned();
        planner.undeclared(owned, obs.unwrap_or_else(missing));
    }
    planner.finish()
}

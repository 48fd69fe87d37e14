//! Pure comparison: desired x observed -> the smallest changes, each with the
//! fields that differ. `diff` and `sync` both use this, so a diff is exactly
//! what a sync would do.

use std::collections::HashMap;

use crate::model::{
    Action, Change, Desired, Field, Live, Observed, RelPath, ResourceId, Resources, SharedStr, Spec,
};
use crate::ownership;

/// The outcome of comparing one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    InSync,
    Differs {
        action: Action,
        fields: Vec<Field>,
    },
    /// Could not observe: nothing may be done.
    Unknown(String),
}

/// Compares one declared resource with what was observed for it. `before`
/// lists the fields tend set on a structured resource earlier (its managed
/// fields); those the declaration dropped are removed.
pub fn compare(desired: &Desired, observed: &Observed, before: &[String]) -> Comparison {
    let live = match observed {
        Observed::Unknown(reason) => return Comparison::Unknown(reason.clone()),
        Observed::Absent => {
            // A structured create names every field it sets, for the diff.
            let fields = match &desired.spec {
                Spec::Structured(s) => {
                    ownership::compare(&s.spec, &serde_json::json!({}), &s.ignore, &[])
                }
                _ => Vec::new(),
            };
            return Comparison::Differs {
                action: Action::Create,
                fields,
            };
        }
        Observed::Present(live) => live,
    };
    let mut fields = Vec::new();
    match (&desired.spec, live) {
        (
            Spec::File(want),
            Live::File {
                blob,
                mode,
                uid,
                gid,
                ..
            },
        ) => {
            if *blob != want.blob {
                fields.push(Field::Content);
            }
            if *mode != want.mode {
                fields.push(Field::Mode {
                    from: *mode,
                    to: want.mode,
                });
            }
            if let Some(u) = want.uid.filter(|u| u != uid) {
                fields.push(Field::Owner { from: *uid, to: u });
            }
            if let Some(g) = want.gid.filter(|g| g != gid) {
                fields.push(Field::Group { from: *gid, to: g });
            }
        }
        (Spec::Symlink { target }, Live::Symlink { target: have }) => {
            if have != target {
                fields.push(Field::LinkTarget {
                    from: have.clone(),
                    to: target.clone(),
                });
            }
        }
        (Spec::Structured(s), Live::Structured { state, .. }) => {
            fields = ownership::compare(&s.spec, state, &s.ignore, before);
        }
        (spec, live) => fields.push(Field::Type {
            from: live.type_name().into(),
            to: spec.kind().into(),
        }),
    }
    if fields.is_empty() {
        Comparison::InSync
    } else {
        Comparison::Differs {
            action: Action::Update,
            fields,
        }
    }
}

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
        Planner {
            plan: Plan::default(),
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
                    path: d.path.clone(),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{blob_id, FileSpec, Origin};

    /// A desired `file` resource at `path`, for tests here and elsewhere.
    pub(crate) fn file(path: &str, content: &[u8], mode: u32) -> Desired {
        Desired {
            id: ResourceId::new("files", "file", path),
            path: RelPath::parse(path).unwrap(),
            spec: Spec::File(FileSpec {
                blob: blob_id(content),
                size: content.len() as u64,
                mode,
                uid: None,
                gid: None,
                secret: false,
            }),
            on_change: None,
            self_heal: None,
            sensitive: false,
            decrypted: false,
            origin: Origin::default(),
        }
    }

    fn live_file(content: &[u8], mode: u32) -> Observed {
        Observed::Present(Live::File {
            blob: blob_id(content),
            size: content.len() as u64,
            mode,
            uid: 0,
            gid: 0,
        })
    }

    #[test]
    fn only_differing_fields() {
        let d = file("a", b"x", 0o644);
        assert_eq!(
            compare(&d, &live_file(b"x", 0o644), &[]),
            Comparison::InSync
        );
        assert_eq!(
            compare(&d, &live_file(b"x", 0o600), &[]),
            Comparison::Differs {
                action: Action::Update,
                fields: vec![Field::Mode {
                    from: 0o600,
                    to: 0o644
                }]
            }
        );
        assert_eq!(
            compare(&d, &live_file(b"y", 0o644), &[]),
            Comparison::Differs {
                action: Action::Update,
                fields: vec![Field::Content]
            }
        );
        assert!(matches!(
            compare(&d, &Observed::Absent, &[]),
            Comparison::Differs {
                action: Action::Create,
                ..
            }
        ));
        assert!(matches!(
            compare(&d, &Observed::Unknown("EIO".into()), &[]),
            Comparison::Unknown(_)
        ));
        let dir = Observed::Present(Live::Directory { empty: true });
        assert!(
            matches!(compare(&d, &dir, &[]), Comparison::Differs { fields, .. } if fields[0].name() == "type")
        );
    }

    #[test]
    fn along_finds_declarations_in_and_out_of_order() {
        let declared: Resources = ["a", "a.txt", "a/b", "c", "e"]
            .into_iter()
            .map(|p| file(p, b"x", 0o644))
            .collect();
        let id = |p: &str| ResourceId::new("files", "file", p).to_string();
        let asked = ["0", "a", "a/b", "b", "e", "c", "a.txt", "d", "a", "z", "e"];
        let mut along = Along::new(&declared);
        for p in asked {
            let found = along.find(&id(p)).map(|(i, d)| (i, d.path.to_string()));
            let expected = declared
                .values()
                .position(|d| d.id.as_str() == id(p))
                .map(|i| (i, p.to_string()));
            assert_eq!(found, expected, "{p}");
        }
    }

    #[test]
    fn prunes_only_undeclared_inventory_deepest_first() {
        let desired: Resources = [file("keep", b"k", 0o644), file("new", b"n", 0o644)]
            .into_iter()
            .collect();
        let members = ["keep", "a", "a/b/c", "gone", "blocked", "unsure"];
        let inventory_in = |order: &[&str]| {
            let mut inventory = Inventory::new(desired.len());
            let mut along = Along::new(&desired);
            for p in order {
                let id = ResourceId::new("files", "file", p);
                inventory.add(&mut along, id.as_str(), "files", p);
            }
            inventory
        };
        let mut observed: HashMap<_, _> = members
            .iter()
            .map(|p| (ResourceId::new("files", "file", p), live_file(b"z", 0o644)))
            .collect();
        observed.insert(
            ResourceId::new("files", "file", "keep"),
            live_file(b"k", 0o644),
        );
        observed.insert(
            ResourceId::new("files", "file", "new"),
            live_file(b"n", 0o644),
        );
        observed.insert(ResourceId::new("files", "file", "gone"), Observed::Absent);
        observed.insert(
            ResourceId::new("files", "file", "unsure"),
            Observed::Unknown("EIO".into()),
        );
        let observed = Observations {
            declared: desired.keys().map(|id| observed[id].clone()).collect(),
            others: observed,
        };
        let blocked = ResourceId::new("files", "file", "blocked");
        let inventory = inventory_in(&members);
        assert_eq!(inventory.count, members.len());
        let p = plan(
            &desired,
            &|id| *id == blocked,
            &inventory,
            &observed,
            &HashMap::new(),
        );
        let deletes: Vec<_> = p.deletes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(deletes, vec!["a/b/c", "a"]);
        // The same inventory in identity order, as the ledger gives it.
        let mut in_order = members.to_vec();
        in_order.sort_by_key(|p| ResourceId::new("files", "file", p));
        let q = plan(
            &desired,
            &|id| *id == blocked,
            &inventory_in(&in_order),
            &observed,
            &HashMap::new(),
        );
        let paths = |cs: &[Change]| cs.iter().map(|c| c.path.to_string()).collect::<Vec<_>>();
        assert_eq!(paths(&q.deletes), paths(&p.deletes));
        assert_eq!(q.forgotten, p.forgotten);
        assert_eq!(q.unknown, p.unknown);
        assert_eq!(q.in_sync, p.in_sync);
        assert_eq!(p.forgotten, vec![ResourceId::new("files", "file", "gone")]);
        assert_eq!(p.unknown.len(), 1);
        assert_eq!(p.in_sync.len(), 2);
        assert!(p.applies.is_empty());
        // `new` is in sync but no member: it is one to adopt; `keep` is not.
        for plan in [&p, &q] {
            assert_eq!(
                plan.unowned.in_sync,
                vec![ResourceId::new("files", "file", "new")]
            );
        }
    }
}

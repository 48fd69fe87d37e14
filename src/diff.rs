//! Pure comparison: desired x observed -> the smallest changes, each with the
//! fields that differ. `diff` and `sync` both use this, so a diff is exactly
//! what a sync would do.

use std::collections::{BTreeMap, HashMap};

use crate::model::{
    Action, Change, Desired, Field, Live, Observed, RelPath, ResourceId, SharedStr, Spec,
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

/// An inventory member: something tend created or adopted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub id: ResourceId,
    pub target: SharedStr,
    pub path: RelPath,
    /// The identity is declared in this revision (where, `target` and
    /// `path` tell when it is the same place).
    pub declared: bool,
}

/// What a pass saw: one observation per declared resource, in the order of
/// the declared map, and those of the inventory members observed apart from
/// it (no longer declared, or declared elsewhere).
#[derive(Debug, Default)]
pub struct Observations {
    pub declared: Vec<Observed>,
    pub others: HashMap<ResourceId, Observed>,
}

/// Finds declarations by identity. Identities asked in ascending order (as
/// the ledger lists its inventory) are found by one walk along the
/// declared map; one asked out of order is looked up.
pub struct Along<'a> {
    map: &'a BTreeMap<ResourceId, Desired>,
    rest: std::iter::Peekable<std::collections::btree_map::Values<'a, ResourceId, Desired>>,
    /// The last declaration the walk went past.
    passed: Option<&'a Desired>,
}

impl<'a> Along<'a> {
    pub fn new(map: &'a BTreeMap<ResourceId, Desired>) -> Along<'a> {
        Along {
            map,
            rest: map.values().peekable(),
            passed: None,
        }
    }

    pub fn find(&mut self, id: &str) -> Option<&'a Desired> {
        // Everything up to `passed` is behind the walk.
        if self.passed.is_some_and(|p| id <= p.id.as_str()) {
            return self.map.get(id);
        }
        while let Some(d) = self.rest.next_if(|d| d.id.as_str() < id) {
            self.passed = Some(d);
        }
        self.rest.peek().copied().filter(|d| d.id.as_str() == id)
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

/// Compares the whole desired state with fresh observations. `observed`
/// must hold an answer for every desired identity and every inventory
/// member neither declared nor kept; `keep` lists identities that are
/// declared but blocked, which are never pruned; `managed` holds the fields
/// tend set on structured resources before.
pub fn plan(
    desired: &BTreeMap<ResourceId, Desired>,
    keep: &dyn Fn(&ResourceId) -> bool,
    inventory: &[Owned],
    observed: &Observations,
    managed: &HashMap<ResourceId, Vec<String>>,
) -> Plan {
    let mut plan = Plan::default();
    let missing = || Observed::Unknown("not observed".into());
    for (i, (id, d)) in desired.iter().enumerate() {
        let obs = observed.declared.get(i);
        let before = managed.get(id).map(Vec::as_slice).unwrap_or_default();
        match compare(d, obs.unwrap_or(&missing()), before) {
            Comparison::InSync => plan.in_sync.push(id.clone()),
            Comparison::Unknown(reason) => plan.unknown.push((id.clone(), reason)),
            Comparison::Differs { action, fields } => plan.applies.push(Change {
                id: id.clone(),
                target: d.target().to_string(),
                path: d.path.clone(),
                action,
                fields,
                desired: Some(d.clone()),
                observed: obs.cloned().unwrap_or_else(missing),
            }),
        }
    }
    for owned in inventory {
        if owned.declared || keep(&owned.id) {
            continue;
        }
        let obs = observed
            .others
            .get(&owned.id)
            .cloned()
            .unwrap_or_else(missing);
        match obs {
            Observed::Absent => plan.forgotten.push(owned.id.clone()),
            Observed::Unknown(reason) => plan.unknown.push((owned.id.clone(), reason)),
            Observed::Present(_) => plan.deletes.push(Change {
                id: owned.id.clone(),
                target: owned.target.to_string(),
                path: owned.path.clone(),
                action: Action::Delete,
                fields: Vec::new(),
                desired: None,
                observed: obs,
            }),
        }
    }
    plan.deletes.sort_by(|a, b| {
        let depth = |c: &Change| c.path.components().count();
        depth(b).cmp(&depth(a)).then_with(|| a.id.cmp(&b.id))
    });
    plan.unowned = unowned(desired.len(), inventory, &plan);
    plan
}

/// The identities of [`Plan::unowned`]. When the inventory holds every
/// declared identity (a converged pass) that is known by count alone.
fn unowned(declared: usize, inventory: &[Owned], plan: &Plan) -> Unowned {
    if inventory.iter().filter(|o| o.declared).count() >= declared {
        return Unowned::default();
    }
    let held: std::collections::HashSet<&ResourceId> = inventory
        .iter()
        .filter(|o| o.declared)
        .map(|o| &o.id)
        .collect();
    let not_held = |ids: &mut dyn Iterator<Item = &ResourceId>| {
        ids.filter(|id| !held.contains(id)).cloned().collect()
    };
    Unowned {
        in_sync: not_held(&mut plan.in_sync.iter()),
        updates: not_held(
            &mut plan
                .applies
                .iter()
                .filter(|c| c.action == Action::Update)
                .map(|c| &c.id),
        ),
    }
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
        let map: BTreeMap<_, _> = ["a", "a.txt", "a/b", "c", "e"]
            .into_iter()
            .map(|p| file(p, b"x", 0o644))
            .map(|d| (d.id.clone(), d))
            .collect();
        let id = |p: &str| ResourceId::new("files", "file", p).to_string();
        let asked = ["0", "a", "a/b", "b", "e", "c", "a.txt", "d", "a", "z", "e"];
        let mut along = Along::new(&map);
        for p in asked {
            let found = along.find(&id(p)).map(|d| d.path.to_string());
            let expected = map.get(id(p).as_str()).map(|d| d.path.to_string());
            assert_eq!(found, expected, "{p}");
        }
    }

    #[test]
    fn prunes_only_undeclared_inventory_deepest_first() {
        let desired: BTreeMap<_, _> = [file("keep", b"k", 0o644)]
            .into_iter()
            .map(|d| (d.id.clone(), d))
            .collect();
        let owned = |p: &str| Owned {
            id: ResourceId::new("files", "file", p),
            target: "files".into(),
            path: RelPath::parse(p).unwrap(),
            declared: p == "keep",
        };
        let inventory = vec![
            owned("keep"),
            owned("a"),
            owned("a/b/c"),
            owned("gone"),
            owned("blocked"),
            owned("unsure"),
        ];
        let mut observed: HashMap<_, _> = inventory
            .iter()
            .map(|o| (o.id.clone(), live_file(b"z", 0o644)))
            .collect();
        observed.insert(
            ResourceId::new("files", "file", "keep"),
            live_file(b"k", 0o644),
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
        let mut in_order = inventory.clone();
        in_order.sort_by(|a, b| a.id.cmp(&b.id));
        let q = plan(
            &desired,
            &|id| *id == blocked,
            &in_order,
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
        assert_eq!(p.in_sync.len(), 1);
        assert!(p.applies.is_empty());
    }
}

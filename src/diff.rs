//! Pure comparison: desired x observed -> the smallest changes, each with the
//! fields that differ. `diff` and `sync` both use this, so a diff is exactly
//! what a sync would do.

mod plan;

use crate::model::{Action, Desired, Field, Live, Observed, Spec};
use crate::ownership;
pub use plan::{plan, Along, Inventory, Observations, Owned, Plan, Planner, Unowned};

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
            if let Some(u) = want.uid.get().filter(|u| u != uid) {
                fields.push(Field::Owner { from: *uid, to: u });
            }
            if let Some(g) = want.gid.get().filter(|g| g != gid) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{blob_id, Change, FileSpec, RelPath, ResourceId, Resources};
    use std::collections::HashMap;

    /// A desired `file` resource at `path`, for tests here and elsewhere.
    pub(crate) fn file(path: &str, content: &[u8], mode: u32) -> Desired {
        Desired::new(
            ResourceId::new("files", "file", path),
            RelPath::parse(path).unwrap().as_str(),
            Spec::File(FileSpec {
                blob: blob_id(content),
                size: content.len() as u64,
                mode,
                uid: None.into(),
                gid: None.into(),
                secret: false,
            }),
            Default::default(),
            false,
            false,
        )
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
            let found = along
                .find(&id(p))
                .map(|(i, d)| (i, d.path_str().to_string()));
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

//! Two declared states compared (`diff --against`): the older one stands
//! where the live state would, so each difference is the change `sync`
//! would make going from one revision to the other, found by the same
//! comparison (`diff::compare`). Besides, what only a declaration has: the
//! hook, owner and group as written, `self_heal`, `sensitive`.

use std::collections::BTreeSet;

use crate::declare::{Declared, WrittenOwner};
use crate::diff::{self, Comparison};
use crate::model::{Action, Change, Desired, Live, Observed, ResourceId, Spec};
use crate::ownership;
use crate::render;

/// A declared field beyond what a target observes, changed or (for a
/// create) set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct More {
    pub name: &'static str,
    /// `owner root -> www-data`, or `owner www-data` for a create.
    pub text: String,
}

/// One resource that differs between the two revisions.
#[derive(Debug)]
pub struct Difference {
    /// `desired` is the newer declaration; `observed` the older one, as
    /// the live state it would be.
    pub change: Change,
    pub more: Vec<More>,
    /// Either side is sensitive: no content, no field values are shown.
    pub sensitive: bool,
}

/// The older declaration as the state a sync would find.
fn as_live(d: &Desired) -> Observed {
    Observed::Present(match &d.spec {
        Spec::File(f) => Live::File {
            blob: f.blob,
            size: f.size,
            mode: f.mode,
            uid: f.uid.get().unwrap_or(0),
            gid: f.gid.get().unwrap_or(0),
        },
        Spec::Symlink { target } => Live::Symlink {
            target: target.clone(),
        },
        Spec::Structured(s) => Live::Structured {
            state: s.spec.clone(),
            version: None,
        },
    })
}

/// A declared value as text shows it (a hook or owner name is the
/// repository's to choose, so quoted as names are).
fn shown(v: &Option<String>, unset: &str) -> String {
    v.as_deref().map_or_else(
        || unset.to_string(),
        |v| render::quote::name(v).into_owned(),
    )
}

/// What a declaration says beyond its spec, as (name, value) pairs; a
/// value left out is `None`.
fn extras(d: &Desired, owner: Option<&WrittenOwner>) -> [(&'static str, Option<String>); 5] {
    [
        ("owner", owner.and_then(|o| o.owner.clone())),
        ("group", owner.and_then(|o| o.group.clone())),
        ("on_change", d.on_change().map(String::from)),
        ("self_heal", d.self_heal().map(|b| b.to_string())),
        ("sensitive", d.sensitive.then(|| "true".to_string())),
    ]
}

/// The lines of a create that says what the new resource will be.
fn created(d: &Desired, owner: Option<&WrittenOwner>) -> Vec<More> {
    let mut more = Vec::new();
    match &d.spec {
        Spec::File(f) => more.push(More {
            name: "mode",
            text: format!("mode {:04o}", f.mode),
        }),
        Spec::Symlink { target } => more.push(More {
            name: "target",
            text: format!("target {}", render::quote::name(target)),
        }),
        Spec::Structured(_) => {}
    }
    for (name, value) in extras(d, owner) {
        if let Some(v) = value {
            more.push(More {
                name,
                text: format!("{name} {}", render::quote::name(&v)),
            });
        }
    }
    more
}

fn changed(old: &Desired, new: &Desired, owners: [Option<&WrittenOwner>; 2]) -> Vec<More> {
    let (before, after) = (extras(old, owners[0]), extras(new, owners[1]));
    before
        .into_iter()
        .zip(after)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((name, a), (_, b))| {
            let unset = match name {
                "self_heal" => "default",
                "sensitive" => "false",
                _ => "none",
            };
            More {
                name,
                text: format!("{name} {} -> {}", shown(&a, unset), shown(&b, unset)),
            }
        })
        .collect()
}

/// Every difference from `old` to `new`, in identity order.
pub fn compare(old: &Declared, new: &Declared) -> Vec<Difference> {
    let ids: BTreeSet<&ResourceId> = old.resources.keys().chain(new.resources.keys()).collect();
    let mut out = Vec::new();
    for id in ids {
        let owners = [old.owners.get(id), new.owners.get(id)];
        let (action, fields, more, observed) = match (old.resources.get(id), new.resources.get(id))
        {
            (None, Some(n)) => {
                let fields = match diff::compare(n, &Observed::Absent, &[]) {
                    Comparison::Differs { fields, .. } => fields,
                    _ => Vec::new(),
                };
                let more = created(n, owners[1]);
                (Action::Create, fields, more, Observed::Absent)
            }
            (Some(o), None) => (Action::Delete, Vec::new(), Vec::new(), as_live(o)),
            (Some(o), Some(n)) => {
                let before = match &o.spec {
                    Spec::Structured(s) => ownership::managed_fields(&s.spec),
                    _ => Vec::new(),
                };
                let live = as_live(o);
                let fields = match diff::compare(n, &live, &before) {
                    Comparison::Differs { fields, .. } => fields,
                    _ => Vec::new(),
                };
                let more = changed(o, n, owners);
                if fields.is_empty() && more.is_empty() {
                    continue;
                }
                (Action::Update, fields, more, live)
            }
            (None, None) => continue,
        };
        let (o, n) = (old.resources.get(id), new.resources.get(id));
        let at = n.or(o).expect("declared on one side");
        out.push(Difference {
            change: Change {
                id: id.clone(),
                target: at.target().to_string(),
                path: at.path(),
                action,
                fields,
                desired: n.cloned(),
                observed,
            },
            more,
            sensitive: o.is_some_and(|d| d.sensitive) || n.is_some_and(|d| d.sensitive),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::tests::file;
    use crate::model::Field;

    fn declared(files: Vec<Desired>) -> Declared {
        Declared {
            resources: files.into_iter().collect(),
            ..Declared::default()
        }
    }

    #[test]
    fn creates_updates_deletes_and_what_only_a_declaration_has() {
        let mut hooked = file("same", b"s", 0o644);
        hooked.declaration = std::sync::Arc::new(crate::model::Declaration {
            on_change: Some("reload".into()),
            ..Default::default()
        });
        let old = declared(vec![
            file("gone", b"g", 0o644),
            file("mode", b"m", 0o644),
            file("same", b"s", 0o644),
            file("text", b"a\n", 0o644),
        ]);
        let mut new = declared(vec![
            file("mode", b"m", 0o600),
            hooked,
            file("text", b"b\n", 0o644),
            file("new", b"n", 0o755),
        ]);
        new.owners.insert(
            ResourceId::new("files", "file", "new"),
            WrittenOwner {
                owner: Some("www-data".into()),
                group: None,
            },
        );
        let found = compare(&old, &new);
        let summary: Vec<(&str, Action)> = found
            .iter()
            .map(|d| (d.change.path.as_str(), d.change.action))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("gone", Action::Delete),
                ("mode", Action::Update),
                ("new", Action::Create),
                ("same", Action::Update),
                ("text", Action::Update),
            ]
        );
        let texts = |i: usize| {
            found[i]
                .more
                .iter()
                .map(|m| m.text.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            found[1].change.fields,
            vec![Field::Mode {
                from: 0o644,
                to: 0o600
            }]
        );
        assert_eq!(texts(2), vec!["mode 0755", "owner www-data"]);
        assert_eq!(texts(3), vec!["on_change none -> reload"]);
        assert!(found[3].change.fields.is_empty());
        assert_eq!(found[4].change.fields, vec![Field::Content]);
        assert!(compare(&old, &old).is_empty());
    }

    #[test]
    fn either_side_sensitive_hides_the_content() {
        let mut secret = file("token", b"old", 0o600);
        secret.sensitive = true;
        let old = declared(vec![secret]);
        let new = declared(vec![file("token", b"new", 0o600)]);
        let found = compare(&old, &new);
        assert!(found[0].sensitive);
        assert_eq!(found[0].more[0].text, "sensitive true -> false");
    }
}

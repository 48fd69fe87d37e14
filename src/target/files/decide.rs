//! Deciding the smallest change: given the plan and what stands at the path
//! now, nothing, an in-place chmod or chown, a replacement, or a refusal.

use crate::model::{Action, Change, Field, Live, Spec};

/// Attributes to set in place; `None` leaves one as it is.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Attrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    Nothing,
    Attrs(Attrs),
    /// A new object renamed over whatever stands there.
    Replace,
    /// A transient refusal, with its reason.
    Refuse(String),
}

/// What to do, given what stands at the path now. Only the fields the plan
/// names are touched (a create names them all), and a field that already
/// matches is left alone, so a repeated apply writes nothing.
pub(super) fn decide(change: &Change, spec: &Spec, live: Option<&Live>) -> Step {
    let every = change.action == Action::Create;
    let asks = |want: fn(&Field) -> bool| every || change.fields.iter().any(want);
    let path = &change.path;
    let rewrite = match spec {
        Spec::File(_) => asks(|f| matches!(f, Field::Content | Field::Type { .. })),
        Spec::Symlink { .. } => {
            asks(|f| matches!(f, Field::LinkTarget { .. } | Field::Type { .. }))
        }
        Spec::Structured(s) => {
            return Step::Refuse(format!(
                "{path}: kind {} is not served by a files target",
                s.kind
            ))
        }
    };
    match (spec, live) {
        (
            Spec::File(f),
            Some(Live::File {
                blob,
                mode,
                uid,
                gid,
                ..
            }),
        ) => {
            if *blob != f.blob && rewrite {
                return Step::Replace;
            }
            let attrs = Attrs {
                mode: Some(f.mode & 0o7777)
                    .filter(|m| asks(|x| matches!(x, Field::Mode { .. })) && m != mode),
                uid: f
                    .uid
                    .get()
                    .filter(|u| asks(|x| matches!(x, Field::Owner { .. })) && u != uid),
                gid: f
                    .gid
                    .get()
                    .filter(|g| asks(|x| matches!(x, Field::Group { .. })) && g != gid),
            };
            if attrs == Attrs::default() {
                Step::Nothing
            } else {
                Step::Attrs(attrs)
            }
        }
        (Spec::Symlink { target }, Some(Live::Symlink { target: now })) if now == target => {
            Step::Nothing
        }
        (_, Some(Live::Directory { empty: false })) if rewrite => Step::Refuse(format!(
            "{path}: a directory holding unmanaged files stands where a {} belongs; \
             nothing was deleted, a human has to move it",
            spec.kind()
        )),
        _ if rewrite => Step::Replace,
        _ if change.fields.is_empty() || matches!(spec, Spec::Symlink { .. }) => Step::Nothing,
        (_, None) => Step::Refuse(format!("{path}: vanished since it was observed")),
        (_, Some(other)) => Step::Refuse(format!(
            "{path}: is a {} now, not what was observed",
            other.type_name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{blob_id, FileSpec};
    use crate::model::{Observed, RelPath, ResourceId};

    fn change(action: Action, fields: Vec<Field>) -> Change {
        let path = RelPath::parse("a/b").unwrap();
        Change {
            id: ResourceId::new("files", "file", "a/b"),
            target: "files".into(),
            path,
            action,
            fields,
            desired: None,
            observed: Observed::Absent,
        }
    }

    #[test]
    fn decisions_touch_only_named_fields() {
        let spec = FileSpec {
            blob: blob_id(b"new"),
            size: 3,
            mode: 0o600,
            uid: Some(7).into(),
            gid: None.into(),
            secret: false,
        };
        let live = Live::File {
            blob: blob_id(b"old"),
            size: 3,
            mode: 0o644,
            uid: 0,
            gid: 0,
        };
        let file = Spec::File(spec.clone());
        let mode_only = change(
            Action::Update,
            vec![Field::Mode {
                from: 0o644,
                to: 0o600,
            }],
        );
        assert_eq!(
            decide(&mode_only, &file, Some(&live)),
            Step::Attrs(Attrs {
                mode: Some(0o600),
                ..Attrs::default()
            })
        );
        assert_eq!(
            decide(
                &change(Action::Update, vec![Field::Content]),
                &file,
                Some(&live)
            ),
            Step::Replace
        );
        assert_eq!(
            decide(
                &change(Action::Create, vec![]),
                &file,
                Some(&Live::File {
                    blob: spec.blob,
                    size: 3,
                    mode: 0o644,
                    uid: 0,
                    gid: 0
                })
            ),
            Step::Attrs(Attrs {
                mode: Some(0o600),
                uid: Some(7),
                gid: None
            })
        );
        assert_eq!(
            decide(&change(Action::Update, vec![]), &file, Some(&live)),
            Step::Nothing
        );
        assert!(matches!(
            decide(&change(Action::Create, vec![]), &file, Some(&Live::Directory { empty: false })),
            Step::Refuse(reason) if reason.contains("unmanaged")
        ));
        assert!(matches!(decide(&mode_only, &file, None), Step::Refuse(_)));
        let link = Spec::Symlink { target: "x".into() };
        assert_eq!(
            decide(
                &change(Action::Create, vec![]),
                &link,
                Some(&Live::Symlink { target: "x".into() })
            ),
            Step::Nothing
        );
        assert_eq!(
            decide(&change(Action::Create, vec![]), &link, Some(&live)),
            Step::Replace
        );
    }
}

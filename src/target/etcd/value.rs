//! What an etcd key's value means to tend: a plain value is content, named
//! by its blob id like a file's; a `json:` value is a structured object
//! whose declared fields alone are tend's (src/ownership.rs). Both ways:
//! live bytes into an observation, a change into the bytes to put.

use crate::model::{blob_id, Change, ContentSource, Live, Observed, Spec, VALUE_MODE};
use crate::ownership;
use crate::target::TargetError;

/// A key as the range read returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// The observation of a key, read as its declaration reads it (`spec`;
/// `None` for an inventory member being pruned).
pub fn observe(seen: Option<&Seen>, spec: Option<&Spec>) -> Observed {
    let Some(seen) = seen else {
        return Observed::Absent;
    };
    match spec {
        Some(Spec::Structured(_)) => match serde_json::from_slice::<serde_json::Value>(&seen.value)
        {
            Ok(state) if state.is_object() => Observed::Present(Live::Structured {
                state,
                version: Some(seen.mod_revision.to_string()),
            }),
            _ => Observed::Present(Live::Other("a value that is not a JSON object".into())),
        },
        _ => Observed::Present(Live::File {
            blob: blob_id(&seen.value),
            size: seen.value.len() as u64,
            mode: VALUE_MODE,
            uid: 0,
            gid: 0,
        }),
    }
}

/// Whether `seen` is still what `observed` was made from: the write may
/// then compare its revision. Otherwise the key changed since the plan.
pub fn still(observed: &Observed, seen: &Seen) -> bool {
    match observed {
        Observed::Present(Live::Structured { version, .. }) => {
            version.as_deref() == Some(seen.mod_revision.to_string().as_str())
        }
        Observed::Present(Live::File { blob, .. }) => *blob == blob_id(&seen.value),
        Observed::Present(Live::Other(_)) => true,
        _ => false,
    }
}

/// The bytes to put for a create or update. A plain value's bytes are its
/// blob's: an inline `value:` or the repository file a `source:` names
/// (where a decrypted source would be read instead). A structured value is
/// the live object with the change's fields patched in, so fields others
/// own survive.
pub fn desired(change: &Change, content: &dyn ContentSource) -> Result<Vec<u8>, TargetError> {
    let terminal = |why: String| TargetError::Terminal(format!("{}: {why}", change.id));
    let Some(d) = change.desired.as_ref() else {
        return Err(terminal("a write without a desired state".into()));
    };
    match &d.spec {
        Spec::File(f) => content
            .read(f.blob)
            .map_err(|e| terminal(format!("cannot read its value: {e}"))),
        Spec::Structured(s) => {
            let live = match &change.observed {
                Observed::Present(Live::Structured { state, .. }) => state.clone(),
                _ => serde_json::json!({}),
            };
            // A value that was no JSON object is replaced whole.
            let fields = match &change.observed {
                Observed::Present(Live::Structured { .. }) => change.fields.clone(),
                _ => ownership::compare(&s.spec, &serde_json::json!({}), &s.ignore, &[]),
            };
            let state = ownership::apply_patch(&live, &ownership::to_patch(&fields))
                .map_err(|e| terminal(e.to_string()))?;
            Ok(serde_json::to_vec(&state).expect("JSON serializes"))
        }
        Spec::Symlink { .. } => Err(terminal("a symlink is not an etcd key".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, Desired, RelPath, ResourceId, StructuredSpec};
    use serde_json::json;

    struct NoContent;
    impl ContentSource for NoContent {
        fn read(&self, _: git2::Oid) -> std::io::Result<Vec<u8>> {
            Err(std::io::Error::other("none"))
        }
    }

    #[test]
    fn undeclared_and_ignored_fields_survive_a_structured_write() {
        let spec = StructuredSpec {
            kind: "key".into(),
            name: "flags".into(),
            spec: json!({"a": 2, "nested": {"x": true}}),
            ignore: vec!["/spec/b".into()],
        };
        let seen = Seen {
            value: br#"{"a": 1, "b": "theirs", "c": [1]}"#.to_vec(),
            mod_revision: 7,
        };
        let structured = Spec::Structured(Box::new(spec.clone()));
        let observed = observe(Some(&seen), Some(&structured));
        let Observed::Present(Live::Structured { state, .. }) = &observed else {
            panic!("{observed:?}")
        };
        assert!(still(&observed, &seen));
        let fields = ownership::compare(&spec.spec, state, &spec.ignore, &[]);
        let id = ResourceId::new("kv", "key", "flags");
        let change = Change {
            id: id.clone(),
            target: "kv".into(),
            path: RelPath::parse("flags").unwrap(),
            action: Action::Update,
            fields,
            desired: Some(Desired::new(
                id,
                RelPath::parse("flags").unwrap().as_str(),
                structured,
                Default::default(),
                false,
                false,
            )),
            observed,
        };
        let put: serde_json::Value =
            serde_json::from_slice(&desired(&change, &NoContent).unwrap()).unwrap();
        assert_eq!(
            put,
            json!({"a": 2, "b": "theirs", "c": [1], "nested": {"x": true}})
        );
    }

    #[test]
    fn a_changed_value_is_not_what_was_observed() {
        let seen = Seen {
            value: b"one".to_vec(),
            mod_revision: 3,
        };
        let observed = observe(Some(&seen), None);
        let later = Seen {
            value: b"two".to_vec(),
            mod_revision: 4,
        };
        assert!(still(&observed, &seen));
        assert!(!still(&observed, &later));
        assert_eq!(observe(None, None), Observed::Absent);
    }
}

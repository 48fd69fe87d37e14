//! Field ownership: what is compared, what is left alone, what is removed,
//! and the law that applying the patch leaves nothing to do.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn pointers(fields: &[Field]) -> Vec<(&str, Option<&Value>, Option<&Value>)> {
    fields
        .iter()
        .map(|f| match f {
            Field::Json { pointer, from, to } => (pointer.as_str(), from.as_ref(), to.as_ref()),
            other => panic!("not a JSON field: {other:?}"),
        })
        .collect()
}

#[test]
fn only_declared_fields_are_compared() {
    let spec = json!({"replicas": 3, "labels": {"team": "web"}});
    let live = json!({"replicas": 3, "labels": {"team": "web", "added": "by-ops"}, "extra": 1});
    assert!(compare(&spec, &live, &[], &[]).is_empty());
    let live = json!({"replicas": 2, "labels": {}});
    let f = compare(&spec, &live, &[], &[]);
    assert_eq!(
        pointers(&f),
        vec![
            ("/spec/labels/team", None, Some(&json!("web"))),
            ("/spec/replicas", Some(&json!(2)), Some(&json!(3))),
        ]
    );
}

#[test]
fn numbers_compare_by_value_and_arrays_are_atomic() {
    assert!(same(&json!(3), &json!(3.0)));
    assert!(!same(&json!(3), &json!("3")));
    let spec = json!({"ports": [80, 443]});
    assert!(compare(&spec, &json!({"ports": [80.0, 443]}), &[], &[]).is_empty());
    let f = compare(&spec, &json!({"ports": [80, 443, 8080]}), &[], &[]);
    assert_eq!(
        pointers(&f),
        vec![(
            "/spec/ports",
            Some(&json!([80, 443, 8080])),
            Some(&json!([80, 443]))
        )]
    );
}

#[test]
fn ignored_fields_are_stripped_and_never_removed() {
    let ignore = vec!["/spec/replicas".to_string()];
    let spec = strip_ignored(&json!({"replicas": 3, "image": "v1"}), &ignore);
    assert_eq!(spec, json!({"image": "v1"}));
    let before = vec!["/spec/replicas".to_string(), "/spec/image".to_string()];
    let live = json!({"replicas": 9, "image": "v1"});
    assert!(compare(&spec, &live, &ignore, &before).is_empty());
}

#[test]
fn fields_dropped_from_the_declaration_are_removed_others_stay() {
    let before: Vec<String> = ["/spec/a", "/spec/b/c", "/spec/gone"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let spec = json!({"a": 1});
    let live = json!({"a": 1, "b": {"c": 2, "d": 3}, "never": 4});
    let f = compare(&spec, &live, &[], &before);
    // /spec/gone is no longer live: nothing to remove there.
    assert_eq!(pointers(&f), vec![("/spec/b/c", Some(&json!(2)), None)]);
    // A field still covered by the declaration is not removed.
    let spec = json!({"b": 5});
    let f = compare(&spec, &live, &[], &before);
    assert_eq!(
        pointers(&f),
        vec![
            ("/spec/b", Some(&json!({"c": 2, "d": 3})), Some(&json!(5))),
            ("/spec/a", Some(&json!(1)), None),
        ]
    );
}

#[test]
fn pointers_escape_and_validate() {
    let spec = json!({"a/b": {"c~d": 1}});
    assert_eq!(managed_fields(&spec), vec!["/spec/a~1b/c~0d"]);
    assert_eq!(
        tokens("/spec/a~1b/c~0d").unwrap(),
        vec!["spec", "a/b", "c~d"]
    );
    assert!(tokens("spec").is_err());
    assert!(tokens("/a~2").is_err());
    assert!(check_ignore("/spec/replicas").is_ok());
    assert!(check_ignore("/spec").is_err());
    assert!(check_ignore("/status/x").is_err());
    let f = compare(&spec, &json!({"a/b": {"c~d": 2}}), &[], &[]);
    let patch = to_patch(&f);
    assert_eq!(
        patch,
        vec![json!({"op": "replace", "path": "/a~1b/c~0d", "value": 1})]
    );
}

/// RFC 6902 add/replace/remove over objects, as a plugin applies them.
fn apply(doc: &Value, patch: &[Value]) -> Value {
    super::apply_patch(doc, patch).expect("a patch of to_patch applies")
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..4).prop_map(Value::from),
        "[ab]".prop_map(Value::from),
        Just(json!([1, 2])),
    ]
}

fn object() -> impl Strategy<Value = Value> {
    let key = prop_oneof![Just("a"), Just("b"), Just("c/d"), Just("e")];
    let inner = prop::collection::btree_map(key.clone().prop_map(String::from), leaf(), 0..3)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    let member = prop_oneof![leaf(), inner];
    prop::collection::btree_map(key.prop_map(String::from), member, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    /// Applying the plan makes the next plan empty, and fields tend never
    /// set survive it.
    #[test]
    fn applying_the_patch_converges(
        declared in object(),
        live in object(),
        earlier in object(),
        ignore_b in any::<bool>(),
    ) {
        let ignore: Vec<String> = if ignore_b { vec!["/spec/b".into()] } else { vec![] };
        let spec = strip_ignored(&declared, &ignore);
        let before = managed_fields(&earlier);
        let fields = compare(&spec, &live, &ignore, &before);
        let after = apply(&live, &to_patch(&fields));
        prop_assert!(compare(&spec, &after, &ignore, &before).is_empty());
        // Every live field neither declared nor set before is untouched.
        let now = managed_fields(&spec);
        for p in managed_fields(&live) {
            let owned = now.iter().chain(before.iter()).any(|q| covers(q, &p) || covers(&p, q));
            if !owned {
                let at = |v: &Value| json!({"spec": v}).pointer(&p).cloned();
                prop_assert_eq!(at(&live), at(&after), "{} changed", p);
            }
        }
    }
}

//! Structured declarations (plugin kinds) read from real Git repositories:
//! identities, ignored fields, target selection, and every misuse reported
//! with its file and line.

use serde_json::json;

use super::tests::snapshot_of;
use super::*;
use crate::model::Spec;
use crate::test_repo::TestRepo;

fn targets(plugin_kinds: Result<Vec<&str>, &str>) -> Vec<TargetInfo> {
    vec![
        TargetInfo {
            name: "files".into(),
            kinds: vec!["file".into(), "symlink".into()],
            kinds_unknown: None,
        },
        TargetInfo {
            name: "app".into(),
            kinds: plugin_kinds
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(String::from)
                .collect(),
            kinds_unknown: plugin_kinds.err().map(String::from),
        },
    ]
}

fn run(repo: &TestRepo, targets: &[TargetInfo]) -> Declared {
    let fx = snapshot_of(repo);
    let hooks = vec!["reload".to_string()];
    let opts = Options::plain("", false, targets, &hooks);
    declare(&fx.snapshot, &opts).unwrap()
}

#[test]
fn structured_resources_get_identities_and_lose_ignored_fields() {
    let repo = TestRepo::new();
    repo.write(
        "app.tend.yaml",
        "kind: section\nname: web\nspec:\n  workers: 4\n  replicas: 2\n  labels: {team: a, tier: b}\nignore: [/spec/replicas, /spec/labels/tier]\n---\nkind: section\nname: empty\n",
    );
    repo.commit("init");
    let d = run(&repo, &targets(Ok(vec!["section"])));
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let web = &d.resources[&ResourceId::new("app", "section", "web")];
    match &web.spec {
        Spec::Structured(s) => {
            assert_eq!(s.spec, json!({"workers": 4, "labels": {"team": "a"}}));
            assert_eq!(s.ignore, vec!["/spec/replicas", "/spec/labels/tier"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(web.path_str(), "section/web");
    let empty = &d.resources[&ResourceId::new("app", "section", "empty")];
    assert!(matches!(&empty.spec, Spec::Structured(s) if s.spec == json!({})));
}

#[test]
fn misuse_is_reported_with_file_and_line() {
    let repo = TestRepo::new();
    repo.write(
        "bad.tend.yaml",
        "kind: section\nspec: {a: 1}\n---\nkind: section\nname: a\nspec: [1, 2]\n---\nkind: section\nname: b\nignore: [replicas]\n---\nkind: section\nname: c\npath: etc/c\n---\nkind: file\npath: etc/x\nname: x\ncontent: y\n---\nkind: section\nname: d/e\n---\nkind: a/b\nname: f\n---\nkind: widget\nname: g\n---\nkind: section\nname: h\non_change: missing\n",
    );
    repo.commit("bad");
    let d = run(&repo, &targets(Ok(vec!["section"])));
    let shown: Vec<String> = d.problems.iter().map(|p| p.to_string()).collect();
    let has = |line: usize, needle: &str| {
        shown
            .iter()
            .any(|s| s.starts_with(&format!("bad.tend.yaml:{line}:")) && s.contains(needle))
    };
    assert!(has(1, "needs `name`"), "{shown:?}");
    assert!(has(4, "`spec` must be a mapping"), "{shown:?}");
    assert!(has(8, "must start with `/`"), "{shown:?}");
    assert!(
        has(12, "`path` does not apply to kind section"),
        "{shown:?}"
    );
    assert!(has(16, "`name` does not apply to kind file"), "{shown:?}");
    assert!(has(21, "may not be"), "{shown:?}");
    assert!(has(24, "unknown kind \"a/b\""), "{shown:?}");
    assert!(
        has(
            27,
            "unknown kind \"widget\": no configured target serves it"
        ),
        "{shown:?}"
    );
    assert!(has(30, "missing"), "{shown:?}");
    assert!(d.resources.is_empty(), "{:?}", d.resources);
    assert!(d
        .blocked
        .contains_key(&ResourceId::new("app", "section", "h")));
}

#[test]
fn a_plugin_whose_kinds_are_unknown_still_gets_its_declarations() {
    let repo = TestRepo::new();
    repo.write(
        "app.tend.yaml",
        "kind: section\nname: web\nspec: {a: 1}\n---\nkind: file\npath: etc/x\ncontent: y\n",
    );
    repo.commit("init");
    let d = run(&repo, &targets(Err("the plugin exited (exit status: 3)")));
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert!(d
        .resources
        .contains_key(&ResourceId::new("app", "section", "web")));
    assert!(d
        .resources
        .contains_key(&ResourceId::new("files", "file", "etc/x")));
    // With two silent plugins the choice is not guessed.
    let mut two = targets(Err("down"));
    two.push(TargetInfo {
        name: "other".into(),
        kinds: vec![],
        kinds_unknown: Some("down too".into()),
    });
    let d = run(&repo, &two);
    assert!(
        d.problems[0]
            .message
            .contains("name one of app (down), other (down too)"),
        "{:?}",
        d.problems
    );
}

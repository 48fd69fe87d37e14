//! Exec plugins driven through the real binary: the conformance checker
//! against the reference plugins and deliberately broken ones, and `tend
//! sync` through a plugin whose process misbehaves.

mod util;

use std::path::{Path, PathBuf};

use util::plugins::{check, plugin, workers, Workers};
use util::Env;

#[test]
fn the_checker_passes_the_settings_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("settings.json");
    std::fs::write(&doc, "{\"other\": {\"kept\": true}}\n").unwrap();
    let r = check(&[&plugin("settings"), "--file", doc.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    for name in [
        "initialize",
        "observe absent",
        "apply create",
        "observe equals desired",
        "second reconcile is a no-op",
        "undeclared field survives",
        "delete",
        "garbage input gets an error",
        "shutdown",
    ] {
        assert!(r.stdout.contains(&format!("ok   {name}:")), "{name}: {r:?}");
    }
    assert!(!r.stdout.contains("FAIL"), "{r:?}");
    // The checker leaves the store as it found it.
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&doc).unwrap()).unwrap();
    assert_eq!(after, serde_json::json!({"other": {"kept": true}}));
}

#[test]
fn the_checker_passes_the_replicas_plugin_and_leaves_no_worker() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("replicas");
    let _guard = Workers(store.clone());
    let r = check(&[
        &plugin("replicas"),
        "--dir",
        store.to_str().unwrap(),
        "--",
        "sleep",
        "300",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("all 10 checks passed"), "{r:?}");
    assert!(workers(&store, "tend-conformance-check").is_empty());
    assert!(!store.join("tend-conformance-check").exists());
}

#[test]
fn the_checker_fails_a_plugin_that_writes_on_every_apply() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("flags.json");
    let r = check(&[
        &plugin("faulty"),
        "--store",
        store.to_str().unwrap(),
        "--fault",
        "always-writes",
        "--on",
        "apply",
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.contains("FAIL second reconcile is a no-op: an apply that changed nothing moved the version from 1 to 2: the plugin writes on every apply"),
        "{r:?}"
    );
    assert!(r.stdout.contains("1 of "), "{r:?}");
}

#[test]
fn the_checker_fails_a_plugin_that_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("flags.json");
    let r = check(&[
        &plugin("faulty"),
        "--store",
        store.to_str().unwrap(),
        "--fault",
        "crash",
        "--on",
        "apply",
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout
            .contains("FAIL apply create: `apply`: the plugin exited (exit status: 3)"),
        "{r:?}"
    );
    assert!(r.stdout.contains("skip shutdown"), "{r:?}");
}

#[test]
fn the_checker_names_a_protocol_version_mismatch_and_a_missing_binary() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("flags.json");
    let r = check(&[
        &plugin("faulty"),
        "--store",
        store.to_str().unwrap(),
        "--fault",
        "bad-version",
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout
            .contains("speaks protocol version 99; this tend speaks version 1"),
        "{r:?}"
    );
    let r = check(&[dir.path().join("no-such-plugin").to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("FAIL start: cannot start"), "{r:?}");
}

/// A repository with a section for the settings plugin and a file.
fn settings_env(section: &str) -> (Env, PathBuf, PathBuf) {
    let env = Env::new();
    env.repo.write("app.tend.yaml", section).write(
        "motd.tend.yaml",
        "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n",
    );
    env.repo.commit("init");
    let doc = env.state.path().join("settings.json");
    // No test here makes the plugin hang: the timeout only has to be long
    // enough for a slow machine.
    let cfg = env.config(&format!(
        "targets:\n  app: {{type: exec, command: [{}, --file, {}], timeout: 15s}}\n",
        plugin("settings"),
        doc.display()
    ));
    (env, cfg, doc)
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &serde_json::Value) {
    std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

#[test]
fn ownership_ignored_fields_are_left_to_their_owner_and_declared_ones_reverted() {
    let (env, cfg, doc) = settings_env(
        "kind: section\nname: web\nspec:\n  workers: 4\n  log_level: info\n  replicas: 2\nignore: [/spec/replicas]\n",
    );
    let c = cfg.to_str().unwrap();
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    // An ignored field is never written, not even at creation.
    assert_eq!(
        read_json(&doc),
        serde_json::json!({"web": {"workers": 4, "log_level": "info"}})
    );
    assert_eq!(env.read("etc/motd"), "hello\n");

    // Another writer (an autoscaler) sets the ignored field, and a program
    // adds a field tend never declared.
    let mut v = read_json(&doc);
    v["web"]["replicas"] = 7.into();
    v["web"]["added_by_ops"] = "yes".into();
    write_json(&doc, &v);
    let d = env.tend(&["diff", "-c", c]);
    assert_eq!(d.code, 0, "nothing to do: {d:?}");
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(read_json(&doc), v, "an ignored field is never reverted");
    let st = env.tend(&["status", "-c", c]);
    assert_eq!(st.code, 0, "{st:?}");
    assert_eq!(env.resource("app/section/web").unwrap()["state"], "InSync");

    // The same kind of change to a declared field is reverted, and only it.
    v["web"]["workers"] = 9.into();
    write_json(&doc, &v);
    let d = env.tend(&["diff", "-c", c]);
    assert_eq!(d.code, 1, "{d:?}");
    assert_eq!(
        d.stdout, "app/section/web: /spec/workers: 9 -> 4\n",
        "{d:?}"
    );
    let j = env.tend(&["diff", "-c", c, "-o", "json"]);
    let j: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(
        j["changes"][0]["fields"],
        serde_json::json!(["/spec/workers"])
    );
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        read_json(&doc),
        serde_json::json!({"web": {"workers": 4, "log_level": "info", "replicas": 7, "added_by_ops": "yes"}})
    );
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(last["id"], "app/section/web");
    assert_eq!(last["why"], serde_json::json!(["/spec/workers"]));
    assert!(last["backup"].is_string(), "{last}");

    // A field dropped from the declaration is removed; fields tend never
    // set stay.
    env.repo.write(
        "app.tend.yaml",
        "kind: section\nname: web\nspec:\n  workers: 4\nignore: [/spec/replicas]\n",
    );
    env.repo.commit("drop log_level");
    let d = env.tend(&["diff", "-c", c]);
    assert_eq!(
        d.stdout, "app/section/web: /spec/log_level: \"info\" -> absent\n",
        "{d:?}"
    );
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        read_json(&doc),
        serde_json::json!({"web": {"workers": 4, "replicas": 7, "added_by_ops": "yes"}})
    );
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("0 applied"),
        "a converged object is left alone: {r:?}"
    );
}

#[test]
fn a_structured_resource_no_longer_declared_is_deleted_and_others_stay() {
    let (env, cfg, doc) = settings_env(
        "kind: section\nname: web\nspec: {workers: 4}\n---\nkind: section\nname: db\nspec: {pool: 10}\n",
    );
    let c = cfg.to_str().unwrap();
    std::fs::write(&doc, "{\"unmanaged\": {\"x\": 1}}").unwrap();
    assert_eq!(env.tend(&["sync", "-c", c]).code, 0);
    env.repo.write(
        "app.tend.yaml",
        "kind: section\nname: web\nspec: {workers: 4}\n",
    );
    env.repo.commit("drop db");
    let d = env.tend(&["diff", "-c", c]);
    assert_eq!(d.stdout, "app/section/db: delete\n", "{d:?}");
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        read_json(&doc),
        serde_json::json!({"web": {"workers": 4}, "unmanaged": {"x": 1}})
    );
}

#[test]
fn a_declaration_cannot_choose_a_command() {
    let (env, cfg, _doc) = settings_env(
        "kind: section\nname: web\nspec: {workers: 4}\ncommand: [/bin/sh, -c, \"touch /tmp/pwned\"]\n",
    );
    let r = env.tend(&["validate", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("app.tend.yaml:"), "{r:?}");
    assert!(r.stdout.contains("unknown field `command`"), "{r:?}");
}

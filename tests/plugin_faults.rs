//! A plugin that hangs, crashes or prints garbage: its resources are
//! `Unknown` with a reason, nothing is written through it, and the other
//! targets keep working. A plugin speaking another protocol version is a
//! clear error at start.

mod util;

use std::time::{Duration, Instant};

use util::plugins::plugin;
use util::Env;

/// A repository declaring one flag for the faulty plugin and one file.
fn env_with(fault: &str, on: &str) -> (Env, std::path::PathBuf, std::path::PathBuf) {
    let env = Env::new();
    env.repo
        .write(
            "flags.tend.yaml",
            "kind: flag\nname: beta\nspec: {on: true}\n",
        )
        .write(
            "motd.tend.yaml",
            "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n",
        );
    env.repo.commit("init");
    let store = env.state.path().join("flags.json");
    // A short timeout only where the plugin hangs (the tests name it in the
    // reason); a plugin that answers, crashes or prints garbage must not
    // be cut off on a slow machine.
    let timeout = if fault == "hang" { "2s" } else { "15s" };
    let cfg = env.config(&format!(
        "targets:\n  flags: {{type: exec, command: [{}, --store, {}, --fault, {fault}, --on, {on}], timeout: {timeout}}}\n",
        plugin("faulty"),
        store.display()
    ));
    (env, cfg, store)
}

fn assert_unknown_and_nothing_written(fault: &str, on: &str, reason: &str) {
    let (env, cfg, store) = env_with(fault, on);
    let c = cfg.to_str().unwrap();
    let started = Instant::now();
    let r = env.tend(&["sync", "-c", c]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a {fault} plugin must not stall tend: {:?}",
        started.elapsed()
    );
    assert_eq!(r.code, 3, "not converged: {r:?}");
    // The other target still works.
    assert_eq!(env.read("etc/motd"), "hello\n");
    assert_eq!(
        env.resource("files/file/etc/motd").unwrap()["state"],
        "InSync"
    );
    let flag = env.resource("flags/flag/beta").unwrap();
    assert_eq!(flag["state"], "Unknown", "{flag}");
    let why = flag["reason"].as_str().unwrap();
    assert!(
        why.contains("plugin flags") && why.contains(reason),
        "{why}"
    );
    // Nothing was written through the plugin, and no write was recorded.
    assert!(!store.exists(), "the plugin's store must stay untouched");
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    assert!(!audit.contains("flags/flag/beta"), "{audit}");
    assert!(audit.contains("files/file/etc/motd"), "{audit}");
    // diff reports it as unobservable, and exits 2.
    let d = env.tend(&["diff", "-c", c]);
    assert_eq!(d.code, 2, "{d:?}");
    assert!(
        d.stderr.contains("flags/flag/beta: could not observe"),
        "{d:?}"
    );
}

#[test]
fn a_plugin_that_hangs_on_observe_is_unknown_and_nothing_is_written() {
    assert_unknown_and_nothing_written("hang", "observe", "no answer to `observe` within 2s");
}

#[test]
fn a_plugin_that_crashes_on_observe_is_unknown_and_nothing_is_written() {
    assert_unknown_and_nothing_written("crash", "observe", "the plugin exited (exit status: 3)");
}

#[test]
fn a_plugin_that_prints_garbage_is_unknown_and_nothing_is_written() {
    assert_unknown_and_nothing_written("garbage", "observe", "malformed output");
}

#[test]
fn a_plugin_that_crashes_at_start_is_unknown_and_nothing_is_written() {
    assert_unknown_and_nothing_written("crash", "initialize", "exit status: 3");
}

#[test]
fn a_plugin_that_hangs_at_start_is_unknown_and_nothing_is_written() {
    assert_unknown_and_nothing_written("hang", "initialize", "no answer to `initialize`");
}

#[test]
fn a_plugin_that_crashes_on_apply_fails_the_resource_and_is_retried() {
    let (env, cfg, store) = env_with("crash", "apply");
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 3, "{r:?}");
    let flag = env.resource("flags/flag/beta").unwrap();
    assert_eq!(flag["state"], "Failed", "{flag}");
    assert!(flag["next_retry"].is_string(), "{flag}");
    assert!(
        flag["reason"].as_str().unwrap().contains("exit status: 3"),
        "{flag}"
    );
    assert!(!store.exists());
    assert_eq!(env.read("etc/motd"), "hello\n");
}

#[test]
fn a_protocol_version_mismatch_is_a_clear_error_at_start() {
    let (env, cfg, store) = env_with("bad-version", "initialize");
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("target flags: plugin \"faulty\" speaks protocol version 99; this tend speaks version 1"),
        "{r:?}"
    );
    assert!(!store.exists());
    assert!(
        !env.at("etc/motd").exists(),
        "nothing is applied before the error"
    );
}

#[test]
fn a_healthy_faulty_plugin_converges_and_a_second_sync_writes_nothing() {
    // Without a fault the test plugin is correct: this pins that the
    // failures above come from the faults, not from the set-up.
    let (env, cfg, store) = env_with("none", "nothing");
    let c = cfg.to_str().unwrap();
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&store).unwrap()).unwrap();
    assert_eq!(v["objects"]["beta"], serde_json::json!({"on": true}));
    assert_eq!(v["writes"]["beta"], 1);
    let r = env.tend(&["sync", "-c", c]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&store).unwrap()).unwrap();
    assert_eq!(
        v["writes"]["beta"], 1,
        "a converged object is not written again"
    );
}

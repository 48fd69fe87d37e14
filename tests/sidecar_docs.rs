//! The sidecar examples of docs/sidecar/ say only what tend accepts: every
//! argument of the Kubernetes pod spec's and the compose file's tend
//! containers parses, every TEND_* variable they set is one of tend's, the
//! probes ask tend's health endpoints on its port, and the config files
//! they mount validate. (The compose file also runs, in tests/container.rs.)

mod util;

use std::path::PathBuf;

use serde::Deserialize;
use serde_yaml::Value;
use util::{tend_cmd, Env};

fn doc(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/sidecar")
        .join(rel)
}

/// Every YAML document of a file, merge keys (`<<`) applied.
fn documents(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(doc(rel)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let mut v = Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}"));
            v.apply_merge().unwrap();
            v
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .map(|a| match a {
                    Value::String(s) => s.clone(),
                    other => panic!("not a string argument: {other:?}"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `tend ARGS --help` parses ARGS (values included) before printing help.
fn assert_accepted(what: &str, args: &[String]) {
    let out = tend_cmd().args(args).arg("--help").output().unwrap();
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "{what}: tend refuses {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `tend SUBCOMMAND --help` names the variable.
fn assert_known_variable(what: &str, subcommand: &str, name: &str) {
    let out = tend_cmd().args([subcommand, "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!("[env: {name}=")),
        "{what}: tend {subcommand} knows no variable {name}"
    );
}

/// A config file the examples mount validates with a source beside it.
fn assert_config_validates(what: &str, text: &str) {
    let env = Env::new();
    env.repo.write("index.html", "hello\n");
    env.repo.commit("site");
    let cfg = env.config(text);
    let r = env.tend(&["validate", "--mirror", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{what}: {r:?}");
}

fn is_tend(image: &Value) -> bool {
    image
        .as_str()
        .is_some_and(|i| i.starts_with("tend:") || i.starts_with("${TEND_IMAGE"))
}

#[test]
fn the_pod_spec_gives_tend_only_what_it_accepts() {
    let docs = documents("pod.yaml");
    let pod = docs
        .iter()
        .find(|d| d["kind"] == "Pod")
        .expect("a Pod in pod.yaml");
    let spec = &pod["spec"];
    let mut tend_containers = 0;
    let mut subcommands = Vec::new();
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_sequence().unwrap() {
            if !is_tend(&c["image"]) {
                continue;
            }
            tend_containers += 1;
            let name = c["name"].as_str().unwrap();
            let args = strings(&c["args"]);
            assert_accepted(name, &args);
            subcommands.push((list, args[0].clone()));
            let mut port = 9420;
            for e in c["env"].as_sequence().into_iter().flatten() {
                let var = e["name"].as_str().unwrap();
                if var.starts_with("TEND_") {
                    assert_known_variable(name, &args[0], var);
                }
                if var == "TEND_LISTEN" {
                    let value = e["value"].as_str().unwrap();
                    port = value.rsplit(':').next().unwrap().parse().unwrap();
                }
            }
            for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
                if c[probe].is_null() {
                    continue;
                }
                let get = &c[probe]["httpGet"];
                assert_eq!(get["path"], path, "{name} {probe}");
                assert_eq!(get["port"].as_u64(), Some(port), "{name} {probe}");
            }
        }
    }
    assert_eq!(tend_containers, 2, "an init container and a sidecar");
    assert_eq!(
        subcommands,
        vec![
            ("initContainers", "sync".to_string()),
            ("containers", "run".to_string())
        ],
        "one-time sync first, then the daemon"
    );
    let sidecar = spec["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| is_tend(&c["image"]))
        .unwrap();
    assert!(!sidecar["livenessProbe"].is_null() && !sidecar["readinessProbe"].is_null());

    let config = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|d| d["data"]["tend.yaml"].as_str())
        .expect("the sidecar's tend.yaml in a ConfigMap");
    assert_config_validates("pod.yaml's ConfigMap", config);
}

#[test]
fn the_compose_file_gives_tend_only_what_it_accepts() {
    let compose = documents("compose.yaml").remove(0);
    let mut seen = 0;
    for (name, service) in compose["services"].as_mapping().unwrap() {
        if !is_tend(&service["image"]) {
            continue;
        }
        seen += 1;
        let name = name.as_str().unwrap();
        let args = strings(&service["command"]);
        assert_accepted(name, &args);
        for (var, _) in service["environment"].as_mapping().unwrap() {
            assert_known_variable(name, &args[0], var.as_str().unwrap());
        }
    }
    assert_eq!(seen, 2, "tend-init and the tend sidecar");
    let config = std::fs::read_to_string(doc("tend.yaml")).unwrap();
    assert_config_validates("docs/sidecar/tend.yaml", &config);
}

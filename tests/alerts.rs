//! The alerting rules shipped in config/alerts.yaml (SPEC §12): promtool
//! accepts them; its unit tests (tests/alerts/alerts_test.yaml) see every
//! alert both fire and stay quiet; and each rule reads series a real
//! daemon serves: over what a healthy daemon's /metrics says, no alert
//! fires, and over a daemon with a broken declaration, exactly the
//! declaration alert does.

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;
use util::http::{tool, Metrics};
use util::Env;

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/alerts.yaml")
}

/// Each alert's name, expression and runbook line.
fn rules() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(rules_file()).unwrap();
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    let mut out = Vec::new();
    for group in doc["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let name = rule["alert"].as_str().expect("every rule is an alert");
            let runbook = rule["annotations"]["runbook"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has no runbook line"));
            out.push((
                name.to_string(),
                rule["expr"].as_str().unwrap().to_string(),
                runbook.to_string(),
            ));
        }
    }
    out
}

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("start promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    if tool("promtool", "prometheus").is_none() {
        return;
    }
    let (ok, said) = promtool(&["check", "rules", rules_file().to_str().unwrap()]);
    assert!(ok, "promtool check rules:\n{said}");
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/alerts/alerts_test.yaml");
    let (ok, said) = promtool(&["test", "rules", tests.to_str().unwrap()]);
    assert!(ok, "promtool test rules:\n{said}");
    // Every alert has a case of its own in the unit tests.
    let cases = std::fs::read_to_string(&tests).unwrap();
    for (name, _, _) in rules() {
        assert!(
            cases.contains(&format!("alertname: {name}\n")),
            "{name} has no promtool unit test"
        );
    }
}

/// A series in promtool's input notation: `name{k="v",...}`.
fn series(name: &str, labels: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{name}{{{}}}", inner.join(","))
}

/// A promtool unit test holding `m`'s samples unchanged for 30 minutes on
/// host `web-1` (and its scrape up), expecting at minute 25 only the
/// alerts in `firing` (name, value the summary shows), none of the others.
fn over_real_metrics(m: &Metrics, firing: &[(&str, &str)]) -> String {
    let mut input = String::new();
    let host = [("instance", "web-1"), ("job", "tend")];
    for (name, mut labels, value) in m.samples() {
        for (k, v) in host {
            labels.insert(k.into(), v.into());
        }
        let line = series(&name, &labels).replace('\'', "''");
        input.push_str(&format!(
            "      - series: '{line}'\n        values: '{value}x30'\n"
        ));
    }
    input.push_str(
        "      - series: 'up{instance=\"web-1\",job=\"tend\"}'\n        values: '1x30'\n",
    );
    let mut cases = String::new();
    let summaries = BTreeMap::from([(
        "TendDeclarationProblems",
        "{}: {} problems in the declarations; nothing is pruned meanwhile",
    )]);
    for (name, _, runbook) in rules() {
        cases.push_str(&format!(
            "      - eval_time: 25m\n        alertname: {name}\n"
        ));
        match firing.iter().find(|(n, _)| *n == name) {
            None => cases.push_str("        exp_alerts: []\n"),
            Some((_, value)) => {
                let summary = summaries[name.as_str()]
                    .replacen("{}", "web-1", 1)
                    .replacen("{}", value, 1);
                cases.push_str(&format!(
                    "        exp_alerts:\n          - exp_labels: {{severity: warning, instance: web-1, job: tend}}\n            exp_annotations:\n              summary: {summary:?}\n              runbook: {runbook:?}\n"
                ));
            }
        }
    }
    format!(
        "rule_files:\n  - {:?}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{input}    alert_rule_test:\n{cases}",
        rules_file()
    )
}

fn judged(env: &Env, m: &Metrics, firing: &[(&str, &str)]) -> (bool, String) {
    let file = env.state.path().join("alerts_test.yaml");
    std::fs::write(&file, over_real_metrics(m, firing)).unwrap();
    promtool(&["test", "rules", file.to_str().unwrap()])
}

/// Every tend metric an alert reads is one the daemon serves.
fn assert_served(m: &Metrics) {
    let names: Vec<String> = m.samples().into_iter().map(|(n, _, _)| n).collect();
    for (alert, expr, _) in rules() {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("tend_") {
                assert!(
                    names.iter().any(|n| n == word),
                    "{alert} reads {word}, which the daemon does not serve:\n{}",
                    m.0
                );
            }
        }
    }
}

#[test]
fn over_a_real_daemons_metrics_the_rules_fire_as_they_should() {
    if tool("promtool", "prometheus").is_none() {
        return;
    }
    // Healthy: one file, applied and in sync.
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a\\n\"\n",
    );
    env.repo.commit("a");
    let s = env.serve("", &[]);
    assert!(s.ready(15), "never ready:\n{}", env.daemon_log());
    let m = s.metrics();
    assert_served(&m);
    let (ok, said) = judged(&env, &m, &[]);
    assert!(ok, "an alert fires over a healthy daemon:\n{said}\n{}", m.0);
    // The judgement can fail: the same metrics, expecting an alert.
    let (ok, _) = judged(&env, &m, &[("TendDeclarationProblems", "1")]);
    assert!(!ok, "promtool passes whatever is expected");

    // A broken declaration beside a good one.
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a\\n\"\n---\nkind: file\npath: etc/b\nmode: \"0999\"\ncontent: b\n",
    );
    env.repo.commit("a broken mode");
    let s = env.serve("", &[]);
    assert!(s.ready(15), "never ready:\n{}", env.daemon_log());
    let m = s.metrics();
    assert_eq!(
        m.value("tend_declaration_problems", &[]),
        Some(1.0),
        "{}",
        m.0
    );
    let (ok, said) = judged(&env, &m, &[("TendDeclarationProblems", "1")]);
    assert!(ok, "{said}\n{}", m.0);
}

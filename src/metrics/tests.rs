//! Metrics tests: every SPEC §6 name with HELP and TYPE, label replacement,
//! the per-resource cap, and promtool's verdict on the output.

use super::*;

/// Every metric SPEC §6 names, as it appears in the text format.
const SPEC_NAMES: [&str; 10] = [
    "tend_resources",
    "tend_drifted_resources",
    "tend_drift_oldest_age_seconds",
    "tend_reconcile_total",
    "tend_reconcile_duration_seconds",
    "tend_writes_total",
    "tend_source_fetch_total",
    "tend_source_revision_info",
    "tend_last_converged_timestamp_seconds",
    "tend_queue_depth",
];

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn busy() -> Metrics {
    let m = Metrics::new();
    m.set_resources(&BTreeMap::from([
        ("InSync".into(), 7),
        ("Drifted".into(), 2),
    ]));
    m.set_drifted(2);
    m.set_drift_oldest_age(42.5);
    m.reconcile("applied", 0.02);
    m.reconcile("noop", 0.001);
    m.writes("files", 3);
    m.fetch(true);
    m.fetch(false);
    m.set_revision("0123456789abcdef0123456789abcdef01234567");
    m.set_last_converged(1_700_000_000.0);
    m.set_queue_depth(4);
    m.set_last_successful_fetch(1_700_000_001.0);
    m.hook(true);
    m.set_not_in_sync(&[(
        "files/file/etc/a \"quoted\"\n".into(),
        "Drifted".into(),
        42.5,
    )]);
    m
}

#[test]
fn every_spec_metric_has_help_type_and_a_sample() {
    let text = busy().encode();
    for name in SPEC_NAMES {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "no TYPE for {name}:\n{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with(name) && !l.starts_with('#')),
            "no sample of {name}"
        );
    }
    assert_eq!(
        sample(&text, "tend_resources{state=\"Drifted\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "tend_resources{state=\"Blocked\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "tend_reconcile_total{result=\"applied\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "tend_reconcile_total{result=\"failed\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "tend_reconcile_duration_seconds_count"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "tend_writes_total{target=\"files\"}"),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "tend_source_fetch_total{result=\"error\"}"),
        Some(1.0)
    );
    assert_eq!(sample(&text, "tend_queue_depth"), Some(4.0));
    assert_eq!(sample(&text, "tend_drift_oldest_age_seconds"), Some(42.5));
}

#[test]
fn a_new_revision_replaces_the_old_series() {
    let m = Metrics::new();
    m.set_revision("aaaa");
    m.set_revision("bbbb");
    let text = m.encode();
    assert_eq!(
        sample(&text, "tend_source_revision_info{revision=\"bbbb\"}"),
        Some(1.0)
    );
    assert!(!text.contains("aaaa"), "{text}");
}

#[test]
fn per_resource_series_are_capped_and_keep_the_oldest() {
    let m = Metrics::new();
    let mut rows: Vec<(String, String, f64)> = (0..250)
        .map(|i| (format!("files/file/f{i}"), "Drifted".to_string(), i as f64))
        .collect();
    rows.push(("files/file/fine".into(), "InSync".into(), 1e9));
    m.set_not_in_sync(&rows);
    let text = m.encode();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tend_resource_drift_age_seconds{"))
        .collect();
    assert_eq!(series.len(), MAX_RESOURCE_SERIES);
    assert!(text.contains("id=\"files/file/f249\""));
    assert!(
        !text.contains("id=\"files/file/f149\""),
        "a younger drift kept a series"
    );
    assert!(
        !text.contains("files/file/fine"),
        "an in-sync resource got a series"
    );
    m.set_not_in_sync(&[]);
    assert!(
        !m.encode().contains("tend_resource_drift_age_seconds{"),
        "series outlived their drift"
    );
}

/// Debian's promtool, when installed, judges the output; its absence is
/// reported, not hidden.
#[test]
fn promtool_accepts_the_output() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("SKIPPED: promtool is not installed (apt-get install prometheus)");
            return;
        }
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(busy().encode().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool: {report}"
    );
}

#[test]
fn declaration_problems_have_a_gauge() {
    let m = Metrics::new();
    let text = m.encode();
    assert_eq!(
        sample(&text, "tend_declaration_problems"),
        Some(0.0),
        "{text}"
    );
    m.set_declaration_problems(3);
    assert_eq!(sample(&m.encode(), "tend_declaration_problems"), Some(3.0));
}

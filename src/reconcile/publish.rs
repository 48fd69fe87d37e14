//! Turns the ledger and a pass's report into metrics, so `/metrics`, the
//! status API and `tend status` tell one story.

use std::time::{SystemTime, UNIX_EPOCH};

use super::pass::PassReport;
use crate::ledger::{Ledger, State};
use crate::metrics::Metrics;

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Per-resource results of a pass: noop, applied, failed or blocked.
pub fn pass(metrics: &Metrics, report: &PassReport, seconds_each: f64) {
    for o in report.outcomes.values() {
        let result = match o.state {
            State::InSync if o.applied => "applied",
            State::InSync => "noop",
            State::Blocked => "blocked",
            State::Failed | State::Unknown | State::Contested => "failed",
            _ => "noop",
        };
        metrics.reconcile(result, seconds_each);
    }
    for (target, n) in &report.writes_by_target {
        metrics.writes(target, *n);
    }
    for (_, ok) in &report.hooks {
        metrics.hook(*ok);
    }
    if report.converged {
        metrics.set_last_converged(unix_secs(SystemTime::now()));
    }
}

/// Gauges that come from the ledger: counts per state, drift ages.
pub fn ledger(metrics: &Metrics, ledger: &Ledger) {
    let Ok(doc) = crate::status::build(ledger, SystemTime::now()) else {
        return;
    };
    metrics.set_resources(&doc.counts);
    let drifted: Vec<(String, String, f64)> = doc
        .resources
        .iter()
        .filter(|r| r.state != State::InSync)
        .map(|r| {
            (
                r.id.clone(),
                crate::status::state_name(r.state),
                r.drift_age_seconds.unwrap_or(0) as f64,
            )
        })
        .collect();
    metrics.set_drifted(drifted.len());
    metrics.set_drift_oldest_age(drifted.iter().map(|d| d.2).fold(0.0, f64::max));
    metrics.set_not_in_sync(&drifted);
    if let Some(s) = &doc.source {
        if let Some(rev) = &s.fetched_revision {
            metrics.set_revision(rev);
        }
    }
}

/// A fetch's outcome.
pub fn fetch(metrics: &Metrics, ok: bool) {
    metrics.fetch(ok);
    if ok {
        metrics.set_last_successful_fetch(unix_secs(SystemTime::now()));
    }
}

//! Turns the ledger and a pass's report into metrics, so `/metrics`, the
//! status API and `tend status` tell one story.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ledger::{Ledger, ResourceRecord, State};
use crate::metrics::Metrics;
use crate::reconcile::PassReport;
use crate::status::state_name;

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
    metrics.set_declaration_problems(report.problems.len());
    if report.converged {
        metrics.set_last_converged(unix_secs(SystemTime::now()));
    }
}

/// Gauges that come from the ledger: counts per state, drift ages. Only
/// the records not in sync are read, so this costs what drifts, not what is
/// managed; the figures are those of `tend status`, with the records `kept`
/// in memory (the ledger could not take them) in place of the ledger's.
/// Returns whether any resource is not in sync (then its age grows between
/// passes).
pub fn ledger(metrics: &Metrics, ledger: &Ledger, kept: &[ResourceRecord], failing: bool) -> bool {
    metrics.set_ledger_write_failing(failing);
    let now = SystemTime::now();
    let (Ok(counts), Ok(mut off), Ok(source)) = (
        ledger.state_counts(),
        ledger.resources_not_in_sync(),
        ledger.source(),
    ) else {
        return false;
    };
    let mut by_name: BTreeMap<String, usize> =
        State::ALL.iter().map(|s| (state_name(*s), 0)).collect();
    for (state, n) in counts {
        *by_name.entry(state_name(state)).or_default() += n;
    }
    if !kept.is_empty() {
        let ids: HashSet<&str> = kept.iter().map(|r| r.id.as_str()).collect();
        let older = ledger.resources_of(ids.iter().copied()).unwrap_or_default();
        for r in older {
            let n = by_name.entry(state_name(r.state)).or_default();
            *n = n.saturating_sub(1);
        }
        for r in kept {
            *by_name.entry(state_name(r.state)).or_default() += 1;
        }
        off.retain(|r| !ids.contains(r.id.as_str()));
        off.extend(kept.iter().filter(|r| r.state != State::InSync).cloned());
    }
    metrics.set_resources(&by_name);
    // Oldest drift first, as status lists them.
    off.sort_by(|a, b| match (a.drift_since, b.drift_since) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.id.cmp(&b.id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.id.cmp(&b.id),
    });
    let drifted: Vec<(String, String, f64)> = off
        .into_iter()
        .map(|r| {
            let age = r
                .drift_since
                .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO).as_secs())
                .unwrap_or(0);
            (r.id, state_name(r.state), age as f64)
        })
        .collect();
    metrics.set_drifted(drifted.len());
    metrics.set_drift_oldest_age(drifted.iter().map(|d| d.2).fold(0.0, f64::max));
    metrics.set_not_in_sync(&drifted);
    if let Some(rev) = source.and_then(|s| s.fetched_revision) {
        metrics.set_revision(&rev);
    }
    !drifted.is_empty()
}

/// A fetch's outcome.
pub fn fetch(metrics: &Metrics, ok: bool) {
    metrics.fetch(ok);
    if ok {
        metrics.set_last_successful_fetch(unix_secs(SystemTime::now()));
    }
}

/// Every target's write counter, at zero before the first pass.
pub fn targets<'a>(metrics: &Metrics, names: impl Iterator<Item = &'a String>) {
    for name in names {
        metrics.writes(name, 0);
    }
}

/// A fetched revision the source's trust refused, by reason.
pub fn refused(metrics: &Metrics, reason: &str) {
    metrics.refused(reason);
}

/// Resources waiting in the queue for their time.
pub fn queue(metrics: &Metrics, depth: usize) {
    metrics.set_queue_depth(depth);
}

/// Whether this replica leads, with `ha`.
pub fn ha_leader(metrics: &Metrics, leading: bool) {
    metrics.set_ha_leader(leading);
}

/// Where this host's staged rollout stands: halted, or a revision held.
pub fn rollout(metrics: &Metrics, halted: bool, held: bool) {
    metrics.set_rollout(halted, held);
}

/// Whether this host polls the source for its fleet.
pub fn fleet_poller(metrics: &Metrics, polling: bool) {
    metrics.set_fleet_poller(polling);
}

/// What the mirrors take on disk, read after a fetch (and a collection).
pub fn mirror(metrics: &Metrics, bytes: Option<u64>) {
    if let Some(bytes) = bytes {
        metrics.set_mirror_bytes(bytes);
    }
}

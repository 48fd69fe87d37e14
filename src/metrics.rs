//! The Prometheus metrics tend exposes on `GET /metrics` (SPEC §6): one
//! registry, the families the loop updates, and their text encoding; each
//! family's name and help are registered in `register.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::ledger::State;

mod register;

/// The Content-Type of what [`Metrics::encode`] returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Per-resource series exist only for resources not in sync, and at most this
/// many (the oldest drift first), so a large inventory cannot blow up the
/// series count of whoever scrapes tend.
pub const MAX_RESOURCE_SERIES: usize = 100;

/// The states a resource can be in, named as the status document names them.
fn states() -> [&'static str; 8] {
    State::ALL.map(State::as_str)
}

const RECONCILE_RESULTS: [&str; 4] = ["noop", "applied", "failed", "blocked"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabel {
    target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RevisionLabel {
    revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    provider: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    id: String,
    state: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn result_label(result: &str) -> ResultLabel {
    ResultLabel {
        result: result.to_string(),
    }
}

fn ok_error(ok: bool) -> ResultLabel {
    result_label(if ok { "ok" } else { "error" })
}

pub struct Metrics {
    registry: Registry,
    resources: Family<StateLabel, Gauge>,
    drifted: Gauge,
    drift_oldest_age: FloatGauge,
    reconciles: Family<ResultLabel, Counter>,
    reconcile_duration: Histogram,
    writes: Family<TargetLabel, Counter>,
    fetches: Family<ResultLabel, Counter>,
    refused: Family<ReasonLabel, Counter>,
    revision: Family<RevisionLabel, Gauge>,
    last_converged: FloatGauge,
    queue_depth: Gauge,
    ha_leader: Gauge,
    fleet_poller: Gauge,
    rollout_halted: Gauge,
    rollout_pending: Gauge,
    declaration_problems: Gauge,
    last_successful_fetch: FloatGauge,
    mirror_bytes: Gauge,
    hooks: Family<ResultLabel, Counter>,
    webhooks: Family<WebhookLabel, Counter>,
    not_in_sync: Family<ResourceLabel, FloatGauge>,
    ledger_write_failing: Gauge,
    /// Families whose label sets are replaced (clear, then set) are swapped
    /// under this lock, so a scrape never sees them half-replaced.
    swap: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            resources: Family::default(),
            drifted: Gauge::default(),
            drift_oldest_age: FloatGauge::default(),
            reconciles: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            writes: Family::default(),
            fetches: Family::default(),
            refused: Family::default(),
            revision: Family::default(),
            last_converged: FloatGauge::default(),
            queue_depth: Gauge::default(),
            ha_leader: Gauge::default(),
            fleet_poller: Gauge::default(),
            rollout_halted: Gauge::default(),
            rollout_pending: Gauge::default(),
            declaration_problems: Gauge::default(),
            last_successful_fetch: FloatGauge::default(),
            mirror_bytes: Gauge::default(),
            hooks: Family::default(),
            webhooks: Family::default(),
            not_in_sync: Family::default(),
            ledger_write_failing: Gauge::default(),
            swap: Mutex::new(()),
        };
        m.register()
    }

    /// The registry in the Prometheus text format, version 0.0.4.
    pub fn encode(&self) -> String {
        let _swap = self.swap.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// `tend_resources{state}`: states missing from `counts` read 0.
    pub fn set_resources(&self, counts: &BTreeMap<String, usize>) {
        for state in states() {
            let n = counts.get(state).copied().unwrap_or(0);
            self.resources
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n as i64);
        }
        for (state, n) in counts
            .iter()
            .filter(|(s, _)| !states().contains(&s.as_str()))
        {
            self.resources
                .get_or_create(&StateLabel {
                    state: state.clone(),
                })
                .set(*n as i64);
        }
    }

    pub fn set_drifted(&self, n: usize) {
        self.drifted.set(n as i64);
    }

    pub fn set_drift_oldest_age(&self, secs: f64) {
        self.drift_oldest_age.set(secs);
    }

    /// One reconciliation: `result` is noop, applied, failed or blocked.
    pub fn reconcile(&self, result: &str, seconds: f64) {
        self.reconciles.get_or_create(&result_label(result)).inc();
        self.reconcile_duration.observe(seconds);
    }

    /// Counts `n` writes on `target`; `writes(t, 0)` makes the series exist.
    pub fn writes(&self, target: &str, n: u64) {
        self.writes
            .get_or_create(&TargetLabel {
                target: target.into(),
            })
            .inc_by(n);
    }

    /// A fetched revision refused for `reason`.
    pub fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    pub fn fetch(&self, ok: bool) {
        self.fetches.get_or_create(&ok_error(ok)).inc();
    }

    /// Replaces the revision series: the old revision's series disappears.
    pub fn set_revision(&self, rev: &str) {
        let _swap = self.swap.lock().unwrap_or_else(|e| e.into_inner());
        self.revision.clear();
        self.revision
            .get_or_create(&RevisionLabel {
                revision: rev.into(),
            })
            .set(1);
    }

    pub fn set_last_converged(&self, unix_secs: f64) {
        self.last_converged.set(unix_secs);
    }

    pub fn set_queue_depth(&self, n: usize) {
        self.queue_depth.set(n as i64);
    }

    pub fn set_ha_leader(&self, leading: bool) {
        self.ha_leader.set(i64::from(leading));
    }

    pub fn set_fleet_poller(&self, polling: bool) {
        self.fleet_poller.set(i64::from(polling));
    }

    pub fn set_rollout(&self, halted: bool, pending: bool) {
        self.rollout_halted.set(i64::from(halted));
        self.rollout_pending.set(i64::from(pending));
    }

    pub fn set_ledger_write_failing(&self, failing: bool) {
        self.ledger_write_failing.set(i64::from(failing));
    }

    pub fn set_declaration_problems(&self, n: usize) {
        self.declaration_problems.set(n as i64);
    }

    pub fn set_last_successful_fetch(&self, unix_secs: f64) {
        self.last_successful_fetch.set(unix_secs);
    }

    pub fn set_mirror_bytes(&self, bytes: u64) {
        self.mirror_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    pub fn hook(&self, ok: bool) {
        self.hooks.get_or_create(&ok_error(ok)).inc();
    }

    /// One webhook request to an enabled endpoint and what came of it.
    pub fn webhook(&self, provider: &str, result: &str) {
        self.webhooks
            .get_or_create(&WebhookLabel {
                provider: provider.into(),
                result: result.into(),
            })
            .inc();
    }

    /// Replaces the per-resource series with `(id, state, drift age)` of the
    /// resources not in sync, keeping the [`MAX_RESOURCE_SERIES`] oldest.
    pub fn set_not_in_sync(&self, resources: &[(String, String, f64)]) {
        let mut oldest: Vec<&(String, String, f64)> =
            resources.iter().filter(|r| r.1 != "InSync").collect();
        oldest.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        oldest.truncate(MAX_RESOURCE_SERIES);
        let _swap = self.swap.lock().unwrap_or_else(|e| e.into_inner());
        self.not_in_sync.clear();
        for (id, state, age) in oldest {
            self.not_in_sync
                .get_or_create(&ResourceLabel {
                    id: id.clone(),
                    state: state.clone(),
                })
                .set(*age);
        }
    }
}

#[cfg(test)]
mod tests;

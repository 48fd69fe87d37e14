//! Every family tend exposes, registered once with its SPEC §6 name and
//! help text, and the series that exist from the start so rates and
//! alerts work before the first event of each kind.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::{
    ok_error, result_label, states, Metrics, ReasonLabel, StateLabel, VersionLabel,
    RECONCILE_RESULTS,
};

impl Metrics {
    pub(super) fn register(mut self) -> Metrics {
        let r = &mut self.registry;
        let build = Family::<VersionLabel, Gauge>::default();
        build
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .set(1);
        r.register(
            "tend_build_info",
            "The running tend version; always 1",
            build,
        );
        r.register(
            "tend_resources",
            "Managed resources per state",
            self.resources.clone(),
        );
        r.register(
            "tend_drifted_resources",
            "Resources whose live state differs from the declaration",
            self.drifted.clone(),
        );
        r.register(
            "tend_drift_oldest_age_seconds",
            "Age of the oldest divergence still open, 0 when all is in sync",
            self.drift_oldest_age.clone(),
        );
        // prometheus-client appends `_total` to counters.
        r.register(
            "tend_reconcile",
            "Resource reconciliations by result",
            self.reconciles.clone(),
        );
        r.register(
            "tend_reconcile_duration_seconds",
            "Time taken by one resource reconciliation",
            self.reconcile_duration.clone(),
        );
        r.register(
            "tend_writes",
            "Writes performed on a target",
            self.writes.clone(),
        );
        r.register(
            "tend_source_fetch",
            "Fetches of the source repository by result",
            self.fetches.clone(),
        );
        r.register(
            "tend_source_refused",
            "Fetched revisions refused, by reason (unsigned, untrusted, bad_signature, expired, revoked, rewind)",
            self.refused.clone(),
        );
        r.register(
            "tend_source_revision_info",
            "The revision last fetched from the source; only the current one is 1",
            self.revision.clone(),
        );
        r.register(
            "tend_last_converged_timestamp_seconds",
            "Unix time when every resource was last in sync",
            self.last_converged.clone(),
        );
        r.register(
            "tend_queue_depth",
            "Resources waiting to be reconciled",
            self.queue_depth.clone(),
        );
        r.register(
            "tend_ha_leader",
            "1 while this replica is the leader that writes (ha), 0 otherwise",
            self.ha_leader.clone(),
        );
        r.register(
            "tend_fleet_poller",
            "1 while this host polls the source for its fleet (fleet), 0 otherwise",
            self.fleet_poller.clone(),
        );
        r.register(
            "tend_rollout_halted",
            "1 while the staged rollout of this host's newest revision is halted (fleet.rollout), 0 otherwise",
            self.rollout_halted.clone(),
        );
        r.register(
            "tend_rollout_pending",
            "1 while this host holds a fetched revision it may not apply yet (fleet.rollout), 0 otherwise",
            self.rollout_pending.clone(),
        );
        r.register(
            "tend_declaration_problems",
            "Problems in the declarations of the revision last worked on; while any, nothing is pruned",
            self.declaration_problems.clone(),
        );
        r.register(
            "tend_source_last_successful_fetch_timestamp_seconds",
            "Unix time of the last successful fetch of the source",
            self.last_successful_fetch.clone(),
        );
        r.register(
            "tend_source_mirror_bytes",
            "Bytes the Git mirrors under the state dir take",
            self.mirror_bytes.clone(),
        );
        r.register("tend_hook_runs", "Hook runs by result", self.hooks.clone());
        r.register(
            "tend_webhook_requests",
            "Webhook requests by provider and result (triggered, ignored, unauthorized, malformed, too_large, unavailable)",
            self.webhooks.clone(),
        );
        r.register(
            "tend_resource_drift_age_seconds",
            "Drift age of a resource not in sync; only the 100 oldest have a series",
            self.not_in_sync.clone(),
        );
        r.register(
            "tend_ledger_write_failing",
            "1 while the daemon cannot record its outcomes in the ledger (they are kept in memory and retried)",
            self.ledger_write_failing.clone(),
        );
        // Series that exist from the start, so rates and alerts work before
        // the first event of each kind.
        for state in states() {
            self.resources.get_or_create_owned(&StateLabel {
                state: state.into(),
            });
        }
        for result in RECONCILE_RESULTS {
            self.reconciles.get_or_create_owned(&result_label(result));
        }
        for reason in crate::source::verify::Reason::ALL {
            self.refused.get_or_create_owned(&ReasonLabel {
                reason: reason.as_str().into(),
            });
        }
        for ok in [true, false] {
            self.fetches.get_or_create_owned(&ok_error(ok));
            self.hooks.get_or_create_owned(&ok_error(ok));
        }
        self
    }
}

//! `fleet.rollout` in the daemon (SPEC §12): a newly admitted revision is
//! held (fetched, verified, shown as pending) while the rollout's verdict
//! does not let this host apply it; the revision it applies stays, drift
//! and all corrected. The coordinator ([`crate::fleet::rollout`]) reads
//! and writes etcd beside the loop; the loop tells it what it has and how
//! its passes went, and once a second reads the verdict, switches to the
//! held revision when it may, and records the rollout line for status.

use super::driver::Loop;
use super::publish;
use crate::fleet::rollout::{self, Verdict};
use crate::reconcile::{trust, PassReport};

impl Loop {
    /// Whether `admitted` may be applied now. When not, it is held and
    /// the applied revision stays; after a restart (nothing loaded yet)
    /// the last one applied is loaded again.
    pub(super) async fn staged(&mut self, admitted: &trust::Admitted) -> bool {
        let current = self.shared.current().map(|r| r.id);
        let Some(st) = self.rollout.as_mut() else {
            return true;
        };
        if current == Some(admitted.revision) {
            st.held = None;
            return true;
        }
        let last_good = match current {
            Some(_) => None,
            None => {
                self.blocking(|ctx, rec| trust::last_good(ctx, &rec.ledger))
                    .await
            }
        };
        let Some(st) = self.rollout.as_mut() else {
            return true;
        };
        // Applied before this process started: it went through its
        // rollout then (or this host is a canary keeping it).
        if last_good
            .as_ref()
            .is_some_and(|g| g.revision == admitted.revision)
        {
            st.held = None;
            return true;
        }
        let applied = current.or(last_good.as_ref().map(|g| g.revision));
        st.coordinator.want(
            Some(admitted.revision.to_string()),
            applied.map(|r| r.to_string()),
        );
        if st
            .coordinator
            .view()
            .is_some_and(|v| v.verdict == Verdict::Apply)
        {
            st.held = None;
            return true;
        }
        if st.held.as_ref().map(|h| h.revision) != Some(admitted.revision) {
            tracing::info!(revision = %admitted.revision, "rollout: revision held until its canaries soaked");
        }
        st.held = Some(admitted.clone());
        if let Some(good) = last_good {
            self.switch_to(good).await;
        }
        false
    }

    /// Once a second: the verdict about the held revision (applied when
    /// it may be), the gauges, and the status line when it changed.
    pub(super) async fn rollout_tick(&mut self) {
        let current = self.shared.current().map(|r| r.id.to_string());
        let Some(st) = self.rollout.as_mut() else {
            return;
        };
        let wanted = st.held.as_ref().map(|a| a.revision.to_string());
        st.coordinator.want(wanted.or(current.clone()), current);
        let Some(view) = st.coordinator.view() else {
            return;
        };
        let status = rollout::status(&view);
        let held = view.wanted.is_some() && view.wanted != view.applied;
        publish::rollout(&self.shared.metrics, status.state == "halted", held);
        if st.recorded.as_ref() != Some(&status) {
            tracing::info!(rollout = %status.line(), "rollout");
            st.recorded = Some(status.clone());
            let json = serde_json::to_string(&status).expect("status");
            self.blocking(move |_, rec| {
                if let Err(e) = rec.ledger.set_rollout(Some(&json)) {
                    tracing::warn!(error = %e, "cannot record the rollout's status");
                }
            })
            .await;
        }
        if view.verdict == Verdict::Apply {
            let Some(st) = self.rollout.as_mut() else {
                return;
            };
            if let Some(admitted) = st.held.take() {
                tracing::info!(revision = %admitted.revision, "rollout: applying the held revision");
                self.switch_to(admitted).await;
            }
        }
    }

    /// A pass ended: how it went, for the canary's report.
    pub(super) fn rollout_passed(&self, report: &PassReport) {
        let (Some(st), Some(rev)) = (self.rollout.as_ref(), report.revision) else {
            return;
        };
        if report.dry_run || report.cancelled {
            return;
        }
        let (health, why) = rollout::health(report);
        st.coordinator.passed(&rev.to_string(), health, why);
    }
}

//! The loop's look once a second: a pause or pin the operator wrote to the
//! ledger, the rollout's verdict, and gauges gone stale.

use std::time::Duration;

use super::Loop;
use crate::reconcile::Scope;

/// The metrics' drift ages are brought up to date at least this often, so
/// they grow between events as the ledger's ages do.
const AGES_EVERY: Duration = Duration::from_secs(5);

impl Loop {
    /// Once a second: a pause change starts a full pass; deferred or stale
    /// gauges are published. Without drift nothing changes between passes,
    /// so idle stays idle.
    pub(in crate::daemon) async fn tick(&mut self) {
        if self.pauses_changed().await {
            self.pass(Scope::All).await;
        }
        if self.pin_changed().await {
            // The last fetched revision, decided on again: pinned, or the
            // ref's newest once the pin is lifted or ran out.
            if let Ok(Some(id)) = self.blocking(|ctx, _| ctx.mirror.resolved()).await {
                self.admit(id, false).await;
            }
        }
        self.rollout_tick().await;
        // A new role is shown at once (becoming the leader also asks for a
        // full pass, through the elector).
        let role_changed = self.role() != self.role_seen;
        let stale = role_changed
            || self.ages_grow
                && self
                    .last_published
                    .is_some_and(|t| t.elapsed() >= AGES_EVERY);
        if role_changed {
            self.publish(true).await;
        } else if self.publish_pending || stale {
            self.publish(false).await;
        }
    }

    /// The pin lives in the ledger, written by `tend pin` and `tend unpin`;
    /// one that ran out reads as none.
    pub(in crate::daemon) async fn pin_changed(&mut self) -> bool {
        let now = self
            .blocking(|ctx, rec| format!("{:?}", rec.ledger.pin_at(ctx.clock.now()).ok()))
            .await;
        let changed = now != self.pin_seen;
        self.pin_seen = now;
        changed
    }

    /// Pauses live in the ledger, written by `tend pause`: a change starts a pass.
    pub(in crate::daemon) async fn pauses_changed(&mut self) -> bool {
        let now = self
            .blocking(|ctx, rec| format!("{:?}", rec.ledger.pauses_at(ctx.clock.now()).ok()))
            .await;
        let changed = now != self.pauses_seen;
        self.pauses_seen = now;
        changed
    }
}

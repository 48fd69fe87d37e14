//! The gauges the loop publishes from the ledger and its queue, at most
//! once a second unless forced, with the role and watcher line it writes
//! for status.

use std::time::Duration;

use tokio::time::Instant;

use super::Loop;
use crate::daemon::publish;

impl Loop {
    /// Gauges from the ledger, at most once a second unless forced. A
    /// skipped update is only deferred: with hour-long timers, dropping it
    /// would leave the gauges wrong until the next event.
    pub(super) async fn publish(&mut self, force: bool) {
        if !force
            && self
                .last_published
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            self.publish_pending = true;
            return;
        }
        self.publish_pending = false;
        self.last_published = Some(Instant::now());
        let metrics = self.shared.metrics.clone();
        let (kept, failing) = {
            let kept = self.shared.unrecorded.lock().expect("unrecorded outcomes");
            (
                kept.records().cloned().collect::<Vec<_>>(),
                kept.failure().is_some(),
            )
        };
        let role = self.role();
        let leading = role.as_ref().is_some_and(|(r, _)| r == "leader");
        publish::ha_leader(&self.shared.metrics, leading);
        let write_role = role.clone().filter(|r| Some(r) != self.role_seen.as_ref());
        self.role_seen = role;
        let line = Some(self.watch.describe());
        let write_line = line.clone().filter(|l| Some(l) != self.watch_line.as_ref());
        self.watch_line = line;
        self.ages_grow = self
            .blocking(move |_, rec| {
                if let Some(line) = write_line {
                    let _ = rec.ledger.set_watcher(&line);
                }
                if let Some((role, leader)) = write_role {
                    let _ = rec.ledger.set_ha_role(&role, leader.as_deref());
                }
                publish::ledger(&metrics, &rec.ledger, &kept, failing)
            })
            .await;
        publish::queue(&self.shared.metrics, self.queue.depth());
        self.report_fleet().await;
    }

    /// This replica's role and the leader's name, with `ha`.
    pub(in crate::daemon) fn role(&self) -> Option<(String, Option<String>)> {
        let role = self.fence.role()?;
        Some((role.name().to_string(), self.fence.leader_name()))
    }
}

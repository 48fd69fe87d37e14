//! Fetching the source: a new revision is admitted and reconciled, a
//! failure waits by the backoff and, past `--max-failures` with nothing
//! ever applied, ends the daemon; the mirror is collected beside the loop.

use std::time::Duration;

use super::Loop;
use crate::daemon::publish;
use crate::reconcile::{self, Scope};

impl Loop {
    /// Fetches; on a new revision loads it and runs a full pass.
    pub(in crate::daemon) async fn poll(&mut self) -> Duration {
        let result = self
            .blocking(|ctx, rec| reconcile::fetch(ctx, rec, ctx.clock.now()))
            .await;
        publish::fetch(&self.shared.metrics, result.is_ok());
        let interval = self.settings.source.interval;
        match result {
            Ok(id) => {
                self.fleet_fetched(id);
                let before = self.shared.current().map(|r| r.id);
                self.admit(id, true).await;
                if self.unpublished.count() > 0 && self.shared.current().map(|r| r.id) == before {
                    // The revision's tree was not published: try again
                    // soon, with backoff.
                    self.pass(Scope::All).await;
                }
                self.collect_mirror().await;
                reconcile::next_fetch(true, &mut self.fetches, &self.unpublished, interval)
            }
            Err(e) => {
                let wait =
                    reconcile::next_fetch(false, &mut self.fetches, &self.unpublished, interval);
                tracing::warn!(error = %e, failures = self.fetches.count(), "fetch failed; the last good state stays");
                if self.shared.current().is_none() {
                    if let Ok(Some(id)) = self.blocking(|ctx, _| ctx.mirror.resolved()).await {
                        self.admit(id, false).await;
                    }
                }
                self.give_up_after(&e).await;
                self.publish(true).await;
                wait
            }
        }
    }

    /// Starts the mirror's collection beside the loop when one is due and
    /// none runs, and publishes the mirrors' size (again when it ends).
    async fn collect_mirror(&mut self) {
        let idle = self
            .collecting
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished);
        let (job, bytes) = self
            .blocking(move |ctx, rec| {
                let job = idle.then(|| reconcile::mirror_gc_due(ctx, rec)).flatten();
                (job, crate::source::mirrors_bytes(&ctx.settings.state_dir))
            })
            .await;
        publish::mirror(&self.shared.metrics, bytes);
        if let Some(job) = job {
            let (metrics, state_dir) =
                (self.shared.metrics.clone(), self.settings.state_dir.clone());
            self.collecting = Some(tokio::task::spawn_blocking(move || {
                job.run();
                publish::mirror(&metrics, crate::source::mirrors_bytes(&state_dir));
            }));
        }
    }

    /// As git-sync's `--max-failures`: more consecutive failed fetches than
    /// allowed, and no revision ever applied (by this process or one
    /// before it), ends the daemon; with a revision applied, the last good
    /// state is served and fetching goes on.
    async fn give_up_after(&mut self, error: &crate::source::SourceError) {
        let Some(allowed) = self.settings.source.max_failures else {
            return;
        };
        if !reconcile::gives_up(&self.fetches, allowed) {
            return;
        }
        let applied = self
            .blocking(|_, rec| {
                rec.ledger
                    .source()
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.applied_revision.is_some())
            })
            .await;
        if !applied {
            self.gave_up = Some(format!(
                "{} consecutive fetches failed (max_failures {allowed}) and no revision was ever applied; last error: {error}",
                self.fetches.count()
            ));
        }
    }
}

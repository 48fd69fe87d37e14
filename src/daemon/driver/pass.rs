//! One pass run on the worker, and what follows it: whether its revision
//! was applied whole, the watches told the managed set, metrics, readiness.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use super::Loop;
use crate::daemon::{memory, publish};
use crate::ledger::State;
use crate::model::ResourceId;
use crate::reconcile::{self, PassReport, Revision, Scope};
use crate::target::Recheck;

impl Loop {
    /// The current revision read again (see [`crate::declare::Declared::reread`]):
    /// a decryption waited on an identity file, which may be back.
    async fn reread(&mut self, rev: Arc<Revision>) -> Arc<Revision> {
        let (id, provenance) = (rev.id, rev.provenance.clone());
        match self.blocking(move |ctx, _| reconcile::load(ctx, id)).await {
            Ok(mut fresh) => {
                fresh.provenance = provenance;
                let fresh = Arc::new(fresh);
                self.shared.set_current(fresh.clone());
                fresh
            }
            Err(e) => {
                tracing::warn!(revision = %id, error = %e, "cannot read the revision again; its last reading stays");
                rev
            }
        }
    }

    pub(in crate::daemon) async fn pass(&mut self, scope: Scope) {
        if matches!(scope, Scope::All) {
            // This pass is the one asked for.
            self.full_due = None;
        }
        // Keys from the queue are marked running until the pass ends.
        let keys: Vec<ResourceId> = match &scope {
            Scope::Keys(k) => k.iter().cloned().collect(),
            Scope::All | Scope::Changes(_) => Vec::new(),
        };
        let Some(rev) = self.shared.current() else {
            // Nothing loaded yet (an event came before the first revision):
            // the first full pass looks at everything, and the keys must not
            // stay marked running.
            for k in &keys {
                self.queue.done(k);
            }
            return;
        };
        let fresh = std::mem::take(&mut self.just_read);
        let rev = match rev.declared.reread && !fresh {
            true => self.reread(rev).await,
            false => rev,
        };
        let (opts, ctl) = (self.opts, self.shared.ctl.clone());
        let full = matches!(scope, Scope::All);
        let prunes = scope.prunes();
        // After the pass, the watch index follows the revision's managed set.
        let watch_changes = match &scope {
            Scope::Changes(k) => Some(k.clone()),
            _ => None,
        };
        let started = Instant::now();
        let rev2 = rev.clone();
        let result = self
            .blocking(move |ctx, rec| match scope {
                Scope::All => {
                    let report = reconcile::full_pass(ctx, rec, &rev2, opts, &ctl);
                    // Saved by the pass, and read again by the next use:
                    // not held while the daemon waits.
                    ctx.targets.values().for_each(|t| t.rest());
                    memory::give_back();
                    report
                }
                Scope::Changes(_) => reconcile::pruning_pass(ctx, rec, &rev2, scope, opts, &ctl),
                Scope::Keys(keys) => reconcile::keyed_pass(ctx, rec, &rev2, keys, opts, &ctl),
            })
            .await;
        for k in &keys {
            self.queue.done(k);
        }
        let (report, unrecorded) = match result {
            Ok(r) => (r, None),
            Err(reconcile::PassError::Unrecorded { report, error }) => (*report, Some(error)),
            Err(e) => {
                if prunes {
                    self.settled = None;
                }
                return self.pass_failed(&keys, &e).await;
            }
        };
        match &unrecorded {
            None => self.recorded(&report, full).await,
            Some(error) => self.unrecorded(&report, error, keys.is_empty()).await,
        }
        // Not published: the next fetch runs a full pass again, with backoff.
        match report.unpublished {
            Some(_) => {
                self.unpublished.failed(crate::backoff::MAX);
            }
            None if !report.cancelled => self.unpublished.succeeded(),
            None => {}
        }
        if prunes && unrecorded.is_some() {
            self.settled = None;
        } else if prunes {
            // The next revision can be reconciled from this one only when
            // this one was applied whole: nothing held back or cut short,
            // and published (a new tree is built from the published one).
            let whole = report.prune_blocked.is_none()
                && report.unpublished.is_none()
                && !report.cancelled
                && !report.dry_run
                && rev.declared.is_complete()
                && !report.outcomes.keys().any(|id| {
                    // A member no longer declared that still has an outcome
                    // was not pruned (failed, paused, unobservable).
                    !rev.declared.resources.contains_key(id)
                        && !rev.declared.blocked.contains_key(id)
                });
            self.settled = whole.then_some(rev.id);
        }
        tracing::debug!(full, resources = report.outcomes.len(), "pass done");
        if full || report.applied > 0 || report.failed > 0 || report.deleted > 0 {
            tracing::info!(
                full,
                applied = report.applied,
                pruned = report.deleted,
                failed = report.failed,
                converged = report.converged,
                "pass ended"
            );
        }
        self.fleet_passed();
        let each = started.elapsed().as_secs_f64() / report.outcomes.len().max(1) as f64;
        publish::pass(&self.shared.metrics, &report, each);
        self.rollout_passed(&report);
        // A newly published tree is watched instead of the old one (each
        // watch follows its target's); what changed there before its
        // watches began is looked at again as for any newly watched
        // directory.
        let recheck = {
            let resources = &rev.declared.resources;
            let now = |id| resources.get(id).map(|d| d.path_str());
            if let Some(keys) = watch_changes {
                self.watched = Some(rev.id);
                self.watch.patch(keys.iter().map(|id| (id, now(id))))
            } else if full || self.watched != Some(rev.id) {
                self.watched = Some(rev.id);
                self.watch.manage(resources)
            } else {
                // A keyed pass may have made directories: watch them.
                let applied = report.outcomes.iter().filter(|(_, o)| o.applied);
                self.watch.patch(applied.map(|(id, _)| (id, now(id))))
            }
        };
        // What changed between this pass's look and the watch's start is
        // seen by looking again, now that events are seen.
        match recheck {
            Recheck::Nothing => {}
            Recheck::Keys(ids) => self.schedule_now(ids),
            Recheck::All => self.full_due = Some(Instant::now()),
        }
        if unrecorded.is_none() {
            self.requeue(&report);
        }
        self.publish(full || unrecorded.is_some()).await;
        if full && !self.shared.ready.swap(true, Ordering::SeqCst) {
            tracing::info!("first pass ended: ready");
            self.notifier.ready(&self.summary(&report));
        } else if full {
            self.notifier.status(&self.summary(&report));
        }
    }

    fn summary(&self, report: &PassReport) -> String {
        let rev = report
            .revision
            .map(|r| r.to_string()[..12].to_string())
            .unwrap_or_default();
        let not_in_sync = report
            .outcomes
            .values()
            .filter(|o| o.state != State::InSync)
            .count();
        format!(
            "revision {rev}: {}, {not_in_sync} not in sync",
            crate::render::count(report.outcomes.len(), "resource", "resources")
        )
    }
}

//! The loop's state and what it does at each trigger: fetch, switch to a new
//! revision, run a pass (all, changes, or keys), requeue what the error
//! policy asks for, publish gauges. Triggers only decide *when*; every pass
//! observes afresh and decides *what* to do.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::notify::Notifier;
use super::queue::Queue;
use super::watch::Watch;
use super::{publish, Shared, Worker};
use crate::config::Settings;
use crate::ledger::State;
use crate::model::ResourceId;
use crate::reconcile::{
    self, action_for, backoff, load_next, retried, trust, Context, Next, PassOptions, PassReport,
    Recorder, Scope,
};

/// The metrics' drift ages are brought up to date at least this often, so
/// they grow between events as the ledger's ages do.
const AGES_EVERY: Duration = Duration::from_secs(5);

pub(super) fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.9..1.1))
}

pub(super) struct Loop {
    pub(super) settings: Settings,
    pub(super) shared: Shared,
    queue: Queue,
    pub(super) opts: PassOptions,
    pub(super) fetch_failures: u32,
    pauses_seen: String,
    /// The pin last seen in the ledger (written by `tend pin`).
    pin_seen: String,
    pub(super) watch: Option<Watch>,
    /// The revision the watch index was built for.
    pub(super) watched: Option<git2::Oid>,
    /// The current revision, when its last pruning pass applied it whole:
    /// the next revision is then reconciled from it by its changes.
    pub(super) settled: Option<git2::Oid>,
    notifier: Arc<Notifier>,
    last_published: Option<Instant>,
    /// A throttled publish was skipped; the next tick makes it.
    publish_pending: bool,
    /// The last publish found resources not in sync, whose ages grow.
    ages_grow: bool,
    /// The watcher line last written to the ledger.
    watch_line: Option<String>,
}

impl Loop {
    pub(super) fn new(
        settings: Settings,
        shared: Shared,
        watch: Option<Watch>,
        notifier: Arc<Notifier>,
    ) -> Loop {
        Loop {
            opts: PassOptions {
                allow_mass_prune: false,
                dry_run: settings.policy.dry_run,
            },
            settings,
            shared,
            queue: Queue::new(),
            fetch_failures: 0,
            pauses_seen: String::new(),
            pin_seen: String::new(),
            watch,
            watched: None,
            settled: None,
            notifier,
            last_published: None,
            publish_pending: false,
            ages_grow: false,
            watch_line: None,
        }
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.queue.next_due()
    }

    pub(super) fn schedule_now(&mut self, ids: Vec<ResourceId>) {
        for id in ids {
            self.queue.schedule_now(id);
        }
    }

    /// Runs the keys whose retry or event time has come.
    pub(super) async fn due_keys(&mut self) {
        let keys: BTreeSet<ResourceId> = self
            .queue
            .take_due(Instant::now(), 10_000)
            .into_iter()
            .collect();
        if !keys.is_empty() {
            self.pass(Scope::Keys(keys)).await;
        }
    }

    /// Once a second: a pause change starts a full pass; deferred or stale
    /// gauges are published. Without drift nothing changes between passes,
    /// so idle stays idle.
    pub(super) async fn tick(&mut self) {
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
        let stale = self.ages_grow
            && self
                .last_published
                .is_some_and(|t| t.elapsed() >= AGES_EVERY);
        if self.publish_pending || stale {
            self.publish(false).await;
        }
    }

    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Context, &mut Recorder) -> T + Send + 'static,
    ) -> T {
        let worker = self.shared.worker.clone();
        tokio::task::spawn_blocking(move || {
            let mut w = worker.lock().expect("worker lock");
            let Worker { ctx, rec } = &mut *w;
            f(ctx, rec)
        })
        .await
        .expect("blocking task panicked")
    }

    /// Runs `f` on the worker (context and recorder), off the runtime.
    pub(super) async fn with_worker<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Worker) -> T + Send + 'static,
    ) -> T {
        let worker = self.shared.worker.clone();
        tokio::task::spawn_blocking(move || f(&mut worker.lock().expect("worker lock")))
            .await
            .expect("blocking task panicked")
    }

    /// Fetches; on a new revision loads it and runs a full pass.
    pub(super) async fn poll(&mut self) -> Duration {
        let result = self
            .blocking(|ctx, rec| reconcile::fetch(ctx, rec, SystemTime::now()))
            .await;
        publish::fetch(&self.shared.metrics, result.is_ok());
        let interval = self.settings.source.interval;
        match result {
            Ok(id) => {
                self.fetch_failures = 0;
                self.admit(id, true).await;
                jitter(interval)
            }
            Err(e) => {
                self.fetch_failures += 1;
                tracing::warn!(error = %e, failures = self.fetch_failures, "fetch failed; the last good state stays");
                if self.shared.current().is_none() {
                    if let Ok(Some(id)) = self.blocking(|ctx, _| ctx.mirror.resolved()).await {
                        self.admit(id, false).await;
                    }
                }
                self.publish(true).await;
                backoff::jittered(self.fetch_failures).min(interval)
            }
        }
    }

    /// Decides on `fetched` (SPEC §9) and switches to what may be applied:
    /// a refused revision changes nothing, and the last good one stays (or,
    /// after a restart, is loaded again) so its drift is still corrected.
    /// `count`: a refusal of a fresh fetch, for the metric.
    async fn admit(&mut self, fetched: git2::Oid, count: bool) {
        self.admit_or_rerun(fetched, count, false).await
    }

    /// [`Loop::admit`]; with `rerun` (new settings) what stays applied is
    /// reconciled again even when it is the current revision.
    pub(super) async fn admit_or_rerun(&mut self, fetched: git2::Oid, count: bool, rerun: bool) {
        let (gate, fallback) = self
            .blocking(move |ctx, rec| {
                let gate = trust::admit(ctx, &rec.ledger, fetched);
                if let Ok(g) = &gate {
                    if let Err(e) = trust::record(&rec.ledger, g, SystemTime::now()) {
                        tracing::warn!(error = %e, "cannot record the source's trust state");
                    }
                }
                let fallback = match &gate {
                    Ok(Err(_)) => trust::last_good(ctx, &rec.ledger),
                    _ => None,
                };
                (gate, fallback)
            })
            .await;
        let current = self.shared.current();
        let differs = |a: &trust::Admitted| {
            rerun
                || current
                    .as_ref()
                    .is_none_or(|r| r.id != a.revision || r.provenance != a.provenance)
        };
        match gate {
            Ok(Ok(admitted)) if differs(&admitted) => self.switch_to(admitted).await,
            Ok(Ok(_)) => {}
            Ok(Err(refused)) => {
                tracing::warn!(%refused, "the last good revision stays applied");
                if count {
                    self.shared.metrics.refused(refused.refusal.reason.as_str());
                }
                let stays = current.as_ref().map(|r| trust::Admitted {
                    revision: r.id,
                    provenance: r.provenance.clone(),
                });
                match (stays, fallback) {
                    (Some(stays), _) if rerun => self.switch_to(stays).await,
                    (None, Some(good)) => self.switch_to(good).await,
                    _ => {}
                }
                self.publish(true).await;
            }
            Err(e) => {
                tracing::warn!(revision = %fetched, error = %e, "cannot check the revision; the last good state stays")
            }
        }
    }

    /// Reads revision `id` and reconciles it: from the current revision,
    /// when that one is settled and the watcher sees drift, only what
    /// changed; otherwise all of it.
    pub(super) async fn switch_to(&mut self, admitted: trust::Admitted) {
        let id = admitted.revision;
        // Without a healthy watcher, drift of unchanged resources is only
        // seen by full passes: a new revision gets one, as the resync does.
        let watched = self.watch.as_ref().is_some_and(|w| w.healthy());
        let settled = watched
            && self
                .shared
                .current()
                .is_some_and(|r| Some(r.id) == self.settled);
        // The previous revision's desired state is reused, not copied, when
        // nothing else holds it.
        let prev = if settled {
            self.shared.take_current()
        } else {
            None
        };
        let loaded = self.blocking(move |ctx, _| load_next(ctx, prev, id)).await;
        let (rev, scope) = match loaded {
            Ok(Next::Whole(rev)) => (rev, Scope::All),
            Ok(Next::Changes { rev, keys }) => (rev, Scope::Changes(keys)),
            Err((e, prev)) => {
                if let Some(prev) = prev {
                    self.shared.set_current(prev);
                }
                tracing::warn!(revision = %id, error = %e, "cannot read revision; the last good state stays");
                return;
            }
        };
        let changed = scope.keys().map(|k| k.len());
        tracing::info!(revision = %id, resources = rev.declared.resources.len(), changed, "new revision");
        for problem in rev.declared.problems.iter().take(20) {
            tracing::warn!(revision = %id, %problem, "invalid declaration; nothing is pruned until it is fixed");
        }
        for note in rev.declared.notes.iter().take(20) {
            tracing::warn!(revision = %id, %note, "left out of the revision");
        }
        let mut rev = rev;
        rev.provenance = admitted.provenance;
        let rev = Arc::new(rev);
        self.shared.set_current(rev);
        self.settled = None;
        self.pass(scope).await;
    }

    pub(super) async fn pass(&mut self, scope: Scope) {
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
            .blocking(
                move |ctx, rec| -> Result<PassReport, reconcile::PassError> {
                    match scope {
                        Scope::All => reconcile::full_pass(ctx, rec, &rev2, opts, &ctl),
                        Scope::Changes(_) => {
                            reconcile::pruning_pass(ctx, rec, &rev2, scope, opts, &ctl)
                        }
                        Scope::Keys(_) => {
                            let prepared = reconcile::prepare(ctx, &rev2, &rec.ledger, scope)?;
                            reconcile::apply(ctx, rec, &rev2, &prepared, opts, &ctl)
                        }
                    }
                },
            )
            .await;
        for k in &keys {
            self.queue.done(k);
        }
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                if prunes {
                    self.settled = None;
                }
                return tracing::warn!(error = %e, "pass failed");
            }
        };
        if prunes {
            // The next revision can be reconciled from this one only when
            // this one was applied whole: nothing held back or cut short.
            let whole = report.prune_blocked.is_none()
                && !report.cancelled
                && !opts.dry_run
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
        let each = started.elapsed().as_secs_f64() / report.outcomes.len().max(1) as f64;
        publish::pass(&self.shared.metrics, &report, each);
        if let Some(w) = self.watch.as_mut() {
            let resources = &rev.declared.resources;
            let now = |id| resources.get(id).map(|d| (d.target(), &d.path));
            if let Some(keys) = watch_changes {
                w.patch(keys.iter().map(|id| (id, now(id))));
                self.watched = Some(rev.id);
            } else if full || self.watched != Some(rev.id) {
                w.update(resources.values().map(|d| (&d.id, d.target(), &d.path)));
                self.watched = Some(rev.id);
            } else {
                // A keyed pass may have made directories: watch them.
                let applied = report.outcomes.iter().filter(|(_, o)| o.applied);
                w.patch(applied.map(|(id, _)| (id, now(id))));
            }
        }
        self.requeue(&report).await;
        self.publish(full).await;
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
            "revision {rev}: {} resources, {not_in_sync} not in sync",
            report.outcomes.len()
        )
    }

    /// Gauges from the ledger, at most once a second unless forced. A
    /// skipped update is only deferred: with hour-long timers, dropping it
    /// would leave the gauges wrong until the next event.
    async fn publish(&mut self, force: bool) {
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
        let line = self.watch.as_ref().map(|w| w.describe());
        let write_line = line.clone().filter(|l| Some(l) != self.watch_line.as_ref());
        self.watch_line = line;
        self.ages_grow = self
            .blocking(move |_, rec| {
                if let Some(line) = write_line {
                    let _ = rec.ledger.set_watcher(&line);
                }
                publish::ledger(&metrics, &rec.ledger)
            })
            .await;
        self.shared.metrics.set_queue_depth(self.queue.depth());
    }

    /// Schedules the retries a pass calls for. Only outcomes the error
    /// policy looks at again (failed, unknown, contested) need their record;
    /// the rest wait for a change, so a converged pass over every resource
    /// reads and copies nothing.
    async fn requeue(&mut self, report: &PassReport) {
        let ids: Vec<ResourceId> = report
            .outcomes
            .iter()
            .filter(|(_, o)| retried(o.state))
            .map(|(id, _)| id.clone())
            .collect();
        if ids.is_empty() {
            return;
        }
        let records = self
            .blocking(move |_, rec| {
                rec.ledger
                    .resources_of(ids.iter().map(|id| id.as_str()))
                    .unwrap_or_default()
            })
            .await;
        for r in records {
            let action = action_for(r.state, r.next_retry, &self.settings);
            self.queue.after(ResourceId::from_string(r.id), action);
        }
    }

    /// The pin lives in the ledger, written by `tend pin` and `tend unpin`;
    /// one that ran out reads as none.
    pub(super) async fn pin_changed(&mut self) -> bool {
        let now = self
            .blocking(|_, rec| format!("{:?}", rec.ledger.pin().ok()))
            .await;
        let changed = now != self.pin_seen;
        self.pin_seen = now;
        changed
    }

    /// Pauses live in the ledger, written by `tend pause`: a change starts a pass.
    pub(super) async fn pauses_changed(&mut self) -> bool {
        let now = self
            .blocking(|_, rec| format!("{:?}", rec.ledger.pauses().ok()))
            .await;
        let changed = now != self.pauses_seen;
        self.pauses_seen = now;
        changed
    }
}

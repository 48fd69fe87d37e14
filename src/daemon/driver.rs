//! The loop's state and what it does at each trigger: fetch, switch to a new
//! revision, run a pass (all, changes, or keys), requeue what the error
//! policy asks for, publish gauges. Triggers only decide *when*; every pass
//! observes afresh and decides *what* to do.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::notify::Notifier;
use super::queue::Queue;
use super::subscriptions::Subscriptions;
use super::unrecorded::{self, Unrecorded};
use super::{publish, Shared, Worker};
use crate::backoff::Failures;
use crate::config::Settings;
use crate::ledger::{ResourceRecord, State};
use crate::model::role::Fence;
use crate::model::ResourceId;
use crate::reconcile::{
    self, load_next, next_step, trust, Clock, Context, Next, Outcome, PassOptions, PassReport,
    Recorder, Revision, Scope,
};
use crate::target::Recheck;

/// The metrics' drift ages are brought up to date at least this often, so
/// they grow between events as the ledger's ages do.
const AGES_EVERY: Duration = Duration::from_secs(5);

pub(super) struct Loop {
    pub(super) settings: Settings,
    pub(super) shared: Shared,
    queue: Queue,
    pub(super) opts: PassOptions,
    /// Fetches that failed in a row.
    pub(super) fetches: Failures,
    /// Consecutive passes that could not publish what they wrote.
    unpublished: Failures,
    /// Why the loop gives up (`--max-failures` reached before any revision
    /// was ever applied); the daemon then exits.
    gave_up: Option<String>,
    pauses_seen: String,
    /// The pin last seen in the ledger (written by `tend pin`).
    pin_seen: String,
    /// The targets' subscriptions, with their watches of live state.
    pub(super) watch: Subscriptions,
    /// The revision the watches were told the managed set of.
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
    /// A full pass to run then: newly begun watches ask to look again, or
    /// a full pass that failed is retried.
    full_due: Option<Instant>,
    /// The context's clock: the wall time retries are reckoned from.
    clock: Arc<dyn Clock>,
    /// The mirror's collection running beside the loop, if one is.
    collecting: Option<tokio::task::JoinHandle<()>>,
    /// The current revision was read for the pass about to run: its keys
    /// need no second reading.
    just_read: bool,
    /// This replica's role with `ha` (the elector sets it), and the role
    /// last published.
    fence: Fence,
    role_seen: Option<(String, Option<String>)>,
    /// With `fleet:`, this host's part in it (see `fleet.rs`).
    pub(super) fleet: Option<Arc<super::Fleet>>,
    /// With `fleet.rollout`: the held revision and the coordinator.
    pub(super) rollout: Option<crate::fleet::rollout::Staged>,
}

impl Loop {
    pub(super) fn new(
        settings: Settings,
        shared: Shared,
        watch: Subscriptions,
        notifier: Arc<Notifier>,
    ) -> Loop {
        if let Some(why) = crate::ledger::reserve_write_failure_note(&settings.state_dir) {
            *shared.unrecorded.lock().expect("unrecorded outcomes") = Unrecorded::resume(why);
        }
        let (rollout, gave_up) = match crate::fleet::rollout::Staged::start(&settings) {
            Ok(r) => (r, None),
            Err(e) => (None, Some(e.to_string())),
        };
        let (clock, fence) = {
            let w = shared.worker.lock().expect("worker lock");
            (w.ctx.clock.clone(), w.ctx.fence.clone())
        };
        Loop {
            opts: PassOptions {
                allow_mass_prune: false,
                dry_run: settings.policy.dry_run,
                follower: false,
            },
            settings,
            shared,
            queue: Queue::new(),
            fetches: Failures::default(),
            unpublished: Failures::default(),
            gave_up,
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
            collecting: None,
            full_due: None,
            clock,
            just_read: false,
            fence,
            role_seen: None,
            fleet: None,
            rollout,
        }
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        match (self.queue.next_due(), self.full_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(super) fn schedule_now(&mut self, ids: Vec<ResourceId>) {
        for id in ids {
            self.queue.schedule_now(id);
        }
    }

    /// Runs the full pass or the keys whose time has come.
    pub(super) async fn due_keys(&mut self) {
        if self.full_due.is_some_and(|t| t <= Instant::now()) {
            return self.pass(Scope::All).await;
        }
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

    /// Why the daemon must stop, once it must.
    pub(super) fn gave_up(&self) -> Option<&str> {
        self.gave_up.as_deref()
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
                    if let Err(e) = trust::record(&rec.ledger, g, ctx.clock.now()) {
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
            Ok(Ok(admitted)) if differs(&admitted) => {
                if self.staged(&admitted).await {
                    self.switch_to(admitted).await
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(refused)) => {
                tracing::warn!(%refused, "the last good revision stays applied");
                if count {
                    publish::refused(&self.shared.metrics, refused.refusal.reason.as_str());
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
        let watched = self.watch.healthy();
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
        self.just_read = true;
        self.pass(scope).await;
    }

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

    pub(super) async fn pass(&mut self, scope: Scope) {
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
                Scope::All => reconcile::full_pass(ctx, rec, &rev2, opts, &ctl),
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
            let now = |id| resources.get(id).map(|d| &d.path);
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

    /// A pass failed before it had outcomes: its keys, or the pass over
    /// everything, are tried again with backoff, and the failure is kept
    /// for status (the ledger's records are older than it).
    async fn pass_failed(&mut self, keys: &[ResourceId], e: &reconcile::PassError) {
        if let Some(err) = e.ledger() {
            crate::ledger::note_damage(&self.settings.state_dir, err);
        }
        let (why, now) = (e.to_string(), self.clock.now());
        if keys.is_empty() {
            let wait = self
                .shared
                .unrecorded
                .lock()
                .expect("unrecorded outcomes")
                .full_failed(&why, now);
            tracing::warn!(error = %e, retry_in = ?wait, "pass failed; it is run again with backoff");
            self.full_due = Some(Instant::now() + wait);
        } else {
            let records = self
                .shared
                .unrecorded
                .lock()
                .expect("unrecorded outcomes")
                .keys_failed(keys, &why, now);
            tracing::warn!(error = %e, keys = keys.len(), "pass failed; its resources are tried again with backoff");
            self.requeue_records(records);
        }
        self.note_unrecorded();
        self.publish(true).await;
    }

    /// A pass's outcomes could not be recorded: they are kept in memory and
    /// those the error policy retries are requeued from there. A pass over
    /// everything (its revision's records too) is run again with backoff.
    async fn unrecorded(
        &mut self,
        report: &PassReport,
        error: &crate::ledger::LedgerError,
        whole: bool,
    ) {
        crate::ledger::note_damage(&self.settings.state_dir, error);
        let ids: Vec<String> = report
            .outcomes
            .iter()
            .filter(|(_, o)| unrecorded::worth_keeping(o))
            .map(|(id, _)| id.to_string())
            .collect();
        // Read where they can be (a full disk still reads): attempts and
        // drift ages go on from the ledger's records.
        let ledger: HashMap<String, ResourceRecord> = self
            .blocking(move |_, rec| rec.ledger.resources_of(ids.iter().map(String::as_str)))
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        let (why, now) = (error.to_string(), self.clock.now());
        let mut kept = self.shared.unrecorded.lock().expect("unrecorded outcomes");
        let records = kept.outcomes(&report.outcomes, &ledger, &why, now);
        let again = whole.then(|| kept.full_failed(&why, now));
        drop(kept);
        tracing::warn!(%error, kept = records.len(), "cannot record the pass's outcomes; they are kept in memory and tried again with backoff");
        if let Some(wait) = again {
            self.full_due = Some(Instant::now() + wait);
        }
        self.requeue_records(records);
        self.note_unrecorded();
    }

    /// A pass recorded its outcomes: what was kept of them is dropped, and
    /// the rest of what the ledger could not take before is written now.
    async fn recorded(&mut self, report: &PassReport, full: bool) {
        let left = {
            let mut kept = self.shared.unrecorded.lock().expect("unrecorded outcomes");
            if kept.failure().is_none() && kept.records().next().is_none() {
                return;
            }
            kept.recorded(report.outcomes.keys(), full)
        };
        let written = self
            .blocking(move |_, rec| {
                if left.is_empty() {
                    return Ok(());
                }
                rec.ledger
                    .transaction(|tx| left.iter().try_for_each(|r| tx.put_resource(r)))
            })
            .await;
        match written {
            Ok(()) => {
                self.shared
                    .unrecorded
                    .lock()
                    .expect("unrecorded outcomes")
                    .written();
                crate::ledger::clear_write_failure(&self.settings.state_dir);
                tracing::info!(
                    "the ledger takes writes again: every outcome kept in memory is recorded"
                );
            }
            Err(e) => tracing::warn!(error = %e, "cannot record the outcomes kept in memory yet"),
        }
    }

    /// Schedules the retries of records kept in memory, by the same rule.
    fn requeue_records(&mut self, records: Vec<ResourceRecord>) {
        let now = self.clock.now();
        for r in records {
            let step = next_step(&Outcome::of_record(&r), &self.settings.policy, now);
            self.queue.after(ResourceId::from_string(r.id), step);
        }
    }

    /// Leaves a note beside the ledger for `tend status`, when the state
    /// dir can take one: the ledger's own records are older than what the
    /// daemon knows.
    fn note_unrecorded(&self) {
        let failure = self
            .shared
            .unrecorded
            .lock()
            .expect("unrecorded outcomes")
            .failure()
            .map(String::from);
        if let Some(why) = failure {
            let _ = crate::ledger::note_write_failure(&self.settings.state_dir, &why);
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
        let (kept, failing) = {
            let kept = self.shared.unrecorded.lock().expect("unrecorded outcomes");
            (
                kept.records().cloned().collect::<Vec<_>>(),
                kept.failure().is_some(),
            )
        };
        let role = self.role();
        self.shared
            .metrics
            .set_ha_leader(role.as_ref().is_some_and(|(r, _)| r == "leader"));
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
    pub(super) fn role(&self) -> Option<(String, Option<String>)> {
        let role = self.fence.role()?;
        Some((role.name().to_string(), self.fence.leader_name()))
    }

    /// Schedules what the error policy calls for after a pass: each
    /// outcome carries the retry time its record was given.
    fn requeue(&mut self, report: &PassReport) {
        let now = self.clock.now();
        for (id, o) in &report.outcomes {
            let step = next_step(o, &self.settings.policy, now);
            self.queue.after(id.clone(), step);
        }
    }

    /// The pin lives in the ledger, written by `tend pin` and `tend unpin`;
    /// one that ran out reads as none.
    pub(super) async fn pin_changed(&mut self) -> bool {
        let now = self
            .blocking(|ctx, rec| format!("{:?}", rec.ledger.pin_at(ctx.clock.now()).ok()))
            .await;
        let changed = now != self.pin_seen;
        self.pin_seen = now;
        changed
    }

    /// Pauses live in the ledger, written by `tend pause`: a change starts a pass.
    pub(super) async fn pauses_changed(&mut self) -> bool {
        let now = self
            .blocking(|ctx, rec| format!("{:?}", rec.ledger.pauses_at(ctx.clock.now()).ok()))
            .await;
        let changed = now != self.pauses_seen;
        self.pauses_seen = now;
        changed
    }
}

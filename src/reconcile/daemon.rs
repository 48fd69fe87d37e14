//! `tend run`: the continuous loop. Triggers (poll with jitter, resync,
//! retries, file-system events, webhooks) only decide *when* a resource is
//! looked at; every pass observes afresh and decides *what* to do.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, Notify};
use tokio::time::{sleep_until, Instant};

use super::notify::Notifier;
use super::watch::Watch;
use super::{
    backoff, load_next, publish, Context, Control, Next, PassOptions, PassReport, Queue, Recorder,
    Revision, Scope,
};
use crate::config::{Settings, TargetKind};
use crate::ledger::State;
use crate::metrics::Metrics;
use crate::model::ResourceId;

/// Why the loop should look at something sooner than its timers say.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// Fetch now (refresh, webhook).
    Fetch,
    /// These resources may have drifted (file-system or plugin events).
    Keys(Vec<ResourceId>),
    /// A full pass now (watch overflow, pause changes).
    FullPass,
}

/// The metrics' drift ages are brought up to date at least this often, so
/// they grow between events as the ledger's ages do.
const AGES_EVERY: Duration = Duration::from_secs(5);

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tend: {message}");
    ExitCode::from(2)
}

fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.9..1.1))
}

/// The error policy: when to look at a resource again after a pass.
pub fn action_for(
    state: State,
    next_retry: Option<SystemTime>,
    settings: &Settings,
) -> super::Action {
    match state {
        _ if !retried(state) => super::Action::await_change(),
        State::Contested => {
            super::Action::requeue(settings.policy.contested_window.min(backoff::MAX))
        }
        // Failed, Unknown: at the backoff's time.
        _ => {
            let wait = next_retry
                .and_then(|t| t.duration_since(SystemTime::now()).ok())
                .unwrap_or(backoff::BASE);
            super::Action::requeue(wait)
        }
    }
}

/// Whether [`action_for`] can requeue a resource in `state`; any other
/// state waits for a change.
fn retried(state: State) -> bool {
    matches!(state, State::Failed | State::Unknown | State::Contested)
}

/// The context and recorder, used only from blocking tasks, one at a time:
/// the Git handles inside are not shareable between threads.
pub(crate) struct Worker {
    pub ctx: Context,
    pub rec: Recorder,
}

/// What the loop shares with the HTTP server and systemd.
pub(crate) struct Shared {
    pub worker: Arc<Mutex<Worker>>,
    pub current: Arc<Mutex<Option<Arc<Revision>>>>,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    pub ctl: Arc<Control>,
}

struct Loop {
    settings: Settings,
    shared: Shared,
    queue: Queue,
    current: Option<Arc<Revision>>,
    opts: PassOptions,
    fetch_failures: u32,
    pauses_seen: String,
    watch: Option<Watch>,
    /// The revision the watch index was built for.
    watched: Option<git2::Oid>,
    /// The current revision, when its last pruning pass applied it whole:
    /// the next revision is then reconciled from it by its changes.
    settled: Option<git2::Oid>,
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
    async fn blocking<T: Send + 'static>(
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

    /// Fetches; on a new revision loads it and runs a full pass.
    async fn poll(&mut self) -> Duration {
        let result = self
            .blocking(|ctx, rec| super::fetch(ctx, rec, SystemTime::now()))
            .await;
        publish::fetch(&self.shared.metrics, result.is_ok());
        let interval = self.settings.source.interval;
        match result {
            Ok(id) => {
                self.fetch_failures = 0;
                if self.current.as_ref().map(|r| r.id) != Some(id) {
                    self.switch_to(id).await;
                }
                jitter(interval)
            }
            Err(e) => {
                self.fetch_failures += 1;
                tracing::warn!(error = %e, failures = self.fetch_failures, "fetch failed; the last good state stays");
                if self.current.is_none() {
                    if let Ok(Some(id)) = self.blocking(|ctx, _| ctx.mirror.resolved()).await {
                        self.switch_to(id).await;
                    }
                }
                self.publish(true).await;
                backoff::jittered(self.fetch_failures).min(interval)
            }
        }
    }

    /// Reads revision `id` and reconciles it: from the current revision,
    /// when that one is settled and the watcher sees drift, only what
    /// changed; otherwise all of it.
    async fn switch_to(&mut self, id: git2::Oid) {
        // Without a healthy watcher, drift of unchanged resources is only
        // seen by full passes: a new revision gets one, as the resync does.
        let watched = self.watch.as_ref().is_some_and(|w| w.healthy());
        let settled = watched
            && self
                .current
                .as_ref()
                .is_some_and(|r| Some(r.id) == self.settled);
        // The previous revision's desired state is reused, not copied, when
        // nothing else holds it.
        let prev = if settled {
            self.shared.current.lock().expect("current revision").take();
            self.current.take()
        } else {
            None
        };
        let loaded = self.blocking(move |ctx, _| load_next(ctx, prev, id)).await;
        let (rev, scope) = match loaded {
            Ok(Next::Whole(rev)) => (rev, Scope::All),
            Ok(Next::Changes { rev, keys }) => (rev, Scope::Changes(keys)),
            Err((e, prev)) => {
                if let Some(prev) = prev {
                    *self.shared.current.lock().expect("current revision") = Some(prev.clone());
                    self.current = Some(prev);
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
        let rev = Arc::new(rev);
        *self.shared.current.lock().expect("current revision") = Some(rev.clone());
        self.current = Some(rev);
        self.settled = None;
        self.pass(scope).await;
    }

    async fn pass(&mut self, scope: Scope) {
        // Keys from the queue are marked running until the pass ends.
        let keys: Vec<ResourceId> = match &scope {
            Scope::Keys(k) => k.iter().cloned().collect(),
            Scope::All | Scope::Changes(_) => Vec::new(),
        };
        let Some(rev) = self.current.clone() else {
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
            .blocking(move |ctx, rec| -> Result<PassReport, super::PassError> {
                match scope {
                    Scope::All => super::full_pass(ctx, rec, &rev2, opts, &ctl),
                    Scope::Changes(_) => super::pruning_pass(ctx, rec, &rev2, scope, opts, &ctl),
                    Scope::Keys(_) => {
                        let prepared = super::prepare(ctx, &rev2, &rec.ledger, scope)?;
                        super::apply(ctx, rec, &rev2, &prepared, opts, &ctl)
                    }
                }
            })
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
                    let _ = rec.ledger.set_meta("watcher", &line);
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

    /// Pauses live in the ledger, written by `tend pause`: a change starts a pass.
    async fn pauses_changed(&mut self) -> bool {
        let now = self
            .blocking(|_, rec| format!("{:?}", rec.ledger.pauses().ok()))
            .await;
        let changed = now != self.pauses_seen;
        self.pauses_seen = now;
        changed
    }
}

/// Cancels on SIGTERM or SIGINT; a second signal exits at once.
fn watch_signals(ctl: Arc<Control>, stop: Arc<Notify>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!("stopping: finishing in-flight writes");
        ctl.cancel();
        stop.notify_waiters();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        std::process::exit(130);
    });
}

/// systemd: extend the start timeout while the first pass runs, and ping
/// the watchdog only while the loop shows signs of life.
fn keep_systemd_informed(notifier: Arc<Notifier>, ready: Arc<AtomicBool>, ctl: Arc<Control>) {
    if !notifier.enabled() {
        return;
    }
    let n = notifier.clone();
    tokio::spawn(async move {
        while !ready.load(Ordering::SeqCst) {
            n.extend(Duration::from_secs(30));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    if let Some(period) = notifier.watchdog_period() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                let age = super::control::unix_millis(SystemTime::now())
                    .saturating_sub(ctl.last_beat_millis());
                if Duration::from_millis(age) < period * 2 {
                    notifier.watchdog();
                }
            }
        });
    }
}

pub fn run(settings: Settings) -> ExitCode {
    let (lock, ctx, rec) = match super::open_writer(settings, "tend run") {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let code = rt.block_on(run_loop(ctx, rec));
    rt.shutdown_timeout(Duration::from_secs(2));
    drop(lock);
    code
}

async fn run_loop(ctx: Context, rec: Recorder) -> ExitCode {
    let ctl = Arc::new(Control::default());
    ctl.beat();
    let stop = Arc::new(Notify::new());
    watch_signals(ctl.clone(), stop.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // Plugins' `changed` notifications name resources to look at now.
    let changes = tx.clone();
    ctx.subscribe(Arc::new(move |ids| drop(changes.send(Trigger::Keys(ids)))));
    let settings = ctx.settings.clone();
    let metrics = Arc::new(Metrics::new());
    for name in ctx.targets.keys() {
        metrics.writes(name, 0);
    }
    let shared = Shared {
        worker: Arc::new(Mutex::new(Worker { ctx, rec })),
        current: Arc::new(Mutex::new(None)),
        metrics,
        ready: Arc::new(AtomicBool::new(false)),
        ctl: ctl.clone(),
    };
    if let Err(e) = super::http::start(&settings, &shared, tx.clone(), stop.clone()).await {
        return fail(e);
    }
    let notifier = Arc::new(Notifier::from_env());
    keep_systemd_informed(notifier.clone(), shared.ready.clone(), ctl.clone());
    let watch = settings.policy.watch.then(|| {
        let roots: BTreeMap<String, std::path::PathBuf> = settings
            .targets
            .iter()
            .filter_map(|t| match &t.kind {
                TargetKind::Files { root } => Some((t.name.clone(), root.clone())),
                _ => None,
            })
            .collect();
        let w = Watch::start(roots, tx.clone());
        ctl.observe_writes(w.write_observer());
        w
    });
    tracing::info!(repo = %crate::source::redact_url(&settings.source.repo), "tend run started");
    let resync = settings.policy.resync;
    let mut lp = Loop {
        opts: PassOptions {
            allow_mass_prune: false,
            dry_run: settings.policy.dry_run,
        },
        settings,
        shared,
        queue: Queue::new(),
        current: None,
        fetch_failures: 0,
        pauses_seen: String::new(),
        watch,
        watched: None,
        settled: None,
        notifier: notifier.clone(),
        last_published: None,
        publish_pending: false,
        ages_grow: false,
        watch_line: None,
    };
    lp.pauses_changed().await;
    let mut next_fetch = Instant::now();
    let mut next_resync = Instant::now() + jitter(resync);
    let far = || Instant::now() + Duration::from_secs(86400);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let stopped = stop.notified();
    tokio::pin!(stopped);
    while !ctl.cancelled() {
        let due = lp.queue.next_due().unwrap_or_else(far);
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            Some(t) = rx.recv() => match t {
                Trigger::Fetch => next_fetch = Instant::now(),
                Trigger::FullPass => lp.pass(Scope::All).await,
                Trigger::Keys(ids) => for id in ids { lp.queue.schedule_now(id) },
            },
            _ = sleep_until(next_fetch) => {
                let wait = lp.poll().await;
                next_fetch = Instant::now() + wait;
            }
            _ = sleep_until(next_resync) => {
                lp.pass(Scope::All).await;
                next_resync = Instant::now() + jitter(resync);
            }
            _ = sleep_until(due) => {
                let keys: BTreeSet<ResourceId> = lp.queue.take_due(Instant::now(), 10_000).into_iter().collect();
                if !keys.is_empty() {
                    lp.pass(Scope::Keys(keys)).await;
                }
            }
            _ = tick.tick() => {
                ctl.beat();
                if lp.pauses_changed().await {
                    lp.pass(Scope::All).await;
                }
                // Without drift nothing changes between passes: idle stays idle.
                let stale = lp.ages_grow
                    && lp.last_published.is_some_and(|t| t.elapsed() >= AGES_EVERY);
                if lp.publish_pending || stale {
                    lp.publish(false).await;
                }
            }
        }
    }
    notifier.stopping();
    tracing::info!("stopped by signal");
    ExitCode::SUCCESS
}

//! `tend run`: the continuous loop. Triggers (poll with jitter, resync,
//! retries, events) only decide *when* a resource is looked at; every pass
//! observes afresh and decides *what* to do from live state.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::{backoff, load, recover, Context, Control, PassOptions, PassReport, Queue, Recorder, Revision, Scope};
use crate::config::Settings;
use crate::ledger::{Ledger, State, StateLock};
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

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tend: {message}");
    ExitCode::from(2)
}

fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.9..1.1))
}

/// The error policy: when to look at a resource again after a pass.
pub fn action_for(state: State, next_retry: Option<SystemTime>, settings: &Settings) -> super::Action {
    match state {
        State::Failed | State::Unknown => {
            let wait = next_retry
                .and_then(|t| t.duration_since(SystemTime::now()).ok())
                .unwrap_or(backoff::BASE);
            super::Action::requeue(wait)
        }
        State::Contested => super::Action::requeue(settings.policy.contested_window.min(backoff::MAX)),
        _ => super::Action::await_change(),
    }
}

/// The context and recorder, used only from blocking tasks, one at a time:
/// the Git handles inside are not shareable between threads.
struct Worker {
    ctx: Context,
    rec: Recorder,
}

struct Loop {
    settings: Settings,
    worker: Arc<Mutex<Worker>>,
    ctl: Arc<Control>,
    queue: Queue,
    current: Option<Arc<Revision>>,
    opts: PassOptions,
    fetch_failures: u32,
    pauses_seen: String,
}

impl Loop {
    async fn blocking<T: Send + 'static>(&self, f: impl FnOnce(&Context, &mut Recorder) -> T + Send + 'static) -> T {
        let worker = self.worker.clone();
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
        let result = self.blocking(|ctx, rec| super::fetch(ctx, rec, SystemTime::now())).await;
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
                backoff::jittered(self.fetch_failures).min(interval)
            }
        }
    }

    async fn switch_to(&mut self, id: git2::Oid) {
        let loaded = self.blocking(move |ctx, _| load(ctx, id)).await;
        match loaded {
            Ok(rev) => {
                tracing::info!(revision = %id, resources = rev.declared.resources.len(), "new revision");
                self.current = Some(Arc::new(rev));
                self.pass(Scope::All).await;
            }
            Err(e) => tracing::warn!(revision = %id, error = %e, "cannot read revision; the last good state stays"),
        }
    }

    async fn pass(&mut self, scope: Scope) {
        let Some(rev) = self.current.clone() else { return };
        let (opts, ctl) = (self.opts, self.ctl.clone());
        let full = matches!(scope, Scope::All);
        let keys: Vec<ResourceId> = match &scope {
            Scope::Keys(k) => k.iter().cloned().collect(),
            Scope::All => Vec::new(),
        };
        let result = self
            .blocking(move |ctx, rec| -> Result<PassReport, super::PassError> {
                if full {
                    super::full_pass(ctx, rec, &rev, opts, &ctl)
                } else {
                    let inventory = rec.ledger.inventory()?;
                    let prepared = super::prepare(ctx, &rev, &inventory, scope);
                    super::apply(ctx, rec, &rev, &prepared, opts, &ctl)
                }
            })
            .await;
        for k in &keys {
            self.queue.done(k);
        }
        match result {
            Ok(report) => {
                if full || report.applied > 0 || report.failed > 0 {
                    tracing::info!(
                        full,
                        applied = report.applied,
                        pruned = report.deleted,
                        failed = report.failed,
                        converged = report.converged,
                        "pass ended"
                    );
                }
                self.requeue(&report).await;
            }
            Err(e) => tracing::warn!(error = %e, "pass failed"),
        }
    }

    async fn requeue(&mut self, report: &PassReport) {
        let ids: Vec<ResourceId> = report.outcomes.keys().cloned().collect();
        let records = self
            .blocking(move |_, rec| {
                ids.into_iter().filter_map(|id| rec.ledger.resource(id.as_str()).ok().flatten()).collect::<Vec<_>>()
            })
            .await;
        for r in records {
            let action = action_for(r.state, r.next_retry, &self.settings);
            self.queue.after(ResourceId::from_string(r.id), action);
        }
    }

    /// Pauses live in the ledger, written by `tend pause`: a change starts a pass.
    async fn pauses_changed(&mut self) -> bool {
        let now = self.blocking(|_, rec| format!("{:?}", rec.ledger.pauses().ok())).await;
        let changed = now != self.pauses_seen;
        self.pauses_seen = now;
        changed
    }
}

/// Sets the control's cancel flag on SIGTERM or SIGINT; a second signal
/// exits at once.
fn watch_signals(ctl: Arc<Control>, stop: Arc<tokio::sync::Notify>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!("stopping: finishing in-flight writes");
        ctl.cancel();
        stop.notify_one();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        std::process::exit(130);
    });
}

pub fn run(settings: Settings) -> ExitCode {
    let lock = match StateLock::acquire(&settings.state_dir, "tend run") {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let ledger = match Ledger::open(&settings.state_dir) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let ctx = match Context::build(settings) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let rec = match Recorder::open(ledger) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if let Err(e) = recover(&ctx, &rec) {
        return fail(e);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let (_tx, rx) = mpsc::unbounded_channel();
    let code = rt.block_on(run_loop(ctx, rec, rx));
    drop(lock);
    code
}

async fn run_loop(ctx: Context, rec: Recorder, mut rx: mpsc::UnboundedReceiver<Trigger>) -> ExitCode {
    let ctl = Arc::new(Control::default());
    let stop = Arc::new(tokio::sync::Notify::new());
    watch_signals(ctl.clone(), stop.clone());
    let opts = PassOptions { allow_mass_prune: false, dry_run: ctx.settings.policy.dry_run };
    let resync = ctx.settings.policy.resync;
    tracing::info!(repo = %crate::source::redact_url(&ctx.settings.source.repo), "tend run started");
    let mut lp = Loop {
        settings: ctx.settings.clone(),
        worker: Arc::new(Mutex::new(Worker { ctx, rec })),
        ctl: ctl.clone(),
        queue: Queue::new(),
        current: None,
        opts,
        fetch_failures: 0,
        pauses_seen: String::new(),
    };
    lp.pauses_changed().await;
    let mut next_fetch = Instant::now();
    let mut next_resync = Instant::now() + jitter(resync);
    let far = || Instant::now() + Duration::from_secs(86400);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !ctl.cancelled() {
        let due = lp.queue.next_due().unwrap_or_else(far);
        tokio::select! {
            biased;
            _ = stop.notified() => break,
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
            Some(t) = rx.recv() => match t {
                Trigger::Fetch => next_fetch = Instant::now(),
                Trigger::FullPass => lp.pass(Scope::All).await,
                Trigger::Keys(ids) => for id in ids { lp.queue.schedule_now(id) },
            },
            _ = tick.tick() => {
                ctl.beat();
                if lp.pauses_changed().await {
                    lp.pass(Scope::All).await;
                }
            }
        }
    }
    tracing::info!("stopped by signal");
    ExitCode::SUCCESS
}

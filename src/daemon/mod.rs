//! `tend run`: the daemon. It owns the runtime, signals and systemd, the
//! event loop with its triggers and queue, the HTTP wiring and metrics
//! publishing; it decides *when* the pass (src/reconcile) looks at what,
//! never *what* is done.

mod driver;
mod http;
mod notify;
mod publish;
mod queue;
mod signals;
mod trigger;
mod watch;
mod worker;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::{sleep_until, Instant};

use crate::config::{Settings, TargetKind};
use crate::metrics::Metrics;
use crate::reconcile::{self, Context, Control, Recorder, Scope};
use driver::{jitter, Loop};
use notify::Notifier;
use signals::{keep_systemd_informed, watch_signals};
pub(crate) use trigger::Trigger;
use watch::Watch;
pub(crate) use worker::{Shared, Worker};

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tend: {message}");
    ExitCode::from(2)
}

pub fn run(settings: Settings) -> ExitCode {
    let (lock, ctx, rec) = match reconcile::open_writer(settings, "tend run") {
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
    let shared = Shared::new(Worker { ctx, rec }, metrics, ctl.clone());
    if let Err(e) = http::start(&settings, &shared, tx.clone(), stop.clone()).await {
        return fail(e);
    }
    let notifier = Arc::new(Notifier::from_env());
    keep_systemd_informed(notifier.clone(), shared.ready.clone(), ctl.clone());
    let watch = settings.policy.watch.then(|| {
        let roots: BTreeMap<String, std::path::PathBuf> = settings
            .targets
            .iter()
            .filter_map(|t| match &t.kind {
                TargetKind::Files(c) => Some((t.name.clone(), c.root.clone())),
                _ => None,
            })
            .collect();
        let w = Watch::start(roots, tx.clone());
        ctl.observe_writes(w.write_observer());
        w
    });
    tracing::info!(repo = %crate::source::redact_url(&settings.source.repo), "tend run started");
    let resync = settings.policy.resync;
    let mut lp = Loop::new(settings, shared, watch, notifier.clone());
    lp.pauses_changed().await;
    let mut next_fetch = Instant::now();
    let mut next_resync = Instant::now() + jitter(resync);
    let far = || Instant::now() + Duration::from_secs(86400);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let stopped = stop.notified();
    tokio::pin!(stopped);
    while !ctl.cancelled() {
        let due = lp.next_due().unwrap_or_else(far);
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            Some(t) = rx.recv() => match t {
                Trigger::Fetch => next_fetch = Instant::now(),
                Trigger::FullPass => lp.pass(Scope::All).await,
                Trigger::Keys(ids) => lp.schedule_now(ids),
            },
            _ = sleep_until(next_fetch) => {
                let wait = lp.poll().await;
                next_fetch = Instant::now() + wait;
            }
            _ = sleep_until(next_resync) => {
                lp.pass(Scope::All).await;
                next_resync = Instant::now() + jitter(resync);
            }
            _ = sleep_until(due) => lp.due_keys().await,
            _ = tick.tick() => {
                ctl.beat();
                lp.tick().await;
            }
        }
    }
    notifier.stopping();
    tracing::info!("stopped by signal");
    ExitCode::SUCCESS
}

//! `tend run`: the daemon. It owns the runtime, signals and systemd, the
//! event loop with its triggers and queue, the HTTP wiring and metrics
//! publishing; it decides *when* the pass (src/reconcile) looks at what,
//! never *what* is done.

mod driver;
mod http;
mod notify;
mod publish;
mod queue;
mod reload;
mod signals;
mod subscriptions;
mod trigger;
mod unrecorded;
mod worker;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::{sleep_until, Instant};

use crate::config::Settings;
use crate::metrics::Metrics;
use crate::reconcile::{self, Context, Control, Recorder, Scope};
use driver::{jitter, Loop};
use notify::Notifier;
pub use reload::ReadConfig;
use signals::{keep_systemd_informed, watch_hangup, watch_signals};
use subscriptions::Subscriptions;
pub(crate) use trigger::Trigger;
pub(crate) use worker::{Shared, Worker};

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tend: {message}");
    ExitCode::from(2)
}

/// Runs the daemon with `settings`; `read_config` reads them again on
/// SIGHUP.
pub fn run(settings: Settings, read_config: ReadConfig) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    // SIGHUP's default ends the process: it is caught from the start, and
    // one that comes during recovery is answered once the loop runs.
    let hangup = {
        let _entered = rt.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    };
    let hangup = match hangup {
        Ok(h) => h,
        Err(e) => return fail(format!("cannot handle SIGHUP: {e}")),
    };
    let (lock, ctx, rec) = match reconcile::open_writer(settings, "tend run") {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let code = rt.block_on(run_loop(ctx, rec, hangup, read_config));
    rt.shutdown_timeout(Duration::from_secs(2));
    drop(lock);
    code
}

async fn run_loop(
    ctx: Context,
    rec: Recorder,
    hangup: tokio::signal::unix::Signal,
    read_config: ReadConfig,
) -> ExitCode {
    let ctl = Arc::new(Control::default());
    ctl.beat();
    let stop = Arc::new(Notify::new());
    watch_signals(ctl.clone(), stop.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    watch_hangup(hangup, tx.clone());
    // Targets' notifications (plugins' `changed`, file-system events) name
    // resources to look at now.
    let watch = Subscriptions::start(&ctx.targets, &tx, ctx.settings.policy.watch);
    let settings = ctx.settings.clone();
    let metrics = Arc::new(Metrics::new());
    for name in ctx.targets.keys() {
        metrics.writes(name, 0);
    }
    let shared = Shared::new(Worker { ctx, rec }, metrics, ctl.clone());
    let mut fetches = match http::start(&settings, &shared, stop.clone()).await {
        Ok(rx) => rx,
        Err(e) => return fail(e),
    };
    let notifier = Arc::new(Notifier::from_env());
    keep_systemd_informed(notifier.clone(), shared.ready.clone(), ctl.clone());
    tracing::info!(repo = %crate::source::redact_url(&settings.source.repo), "tend run started");
    let mut resync = settings.policy.resync;
    let mut lp = Loop::new(settings, shared, watch, notifier.clone());
    lp.pauses_changed().await;
    lp.pin_changed().await;
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
            Some(_) = fetches.recv() => next_fetch = Instant::now(),
            Some(t) = rx.recv() => match t {
                Trigger::FullPass => lp.pass(Scope::All).await,
                Trigger::Reload => {
                    reload::reload(&mut lp, &read_config).await;
                    // The new settings' timers, from now.
                    next_fetch = Instant::now() + jitter(lp.settings.source.interval);
                    resync = lp.settings.policy.resync;
                    next_resync = Instant::now() + jitter(resync);
                }
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
        if let Some(reason) = lp.gave_up() {
            notifier.stopping();
            return fail(format!("giving up: {reason}"));
        }
    }
    notifier.stopping();
    tracing::info!("stopped by signal");
    ExitCode::SUCCESS
}

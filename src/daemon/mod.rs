//! `tend run`: the daemon. It owns the runtime, signals and systemd, the
//! event loop with its triggers and queue, the HTTP wiring and metrics
//! publishing; it decides *when* the pass (src/reconcile) looks at what,
//! never *what* is done.

mod driver;
mod event_loop;
mod fleet;
mod http;
mod notify;
mod publish;
mod queue;
mod reload;
mod rollout;
mod signals;
mod subscriptions;
#[cfg(test)]
mod tests;
mod trigger;
mod unrecorded;
mod worker;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::config::Settings;
use crate::reconcile::{self, Context, Control, Recorder};
use event_loop::{EventLoop, Inputs};
pub(crate) use fleet::Fleet;
use notify::Notifier;
pub use reload::ReadConfig;
use signals::{keep_systemd_informed, watch_hangup, watch_signals};
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
    let (tx, rx) = mpsc::unbounded_channel();
    watch_hangup(hangup, tx.clone());
    let settings = ctx.settings.clone();
    // With `ha`, the elector sets the role the passes read; becoming the
    // leader asks for a full pass.
    let _elector = match &settings.ha {
        Some(ha) => {
            let to_loop = tx.clone();
            let on_lead: crate::ha::OnLead = Arc::new(move || {
                let _ = to_loop.send(Trigger::FullPass);
            });
            match crate::ha::Elector::start(ha, &settings.host.name, ctx.fence.clone(), on_lead) {
                Ok(e) => Some(e),
                Err(e) => return fail(format!("ha: {e}")),
            }
        }
        None => None,
    };
    // With `fleet`: this host's status in etcd, and one fetch for the fleet.
    let fleet = match Fleet::start(&settings, tx.clone()) {
        Ok(f) => f,
        Err(e) => return fail(format!("fleet: {e}")),
    };
    let mut events = EventLoop::new(ctx, rec, ctl.clone(), tx.clone());
    events.join_fleet(fleet.clone());
    let fetches = match http::start(&settings, events.shared(), stop.clone()).await {
        Ok(rx) => rx,
        Err(e) => return fail(e),
    };
    let notifier = Arc::new(Notifier::from_env());
    let ready = events.shared().ready.clone();
    keep_systemd_informed(notifier.clone(), ready, ctl.clone());
    tracing::info!(repo = %crate::source::redact_url(&settings.source.repo), "tend run started");
    let inputs = Inputs {
        stop,
        triggers: rx,
        fetches,
    };
    let ended = events.run(notifier.clone(), inputs, &read_config).await;
    notifier.stopping();
    match ended {
        Ok(()) => {
            tracing::info!("stopped by signal");
            ExitCode::SUCCESS
        }
        Err(reason) => fail(format!("giving up: {reason}")),
    }
}

//! `tend run`: the daemon. It owns the runtime, signals and systemd, the
//! event loop with its triggers and queue, the HTTP wiring and metrics
//! publishing; it decides *when* the pass (src/reconcile) looks at what,
//! never *what* is done.

mod driver;
mod event_loop;
mod fleet;
mod http;
mod memory;
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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::config::Settings;
use crate::reconcile::{self, Context, Control, Recorder, WriterError};
use crate::target::etcd::ClientError;
pub use event_loop::GaveUp;
use event_loop::{EventLoop, Inputs};
pub(crate) use fleet::Fleet;
pub use http::HttpError;
use notify::Notifier;
pub use reload::ReadConfig;
use signals::{keep_systemd_informed, watch_hangup, watch_signals};
pub(crate) use trigger::Trigger;
pub(crate) use worker::{Shared, Worker};

/// Why the daemon did not start, or stopped of its own accord.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot handle SIGHUP: {0}")]
    Hangup(#[source] std::io::Error),
    #[error(transparent)]
    Writer(#[from] WriterError),
    #[error("ha: {0}")]
    Ha(#[source] ClientError),
    #[error("fleet: {0}")]
    Fleet(#[source] ClientError),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("giving up: {0}")]
    GaveUp(#[source] GaveUp),
}

/// Runs the daemon with `settings` until a signal stops it; `read_config`
/// reads them again on SIGHUP.
pub fn run(settings: Settings, read_config: ReadConfig) -> Result<(), DaemonError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    // SIGHUP's default ends the process: it is caught from the start, and
    // one that comes during recovery is answered once the loop runs.
    let hangup = {
        let _entered = rt.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    };
    let hangup = hangup.map_err(DaemonError::Hangup)?;
    let (lock, ctx, rec) = reconcile::open_writer(settings, "tend run")?;
    let ended = rt.block_on(run_loop(ctx, rec, hangup, read_config));
    rt.shutdown_timeout(Duration::from_secs(2));
    drop(lock);
    ended
}

async fn run_loop(
    ctx: Context,
    rec: Recorder,
    hangup: tokio::signal::unix::Signal,
    read_config: ReadConfig,
) -> Result<(), DaemonError> {
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
            let elector =
                crate::ha::Elector::start(ha, &settings.host.name, ctx.fence.clone(), on_lead);
            Some(elector.map_err(DaemonError::Ha)?)
        }
        None => None,
    };
    // With `fleet`: this host's status in etcd, and one fetch for the fleet.
    let fleet = Fleet::start(&settings, tx.clone()).map_err(DaemonError::Fleet)?;
    let mut events = EventLoop::new(ctx, rec, ctl.clone(), tx.clone());
    events.join_fleet(fleet.clone());
    let fetches = http::start(&settings, events.shared(), stop.clone()).await?;
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
    ended.map_err(DaemonError::GaveUp)?;
    tracing::info!("stopped by signal");
    Ok(())
}

//! The event loop, apart from what starts it: built from a context and a
//! recorder, it waits on its timers (fetch, resync, the queue's due keys,
//! the one-second tick) and on the inputs it is given (the stop signal,
//! triggers, fetch requests). Signals, systemd, the HTTP surface and the
//! runtime are `run`'s; a test gives the inputs itself and drives the
//! timers on tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::{sleep_until, Instant};

use super::driver::Loop;
use super::notify::Notifier;
use super::subscriptions::Subscriptions;
use super::{reload, ReadConfig, Shared, Trigger, Worker};
use crate::config::Settings;
use crate::metrics::Metrics;
use crate::reconcile::period;
use crate::reconcile::{Context, Control, Recorder, Scope};
use crate::server;

/// What the loop is told from outside.
pub(super) struct Inputs {
    /// Ends the loop when notified (SIGTERM and SIGINT, in `run`).
    pub stop: Arc<Notify>,
    /// Reloads, and resources to look at now (watcher and plugin events).
    pub triggers: mpsc::UnboundedReceiver<Trigger>,
    /// Fetch requests: refreshes and webhooks from the HTTP surface.
    pub fetches: mpsc::Receiver<server::Trigger>,
}

/// Why the loop stopped of its own accord (a source that never answered
/// within `max_failures`, a rollout that could not start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GaveUp(pub String);

/// The loop over one writer, before it runs: what it shares with the HTTP
/// surface and systemd is there to be handed out.
pub(super) struct EventLoop {
    settings: Settings,
    shared: Shared,
    ctl: Arc<Control>,
    /// The targets' subscriptions, with their watches of live state.
    watch: Subscriptions,
    fleet: Option<Arc<super::Fleet>>,
}

impl EventLoop {
    /// The loop over `ctx` and `rec`; what its targets notify comes as
    /// triggers on `triggers`.
    pub(super) fn new(
        ctx: Context,
        rec: Recorder,
        ctl: Arc<Control>,
        triggers: mpsc::UnboundedSender<Trigger>,
    ) -> EventLoop {
        // Targets' notifications (plugins' `changed`, file-system events)
        // name resources to look at now.
        let watch = Subscriptions::start(&ctx.targets, &triggers, ctx.settings.policy.watch);
        let settings = ctx.settings.clone();
        let metrics = Arc::new(Metrics::new());
        super::publish::targets(&metrics, ctx.targets.keys());
        let shared = Shared::new(Worker { ctx, rec }, metrics, ctl.clone());
        EventLoop {
            settings,
            shared,
            ctl,
            watch,
            fleet: None,
        }
    }

    /// With `fleet:`: the fetch timer fetches only on the fleet's poller.
    pub(super) fn join_fleet(&mut self, fleet: Option<Arc<super::Fleet>>) {
        self.fleet = fleet;
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Runs until `inputs.stop` is notified or the control is cancelled;
    /// `Err` says why the loop gave up. `read_config` reads the settings
    /// again on a reload.
    pub(super) async fn run(
        self,
        notifier: Arc<Notifier>,
        inputs: Inputs,
        read_config: &ReadConfig,
    ) -> Result<(), GaveUp> {
        let EventLoop {
            settings,
            shared,
            ctl,
            watch,
            fleet,
        } = self;
        let Inputs {
            stop,
            triggers: mut rx,
            mut fetches,
        } = inputs;
        let mut resync = settings.policy.resync;
        let mut lp = Loop::new(settings, shared, watch, notifier);
        lp.fleet = fleet;
        lp.pauses_changed().await;
        lp.pin_changed().await;
        let mut next_fetch = Instant::now();
        // A fetch asked for (a webhook, the fleet's new revision) is made
        // whoever polls.
        let mut asked = true;
        let mut next_resync = Instant::now() + period(resync);
        let far = || Instant::now() + Duration::from_secs(86400);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let stopped = stop.notified();
        tokio::pin!(stopped);
        while !ctl.cancelled() {
            let due = lp.next_due().unwrap_or_else(far);
            tokio::select! {
                biased;
                _ = &mut stopped => break,
                Some(_) = fetches.recv() => (next_fetch, asked) = (Instant::now(), true),
                Some(t) = rx.recv() => match t {
                    Trigger::FullPass => lp.pass(Scope::All).await,
                    Trigger::Reload => {
                        reload::reload(&mut lp, read_config).await;
                        // The new settings' timers, from now.
                        next_fetch = Instant::now() + period(lp.settings.source.interval);
                        resync = lp.settings.policy.resync;
                        next_resync = Instant::now() + period(resync);
                    }
                    Trigger::Keys(ids) => lp.schedule_now(ids),
                    Trigger::Fetch if lp.fleet_news() => (next_fetch, asked) = (Instant::now(), true),
                    Trigger::Fetch => {}
                },
                _ = sleep_until(next_fetch) => {
                    // The fleet's revision not fetched yet (a fetch of it
                    // failed) is fetched again at the backoff's time.
                    let fetch = std::mem::take(&mut asked) || lp.polls() || lp.fleet_news();
                    let wait = match fetch {
                        true => lp.poll().await,
                        false => period(lp.settings.source.interval),
                    };
                    next_fetch = Instant::now() + wait;
                }
                _ = sleep_until(next_resync) => {
                    lp.pass(Scope::All).await;
                    next_resync = Instant::now() + period(resync);
                }
                _ = sleep_until(due) => lp.due_keys().await,
                _ = tick.tick() => {
                    ctl.beat();
                    lp.tick().await;
                    lp.fleet_tick().await;
                }
            }
            if let Some(reason) = lp.gave_up() {
                return Err(GaveUp(reason.to_string()));
            }
        }
        Ok(())
    }
}

//! The loop's state and how it runs work: what is due (a full pass, the
//! queue's keys), and closures run on the worker off the runtime. What it
//! does at each trigger lives beside it: `fetch.rs` fetches with backoff,
//! `admit.rs` admits a fetched revision through the trust gate and
//! switches to it, `pass.rs` runs a pass, `outcomes.rs` requeues what
//! the error policy asks for and keeps what the ledger could not take,
//! `gauges.rs` publishes gauges, and `tick.rs` looks once a second for pin
//! and pause changes. Triggers only decide *when*; every pass observes
//! afresh and decides *what* to do.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::time::Instant;

use super::notify::Notifier;
use super::queue::Queue;
use super::subscriptions::Subscriptions;
use super::unrecorded::Unrecorded;
use super::{Shared, Worker};
use crate::backoff::Failures;
use crate::config::Settings;
use crate::model::role::Fence;
use crate::model::ResourceId;
use crate::reconcile::{Clock, Context, PassOptions, Recorder, Scope};

mod admit;
mod fetch;
mod gauges;
mod outcomes;
mod pass;
mod tick;

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

    /// Why the daemon must stop, once it must.
    pub(super) fn gave_up(&self) -> Option<&str> {
        self.gave_up.as_deref()
    }
}

//! The daemon's part in a fleet (SPEC §12), with `fleet:`: its status
//! published under its key after each publish of its own status, and one
//! fetch for the fleet. The hosts elect one poller (the ha elector's
//! machinery, under its own election and fence); the poller fetches at
//! `source.interval`, the others only when the fleet's revision changes
//! to one they have not fetched. A host whose watch of that revision is
//! down, or that knows of no poller, polls on its own. A fetch asked for
//! (a webhook, a refresh) is made on any host.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::mpsc;

use super::driver::Loop;
use super::publish;
use super::Trigger;
use crate::config::{HaSettings, Settings};
use crate::fleet::report::Reporter;
use crate::fleet::revision::RevisionWatch;
use crate::fleet::status::HostStatus;
use crate::ha::Elector;
use crate::model::role::Fence;
use crate::target::etcd::{ClientError, Connection};

/// What the daemon keeps of its fleet while it runs; dropping it revokes
/// this host's lease and leaves the poller's election.
pub(crate) struct Fleet {
    host: String,
    reporter: Reporter,
    revision: RevisionWatch,
    /// This host's part in the poller's election.
    poller: Fence,
    /// Held for its drop (leaving the election); behind a lock only so
    /// the fleet can be shared.
    _elector: Mutex<Elector>,
    last_pass: Mutex<Option<SystemTime>>,
    /// Whether the status last put said this host polls.
    reported_poller: AtomicBool,
    /// This host polls on its own, not being the poller: etcd unreachable,
    /// or no poller known.
    alone: AtomicBool,
}

impl Fleet {
    /// Starts reporting, watching the fleet's revision and campaigning to
    /// be its poller; the revision's changes come to the loop as
    /// [`Trigger::Fetch`].
    pub(super) fn start(
        settings: &Settings,
        triggers: mpsc::UnboundedSender<Trigger>,
    ) -> Result<Option<Arc<Fleet>>, ClientError> {
        let Some(fleet) = &settings.fleet else {
            return Ok(None);
        };
        let host = settings.host.name.clone();
        let conn = Connection::new(&fleet.etcd)?;
        let reporter = Reporter::start(conn.clone(), &host, fleet.lease_ttl);
        let revision = RevisionWatch::start(
            conn,
            Arc::new(move || {
                let _ = triggers.send(Trigger::Fetch);
            }),
        );
        let election = HaSettings {
            etcd: fleet.etcd.clone(),
            election: crate::fleet::POLLER_ELECTION.to_string(),
            lease_ttl: fleet.lease_ttl,
        };
        let poller = Fence::on(&host);
        let elector = Elector::start(&election, &host, poller.clone(), Arc::new(|| {}))?;
        Ok(Some(Arc::new(Fleet {
            host,
            reporter,
            revision,
            poller,
            _elector: Mutex::new(elector),
            last_pass: Mutex::new(None),
            reported_poller: AtomicBool::new(false),
            alone: AtomicBool::new(false),
        })))
    }

    /// Whether this host polls for the fleet now.
    pub(super) fn is_poller(&self) -> bool {
        self.poller.may_write()
    }

    /// Whether this host's timer fetches: it is the poller, or it cannot
    /// count on one (the revision's watch is down, no poller is known).
    fn polls(&self) -> bool {
        self.is_poller() || !self.revision.watching() || self.poller.leader_name().is_none()
    }
}

impl Loop {
    /// Whether the fetch timer's turn is this host's to fetch: always
    /// without a fleet.
    pub(super) fn polls(&self) -> bool {
        let Some(fleet) = &self.fleet else {
            return true;
        };
        publish::fleet_poller(&self.shared.metrics, fleet.is_poller());
        let polls = fleet.polls();
        let alone = polls && !fleet.is_poller();
        if fleet.alone.swap(alone, Ordering::Relaxed) != alone {
            match alone {
                true => tracing::info!(
                    watching = fleet.revision.watching(),
                    poller = ?fleet.poller.leader_name(),
                    "no poller to follow: polling the source on this host"
                ),
                false => tracing::info!("following the fleet's poller again"),
            }
        }
        if !polls {
            tracing::debug!(poller = ?fleet.poller.leader_name(), revision = ?fleet.revision.seen(), "the fleet's poller fetches; not polling");
        }
        polls
    }

    /// Whether the fleet's revision is one this host has not fetched.
    pub(super) fn fleet_news(&self) -> bool {
        self.fleet.as_ref().is_some_and(|f| f.revision.news())
    }

    /// A fetch gave `id`: the fleet is told of it when it is news there.
    pub(super) fn fleet_fetched(&self, id: git2::Oid) {
        if let Some(fleet) = &self.fleet {
            fleet.revision.fetched(&id.to_string());
        }
    }

    /// A pass ended now.
    pub(super) fn fleet_passed(&self) {
        if let Some(fleet) = &self.fleet {
            *fleet.last_pass.lock().expect("last pass") = Some(SystemTime::now());
        }
    }

    /// Once a second: a change of poller is shown at once.
    pub(super) async fn fleet_tick(&self) {
        let Some(fleet) = &self.fleet else {
            return;
        };
        let poller = fleet.is_poller();
        publish::fleet_poller(&self.shared.metrics, poller);
        if fleet.reported_poller.load(Ordering::Relaxed) != poller {
            self.report_fleet().await;
        }
    }

    /// This host's status, put under its key when it changed.
    pub(super) async fn report_fleet(&self) {
        let Some(fleet) = self.fleet.clone() else {
            return;
        };
        let role = self.role().map(|(r, _)| r);
        let poller = fleet.is_poller();
        fleet.reported_poller.store(poller, Ordering::Relaxed);
        publish::fleet_poller(&self.shared.metrics, poller);
        let last_pass = *fleet.last_pass.lock().expect("last pass");
        let host = fleet.host.clone();
        let read = self
            .blocking(move |ctx, rec| {
                HostStatus::read(&host, &rec.ledger, role, poller, last_pass)?.with_day(
                    &rec.ledger,
                    &ctx.settings.state_dir,
                    ctx.clock.now(),
                )
            })
            .await;
        match read {
            Ok(status) => fleet.reporter.report(&status),
            Err(e) => tracing::debug!(error = %e, "cannot read the status for the fleet"),
        }
    }
}

//! The rollout's coordinator: a task on the etcd connection's runtime that
//! keeps this host's alive key under a lease it renews itself, reads the
//! alive hosts and the wanted revision's keys every second (or at once when
//! told of a new revision), decides ([`super::decide`]), writes what the
//! decision asks for, and once a minute deletes superseded revisions' keys. The
//! daemon's loop tells it what it has and how its passes went, and reads
//! the last verdict; it never waits on etcd.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::decide::{decide, Decision, Held, Local, Verdict};
use super::keys::{self, Alive, Health, Report, Snapshot};
use crate::config::{FleetSettings, RolloutSettings};
use crate::model::host::Host;
use crate::target::etcd::{describe, ClientError, Connection, Unreachable};

mod writes;

/// How often the keys are read when nothing asks sooner.
const EVERY: Duration = Duration::from_secs(1);

/// How often superseded revisions' keys are looked for.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Why a cycle reached no decision: etcd did not answer as asked, or the
/// keys kept changing.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// In tend's words (`describe`), which say more than the client's.
    #[error("{what}: {}", describe(.cause))]
    Call {
        what: &'static str,
        cause: etcd_client::Error,
    },
    #[error("{what}: no answer within {within:?}")]
    Timeout {
        what: &'static str,
        within: Duration,
    },
    #[error("cannot connect within {0:?}")]
    Connect(Duration),
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    #[error("the lease's renewal was not answered")]
    Renewal,
    #[error("the rollout's keys kept changing under this host's writes")]
    Contended,
}

/// The last verdict, and the revision it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub wanted: Option<String>,
    pub applied: Option<String>,
    pub verdict: Verdict,
    pub canary: bool,
    /// The revision is halted; a canary keeps applying it.
    pub halt: Option<super::keys::Halt>,
    /// This canary has stayed converged for the soak.
    pub soaked: bool,
}

/// How this host's passes over a revision went, by its own clock.
#[derive(Debug, Default)]
struct Track {
    rev: String,
    failed: Option<String>,
    converged_since: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    wanted: Option<String>,
    applied: Option<String>,
    track: Track,
    view: Option<View>,
}

/// The running coordinator; dropping it ends its task. Its lease is left
/// to expire rather than revoked, so a host that restarts at once does not
/// look silent.
pub struct Coordinator {
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
    _stop: tokio::sync::oneshot::Sender<()>,
    _conn: Arc<Connection>,
}

impl Coordinator {
    pub fn start(
        fleet: &FleetSettings,
        rollout: &RolloutSettings,
        me: &Host,
    ) -> Result<Coordinator, ClientError> {
        let conn = Connection::new(&fleet.etcd)?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let state = Arc::new(Mutex::new(State::default()));
        let wake = Arc::new(Notify::new());
        let task = Task {
            conn: conn.clone(),
            ttl: fleet.lease_ttl,
            rollout: rollout.clone(),
            me: me.clone(),
            state: state.clone(),
            client: None,
            lease: None,
            pruned: None,
        };
        conn.handle().spawn(task.run(stopped, wake.clone()));
        Ok(Coordinator {
            state,
            wake,
            _stop: stop,
            _conn: conn,
        })
    }

    /// The revision this host admitted last, and the one it applies.
    pub fn want(&self, wanted: Option<String>, applied: Option<String>) {
        let mut s = self.state.lock().expect("rollout state");
        if s.wanted != wanted || s.applied != applied {
            s.wanted = wanted;
            s.applied = applied;
            drop(s);
            self.wake.notify_one();
        }
    }

    /// A pass over `rev` ended with `health`. A failure stays: the
    /// revision failed on this host, whatever the next pass finds.
    pub fn passed(&self, rev: &str, health: Health, reason: Option<String>) {
        let mut s = self.state.lock().expect("rollout state");
        if s.track.rev != rev {
            s.track = Track {
                rev: rev.to_string(),
                ..Track::default()
            };
        }
        let t = &mut s.track;
        match health {
            Health::Failed if t.failed.is_none() => t.failed = reason,
            Health::Converged => {
                t.converged_since.get_or_insert_with(Instant::now);
            }
            _ => t.converged_since = None,
        }
    }

    /// The last verdict about what the loop has now; `None` until one was
    /// reached for it.
    pub fn view(&self) -> Option<View> {
        let s = self.state.lock().expect("rollout state");
        s.view
            .clone()
            .filter(|v| v.wanted == s.wanted && v.applied == s.applied)
    }
}

struct LeaseHeld {
    id: i64,
    keep: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    renewed: Instant,
}

struct Task {
    conn: Arc<Connection>,
    ttl: Duration,
    rollout: RolloutSettings,
    me: Host,
    state: Arc<Mutex<State>>,
    client: Option<Client>,
    lease: Option<LeaseHeld>,
    /// When superseded revisions' keys were last looked for.
    pruned: Option<Instant>,
}

impl Task {
    async fn run(mut self, mut stopped: tokio::sync::oneshot::Receiver<()>, wake: Arc<Notify>) {
        loop {
            let (local, soaked) = self.local();
            let decided = self.cycle(&local).await;
            if decided.is_ok() && self.pruned.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
                self.pruned = Some(Instant::now());
                if let Err(why) = self.prune(local.wanted.as_deref()).await {
                    tracing::debug!(error = %why, "rollout: superseded revisions not pruned");
                }
            }
            let view = match decided {
                Ok(d) => View {
                    wanted: local.wanted.clone(),
                    applied: local.applied.clone(),
                    verdict: d.verdict,
                    canary: d.canary,
                    halt: d.halt,
                    soaked,
                },
                Err(why) => {
                    self.client = None;
                    if let Some(l) = self.lease.as_mut() {
                        l.keep = None;
                    }
                    tracing::debug!(error = %why, "rollout: etcd did not answer");
                    View {
                        wanted: local.wanted.clone(),
                        applied: local.applied.clone(),
                        verdict: Verdict::Hold(Held::Unreachable(why.to_string())),
                        canary: false,
                        halt: None,
                        soaked,
                    }
                }
            };
            self.state.lock().expect("rollout state").view = Some(view);
            tokio::select! {
                _ = tokio::time::sleep(EVERY) => {}
                _ = wake.notified() => {}
                _ = &mut stopped => return,
            }
        }
    }

    /// What the loop said, as the decision takes it, and whether this
    /// host's passes over its revision stayed converged for the soak.
    fn local(&self) -> (Local, bool) {
        let s = self.state.lock().expect("rollout state");
        let applying = s.wanted.is_some()
            && s.wanted == s.applied
            && s.track.rev == *s.wanted.as_deref().unwrap_or("");
        let t = &s.track;
        let soaked = t
            .converged_since
            .is_some_and(|since| since.elapsed() >= self.rollout.soak);
        let report = applying.then(|| match (&t.failed, t.converged_since) {
            (Some(why), _) => Report {
                state: Health::Failed,
                reason: Some(why.clone()),
                soaked: false,
            },
            (None, Some(_)) => Report {
                state: Health::Converged,
                reason: None,
                soaked,
            },
            (None, None) => Report {
                state: Health::Pending,
                reason: None,
                soaked: false,
            },
        });
        let local = Local {
            wanted: s.wanted.clone(),
            applied: s.applied.clone(),
            report,
        };
        (local, soaked)
    }

    fn bound(&self) -> Duration {
        self.conn.timeout().min(self.ttl / 2)
    }

    async fn timed<T>(
        &self,
        what: &'static str,
        f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, CycleError> {
        match tokio::time::timeout(self.bound(), f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(cause)) => Err(CycleError::Call { what, cause }),
            Err(_) => Err(CycleError::Timeout {
                what,
                within: self.bound(),
            }),
        }
    }

    /// One read, decision and its writes. A decision whose conditional
    /// write did not take (another host wrote first: canaries chosen, a
    /// halt, a promotion) was made on a stale read: it is made again from
    /// a new read, and after three such reads the revision is held.
    async fn cycle(&mut self, local: &Local) -> Result<Decision, CycleError> {
        for _ in 0..3 {
            if let Some(decision) = self.try_cycle(local).await? {
                return Ok(decision);
            }
        }
        Err(CycleError::Contended)
    }

    async fn try_cycle(&mut self, local: &Local) -> Result<Option<Decision>, CycleError> {
        let mut client = match self.client.clone() {
            Some(c) => c,
            None => {
                let c = tokio::time::timeout(self.bound(), self.conn.connect())
                    .await
                    .map_err(|_| CycleError::Connect(self.bound()))??;
                self.client = Some(c.clone());
                c
            }
        };
        let lease = self.keep_lease(&mut client).await?;
        // Only what the decision reads, in one snapshot: the hosts alive and
        // the wanted revision's keys, never every revision's.
        let mut reads = vec![TxnOp::get(
            keys::alive_prefix(),
            Some(GetOptions::new().with_prefix()),
        )];
        if let Some(rev) = &local.wanted {
            reads.push(TxnOp::get(
                keys::rev_prefix(rev),
                Some(GetOptions::new().with_prefix()),
            ));
        }
        let got = self
            .timed("read", client.txn(Txn::new().and_then(reads)))
            .await?;
        let mut kvs: Vec<(String, Vec<u8>)> = Vec::new();
        for response in got.op_responses() {
            if let TxnOpResponse::Get(g) = response {
                kvs.extend(
                    g.kvs().iter().filter_map(|kv| {
                        Some((kv.key_str().ok()?.to_string(), kv.value().to_vec()))
                    }),
                );
            }
        }
        let snap = Snapshot::from_kvs(kvs.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        if !snap.alive.contains_key(&self.me.name) {
            self.put_alive(&mut client, lease).await?;
        }
        let decision = decide(&snap, &self.me, &self.rollout, local);
        for w in &decision.writes {
            if !self.write(&mut client, lease, w).await? {
                return Ok(None);
            }
        }
        Ok(Some(decision))
    }

    async fn put_alive(&self, client: &mut Client, lease: i64) -> Result<(), CycleError> {
        let value = serde_json::to_vec(&Alive {
            labels: self.me.labels.clone(),
        })
        .expect("labels");
        let key = keys::alive(&self.me.name);
        self.timed(
            "alive key",
            client.put(key, value, Some(PutOptions::new().with_lease(lease))),
        )
        .await
        .map(drop)
    }

    /// The lease, granted when there is none (or it expired) and renewed
    /// every third of its time.
    async fn keep_lease(&mut self, client: &mut Client) -> Result<i64, CycleError> {
        if let Some(l) = self.lease.as_mut() {
            if l.keep.is_some() && l.renewed.elapsed() < self.ttl / 3 {
                return Ok(l.id);
            }
        }
        if let Some(mut l) = self.lease.take() {
            let sent = Instant::now();
            let alive = match l.keep.as_mut() {
                Some((keeper, stream)) => {
                    let renew = async {
                        keeper.keep_alive().await?;
                        stream.message().await
                    };
                    match tokio::time::timeout(self.bound(), renew).await {
                        Ok(Ok(Some(r))) => Some(r.ttl() > 0),
                        _ => None,
                    }
                }
                None => {
                    match tokio::time::timeout(self.bound(), client.lease_keep_alive(l.id)).await {
                        Ok(Ok(made)) => {
                            l.keep = Some(made);
                            Some(true)
                        }
                        Ok(Err(etcd_client::Error::LeaseKeepAliveError(e)))
                            if e.contains("lease not found") =>
                        {
                            Some(false)
                        }
                        _ => None,
                    }
                }
            };
            match alive {
                Some(true) => {
                    l.renewed = sent;
                    let id = l.id;
                    self.lease = Some(l);
                    return Ok(id);
                }
                // Not answered: tried again next time, the lease may live.
                None if l.renewed.elapsed() < self.ttl => {
                    l.keep = None;
                    self.lease = Some(l);
                    return Err(CycleError::Renewal);
                }
                _ => {}
            }
        }
        let granted = self
            .timed("lease", client.lease_grant(self.ttl.as_secs() as i64, None))
            .await?;
        let id = granted.id();
        self.lease = Some(LeaseHeld {
            id,
            keep: None,
            renewed: Instant::now(),
        });
        self.put_alive(client, id).await?;
        Ok(id)
    }
}

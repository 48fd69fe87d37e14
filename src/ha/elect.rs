//! The elector: a lease of `lease_ttl`, a campaign under the election's
//! name with this replica's name as value, and the lease kept alive by
//! tend itself (the client does not re-establish a keep-alive stream after
//! a member restarts: a broken one is made again at the next renewal).
//!
//! The rule against two writers: a renewal is sent every sixth of the
//! lease, and the leader may write only until half the lease has passed
//! since the last renewal that was answered was sent. etcd renews a lease
//! when it receives the request, after it was sent, so the lease outlives
//! the right to write by at least half its length; a leader that cannot
//! renew (etcd unreachable, the process paused) stops writing first. A
//! write that still reaches etcd is checked there: it compares the leader
//! key's create revision in its own transaction.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use crate::backoff::Failures;
use crate::config::HaSettings;
use crate::model::role::{Fence, Token};
use crate::target::etcd::{describe, ClientError, Connection};

/// What a keep-alive says of a lease that expired or was revoked.
const LEASE_GONE: &str = "lease not found";

/// Why a call to etcd in the campaign did not give its answer.
#[derive(Debug, thiserror::Error)]
enum CallError {
    /// In tend's words (`describe`), which say more than the client's.
    #[error("{}", describe(.0))]
    Etcd(etcd_client::Error),
    #[error("the campaign answered without a leader key")]
    NoLeaderKey,
    #[error("the keep-alive stream ended")]
    StreamEnded,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Called when this replica becomes the leader: the daemon runs a full pass.
pub type OnLead = Arc<dyn Fn() + Send + Sync>;

/// The running elector; dropping it gives the lease up (best effort) and
/// ends its thread.
pub struct Elector {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    ended: Option<std::sync::mpsc::Receiver<()>>,
}

impl Elector {
    /// Starts campaigning as `me` on its own thread.
    pub fn start(
        settings: &HaSettings,
        me: &str,
        fence: Fence,
        on_lead: OnLead,
    ) -> Result<Elector, ClientError> {
        let conn = Connection::new(&settings.etcd)?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (done, ended) = std::sync::mpsc::channel();
        let campaign = Campaign {
            conn: conn.clone(),
            settings: settings.clone(),
            me: me.to_string(),
            fence,
            on_lead,
        };
        conn.handle().spawn(async move {
            campaign.run(stopped).await;
            let _ = done.send(());
        });
        Ok(Elector {
            stop: Some(stop),
            ended: Some(ended),
        })
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Long enough to revoke the lease, so another replica leads at
        // once rather than after it expires.
        if let Some(ended) = self.ended.take() {
            let _ = ended.recv_timeout(Duration::from_secs(2));
        }
    }
}

struct Campaign {
    conn: Arc<Connection>,
    settings: HaSettings,
    me: String,
    fence: Fence,
    on_lead: OnLead,
}

/// The lease this replica holds and its keep-alive stream, when one is up.
struct Lease {
    id: i64,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// When the last renewal that was answered was sent.
    renewed: Instant,
}

impl Campaign {
    fn ttl(&self) -> Duration {
        self.settings.lease_ttl
    }

    /// One bound on each call: the connection's timeout, at most half the
    /// lease (a renewal answered later would not let the leader write).
    fn call_timeout(&self) -> Duration {
        self.conn.timeout().min(self.ttl() / 2)
    }

    async fn run(self, mut stopped: tokio::sync::oneshot::Receiver<()>) {
        let mut failures = Failures::default();
        loop {
            let mut lease = None;
            let why = tokio::select! {
                why = self.session(&mut lease) => why,
                _ = &mut stopped => {
                    self.give_up(lease.as_ref()).await;
                    tracing::info!(election = %self.settings.election, "stopped campaigning");
                    return;
                }
            };
            self.give_up(lease.as_ref()).await;
            let wait = failures.failed(self.ttl());
            tracing::warn!(election = %self.settings.election, reason = %why, retry_in = ?wait, "not campaigning; campaigning again");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stopped => return,
            }
            // The wait is at most the lease, reached by the third failure.
        }
    }

    /// Follows, and revokes the lease when there is one: if it led, the
    /// others need not wait for it to expire.
    async fn give_up(&self, lease: Option<&Lease>) {
        self.fence.follow(None);
        let Some(lease) = lease else { return };
        let id = lease.id;
        let connect = self.conn.connect();
        let revoke = async move {
            let mut c = connect.await.ok()?;
            c.lease_revoke(id).await.ok()
        };
        let _ = tokio::time::timeout(self.call_timeout(), revoke).await;
    }

    /// A lease, a campaign and its renewals, until the lease is lost (or
    /// cannot be renewed in time, or a fenced write was refused): why it
    /// ended.
    async fn session(&self, slot: &mut Option<Lease>) -> String {
        let call = self.call_timeout();
        let ttl = self.ttl();
        let mut client = match self.conn.connect().await {
            Ok(c) => c,
            Err(e) => return e.to_string(),
        };
        let sent = Instant::now();
        let granted = tokio::time::timeout(call, client.lease_grant(ttl.as_secs() as i64, None));
        let id = match granted.await {
            Ok(Ok(g)) => g.id(),
            Ok(Err(e)) => return format!("cannot get a lease: {}", describe(&e)),
            Err(_) => return format!("cannot get a lease within {call:?}"),
        };
        let lease = slot.insert(Lease {
            id,
            stream: None,
            renewed: sent,
        });
        let (won_tx, mut won) = tokio::sync::mpsc::channel(1);
        let mut campaign = Some(self.campaign(client.clone(), id, won_tx.clone()));
        let mut leading: Option<Token> = None;
        // Whether this replica could write when last looked at: becoming
        // able to (winning with a fresh renewal, or the first renewal
        // answered after winning) asks for a full pass, so the passes run
        // while it could not are not the last word.
        let mut writing = false;
        let may_now = |writing: &mut bool| {
            let now = self.fence.may_write();
            let denied = self.fence.take_lapsed();
            if now && (!*writing || denied) {
                (self.on_lead)();
            }
            *writing = now;
        };
        // Several renewals fit in the half lease the leader writes for:
        // one slow answer does not make it step down.
        let mut tick = tokio::time::interval(ttl / 6);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let result = loop {
            tokio::select! {
                _ = tick.tick() => {}
                result = won.recv() => {
                    match result {
                        Some(Ok(token)) => {
                            tracing::info!(election = %self.settings.election, key = %String::from_utf8_lossy(&token.key), token = token.revision, "leading");
                            self.fence.lead(token.clone(), (lease.renewed + ttl / 2).into_std());
                            leading = Some(token);
                            may_now(&mut writing);
                        }
                        Some(Err(e)) => {
                            // The campaign's call ended (a member
                            // restarted, or its timeout): it is made again
                            // with the same lease, which resumes it.
                            tracing::debug!(error = %e, "campaign call ended; campaigning again");
                            campaign = Some(self.campaign(client.clone(), id, won_tx.clone()));
                        }
                        None => {}
                    }
                    continue;
                }
            }
            match self.renew(&mut client, lease, call).await {
                Ok(true) => {
                    if leading.is_some() {
                        self.fence.renewed((lease.renewed + ttl / 2).into_std());
                    }
                }
                Ok(false) => break "the lease expired".to_string(),
                Err(e) => {
                    lease.stream = None;
                    tracing::debug!(error = %e, "lease renewal failed; the keep-alive stream is made again");
                }
            }
            may_now(&mut writing);
            let since = lease.renewed.elapsed();
            if leading.is_some() && since >= ttl / 2 {
                break format!(
                    "no renewal answered for {since:?}: stepped down before the lease could expire"
                );
            }
            if since >= ttl {
                break format!("no renewal answered for {since:?}: the lease may have expired");
            }
            if self.fence.take_refused() {
                break "etcd refused a write fenced with this replica's token".to_string();
            }
            if leading.is_none() {
                if let Ok(Ok(r)) =
                    tokio::time::timeout(call, client.leader(self.settings.election.clone())).await
                {
                    let name = r
                        .kv()
                        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
                    self.fence.follow(name);
                }
            }
        };
        if let Some(c) = campaign.take() {
            c.abort();
        }
        result
    }

    /// Starts the campaign's call; its answer (the leader key) comes on `won`.
    fn campaign(
        &self,
        mut client: Client,
        lease: i64,
        won: tokio::sync::mpsc::Sender<Result<Token, CallError>>,
    ) -> tokio::task::JoinHandle<()> {
        let (name, me) = (self.settings.election.clone(), self.me.clone());
        tokio::spawn(async move {
            let answer = match client.campaign(name, me, lease).await {
                Ok(r) => match r.leader() {
                    Some(k) => Ok(Token {
                        key: k.key().to_vec(),
                        revision: k.rev(),
                    }),
                    None => Err(CallError::NoLeaderKey),
                },
                Err(e) => Err(CallError::Etcd(e)),
            };
            let failed = answer.is_err();
            if failed {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = won.send(answer).await;
        })
    }

    /// One renewal: `Ok(true)` answered with time left, `Ok(false)` the
    /// lease is gone, an error when the stream broke (it is made again).
    async fn renew(
        &self,
        client: &mut Client,
        lease: &mut Lease,
        call: Duration,
    ) -> Result<bool, CallError> {
        let sent = Instant::now();
        let answer = tokio::time::timeout(call, async {
            match lease.stream.as_mut() {
                Some((keeper, stream)) => {
                    keeper.keep_alive().await.map_err(CallError::Etcd)?;
                    match stream.message().await.map_err(CallError::Etcd)? {
                        Some(r) => Ok(r.ttl() > 0),
                        None => Err(CallError::StreamEnded),
                    }
                }
                // Making the stream sends the first renewal and reads its
                // answer: made, the lease is there.
                None => match client.lease_keep_alive(lease.id).await {
                    Ok(made) => {
                        lease.stream = Some(made);
                        Ok(true)
                    }
                    Err(etcd_client::Error::LeaseKeepAliveError(e)) if e.contains(LEASE_GONE) => {
                        Ok(false)
                    }
                    Err(e) => Err(CallError::Etcd(e)),
                },
            }
        })
        .await
        .map_err(|_| CallError::Timeout(call))??;
        if answer {
            lease.renewed = sent;
        }
        Ok(answer)
    }
}

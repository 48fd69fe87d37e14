//! Keeps this host's status under `tend/fleet/<host>` with a lease of
//! `fleet.lease_ttl`, kept alive by tend itself as the elector keeps its
//! own (renewed every third of the lease); each new status is put again
//! under it. A host that stops renewing drops out when the lease expires;
//! dropping the reporter (SIGTERM) revokes the lease, so the key goes at
//! once. While etcd cannot be reached the daemon goes on: that is logged
//! once, and the lease made again with backoff.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, PutOptions};
use tokio::sync::{oneshot, watch};

use super::status::HostStatus;
use crate::backoff::Failures;
use crate::target::etcd::{describe, Connection};

/// Why this host's status was not put.
#[derive(Debug, thiserror::Error)]
enum PutError {
    /// In tend's words (`describe`), which say more than the client's.
    #[error("cannot put {key}: {}", describe(.cause))]
    Refused {
        key: String,
        cause: etcd_client::Error,
    },
    #[error("cannot put {key}: no answer within {within:?}")]
    Timeout { key: String, within: Duration },
}

/// The running reporter; dropping it revokes the lease (best effort).
pub struct Reporter {
    status: watch::Sender<Option<Vec<u8>>>,
    stop: Option<oneshot::Sender<()>>,
    ended: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl Reporter {
    /// Starts keeping `host`'s key on `conn`'s runtime; nothing is put
    /// until the first [`Reporter::report`].
    pub fn start(conn: Arc<Connection>, host: &str, ttl: Duration) -> Reporter {
        let (status, rx) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let (done, ended) = std::sync::mpsc::channel();
        let keeper = Keeper {
            conn: conn.clone(),
            key: format!("{}{host}", super::PREFIX),
            ttl,
        };
        conn.handle().spawn(async move {
            keeper.run(rx, stopped).await;
            let _ = done.send(());
        });
        Reporter {
            status,
            stop: Some(stop),
            ended: std::sync::Mutex::new(Some(ended)),
        }
    }

    /// Puts `status` under the lease, unless it is what was put last.
    pub fn report(&self, status: &HostStatus) {
        let Ok(bytes) = serde_json::to_vec(status) else {
            return;
        };
        self.status.send_if_modified(|now| {
            let changed = now.as_ref() != Some(&bytes);
            if changed {
                *now = Some(bytes);
            }
            changed
        });
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let ended = self.ended.get_mut().map(Option::take).ok().flatten();
        if let Some(ended) = ended {
            let _ = ended.recv_timeout(Duration::from_secs(2));
        }
    }
}

struct Keeper {
    conn: Arc<Connection>,
    key: String,
    ttl: Duration,
}

/// Whether etcd's refusal was logged: once while it lasts.
#[derive(Default)]
struct Down {
    failures: Failures,
    logged: bool,
}

impl Keeper {
    fn call(&self) -> Duration {
        self.conn.timeout().min(self.ttl / 2)
    }

    async fn run(
        self,
        mut status: watch::Receiver<Option<Vec<u8>>>,
        mut stopped: oneshot::Receiver<()>,
    ) {
        let mut down = Down::default();
        loop {
            let mut lease = None;
            let why = tokio::select! {
                why = self.session(&mut status, &mut lease, &mut down) => why,
                _ = &mut stopped => {
                    self.revoke(lease).await;
                    return;
                }
            };
            self.revoke(lease).await;
            let wait = down.failures.failed(self.ttl);
            if down.logged {
                tracing::debug!(key = %self.key, reason = %why, retry_in = ?wait, "fleet status still not published");
            } else {
                tracing::warn!(key = %self.key, reason = %why, retry_in = ?wait, "cannot publish the fleet status in etcd; going on, retrying with backoff");
                down.logged = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stopped => return,
            }
        }
    }

    /// Gives the lease up, so the key goes now rather than when it expires.
    async fn revoke(&self, lease: Option<i64>) {
        let Some(id) = lease else { return };
        let connect = self.conn.connect();
        let revoke = async move {
            let mut c = connect.await.ok()?;
            c.lease_revoke(id).await.ok()
        };
        let _ = tokio::time::timeout(self.call(), revoke).await;
    }

    /// A lease, the status put under it and put again when it changes,
    /// and its renewals, until one fails: why it ended.
    async fn session(
        &self,
        status: &mut watch::Receiver<Option<Vec<u8>>>,
        slot: &mut Option<i64>,
        down: &mut Down,
    ) -> String {
        let call = self.call();
        let mut client = match self.conn.connect().await {
            Ok(c) => c,
            Err(e) => return e.to_string(),
        };
        let granted =
            tokio::time::timeout(call, client.lease_grant(self.ttl.as_secs() as i64, None));
        let id = match granted.await {
            Ok(Ok(g)) => g.id(),
            Ok(Err(e)) => return format!("cannot get a lease: {}", describe(&e)),
            Err(_) => return format!("cannot get a lease within {call:?}"),
        };
        *slot = Some(id);
        let (mut keeper, mut stream) =
            match tokio::time::timeout(call, client.lease_keep_alive(id)).await {
                Ok(Ok(k)) => k,
                Ok(Err(e)) => return format!("cannot keep the lease: {}", describe(&e)),
                Err(_) => return format!("cannot keep the lease: no answer within {call:?}"),
            };
        if let Err(e) = self.put(&mut client, status, id).await {
            return e.to_string();
        }
        if down.logged {
            tracing::info!(key = %self.key, "fleet status published again");
        }
        *down = Down::default();
        let mut tick = tokio::time::interval(self.ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let renewed = tokio::time::timeout(call, async {
                        keeper.keep_alive().await?;
                        stream.message().await
                    })
                    .await;
                    match renewed {
                        Ok(Ok(Some(r))) if r.ttl() > 0 => {}
                        Ok(Ok(Some(_))) => return "the lease expired".into(),
                        Ok(Ok(None)) => return "the keep-alive stream ended".into(),
                        Ok(Err(e)) => return describe(&e),
                        Err(_) => return format!("no renewal answered within {call:?}"),
                    }
                }
                changed = status.changed() => {
                    if changed.is_err() {
                        // The reporter is gone: its stop ends this.
                        std::future::pending::<()>().await;
                    }
                    if let Err(e) = self.put(&mut client, status, id).await {
                        return e.to_string();
                    }
                }
            }
        }
    }

    async fn put(
        &self,
        client: &mut Client,
        status: &mut watch::Receiver<Option<Vec<u8>>>,
        lease: i64,
    ) -> Result<(), PutError> {
        let Some(value) = status.borrow_and_update().clone() else {
            return Ok(());
        };
        let call = self.call();
        let options = PutOptions::new().with_lease(lease);
        let key = || self.key.clone();
        match tokio::time::timeout(call, client.put(self.key.clone(), value, Some(options))).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(cause)) => Err(PutError::Refused { key: key(), cause }),
            Err(_) => Err(PutError::Timeout {
                key: key(),
                within: call,
            }),
        }
    }
}

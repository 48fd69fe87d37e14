//! Starts the HTTP surface for the daemon: binds `--listen`, reads the
//! secrets named in the config, and connects refreshes and webhooks to the
//! loop's triggers. Handlers only read; the loop stays the only writer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, Notify};

use super::{Shared, Worker};
use crate::config::Settings;
use crate::ledger::{HashKey, Ledger, LedgerError};
use crate::model::ResourceId;
use crate::reconcile::{self, BuildError, Context};
use crate::server::{self, AppState};
use crate::target::etcd::ClientError;

/// Why the HTTP surface did not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{what}: cannot read {}: {source}", path.display())]
    Secret {
        what: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {} is empty", path.display())]
    EmptySecret { what: String, path: PathBuf },
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        listen: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Address(#[source] std::io::Error),
    #[error(transparent)]
    Reader(#[from] BuildError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Fleet(#[from] ClientError),
}

fn read_secret(path: &Path, what: &str) -> Result<Vec<u8>, HttpError> {
    let mut bytes = std::fs::read(path).map_err(|source| HttpError::Secret {
        what: what.to_string(),
        path: path.to_path_buf(),
        source,
    })?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(HttpError::EmptySecret {
            what: what.to_string(),
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// What the diff view reads through: a context of its own (its own mirror
/// handle, the writer's targets) and a read-only ledger, so a request never
/// waits for, nor holds, the writer.
struct Reader {
    ctx: Context,
    ledger: Ledger,
    key: HashKey,
}

fn reader(shared: &Shared) -> Result<Arc<Mutex<Reader>>, HttpError> {
    let reader = {
        let w = shared.worker.lock().expect("worker lock");
        let Worker { ctx, .. } = &*w;
        let state_dir = &ctx.settings.state_dir;
        Reader {
            ctx: ctx.reader()?,
            ledger: Ledger::open_read_only(state_dir)?,
            key: HashKey::load_or_create(state_dir)?,
        }
    };
    Ok(Arc::new(Mutex::new(reader)))
}

/// The current diff of one resource, rendered as `tend diff` would: one
/// key observed, whatever the size of the revision.
fn resource_diff(shared: &Shared, reader: Arc<Mutex<Reader>>) -> server::ResourceDiff {
    let current = shared.current_handle();
    Arc::new(move |id: &str| {
        let rev = current.lock().ok()?.clone()?;
        let r = reader.lock().ok()?;
        let Reader { ctx, ledger, key } = &*r;
        let id = ResourceId::from_string(id.to_string());
        let p = reconcile::prepare(ctx, &rev, ledger, reconcile::Scope::Keys([id].into())).ok()?;
        let text: String = p
            .plan
            .changes()
            .map(|c| reconcile::show::change(ctx, &rev, c, key, false, false))
            .collect::<Vec<_>>()
            .concat();
        Some(text)
    })
}

/// The history of one resource, as `tend explain` tells it, at the
/// revision being reconciled.
fn resource_explain(shared: &Shared, reader: Arc<Mutex<Reader>>) -> server::ResourceExplain {
    let current = shared.current_handle();
    Arc::new(move |id: &str| {
        let rev = current.lock().ok()?.clone();
        let r = reader.lock().ok()?;
        let Reader { ctx, ledger, .. } = &*r;
        let origin = rev.as_ref().map(|rev| crate::explain::Origin {
            revision: rev.id,
            desired: rev
                .declared
                .resources
                .get(&ResourceId::from_string(id.to_string())),
            commit: ctx.mirror.commit_info(rev.id).ok(),
            pinned: rev.provenance.pinned,
        });
        crate::explain::build(ledger, id, origin).ok()
    })
}

/// With `fleet:`: how the page reads the fleet's table, on a connection
/// of its own.
fn fleet_read(settings: &Settings) -> Result<Option<server::FleetRead>, ClientError> {
    let Some(fleet) = &settings.fleet else {
        return Ok(None);
    };
    let conn = crate::target::etcd::Connection::new(&fleet.etcd)?;
    Ok(Some(Arc::new(move || {
        crate::fleet::status::read_all(&conn)
    })))
}

/// Binds and serves in the background until `stop` is notified. The loop
/// reads fetch requests from the returned channel, which holds at most one:
/// requests made while one waits join it.
pub(crate) async fn start(
    settings: &Settings,
    shared: &Shared,
    stop: Arc<Notify>,
) -> Result<mpsc::Receiver<server::Trigger>, HttpError> {
    let listener = tokio::net::TcpListener::bind(&settings.server.listen)
        .await
        .map_err(|source| HttpError::Listen {
            listen: settings.server.listen.clone(),
            source,
        })?;
    let addr = listener.local_addr().map_err(HttpError::Address)?;
    let mut secrets = BTreeMap::new();
    for (provider, file) in &settings.server.webhooks {
        secrets.insert(
            provider.clone(),
            read_secret(file, &format!("webhook {provider}"))?,
        );
    }
    let refresh_token = match &settings.server.refresh_token_file {
        Some(f) => Some(String::from_utf8_lossy(&read_secret(f, "refresh token")?).into_owned()),
        None => None,
    };
    let (server_tx, fetches) = mpsc::channel(1);
    let reader = reader(shared)?;
    let state = AppState {
        state_dir: settings.state_dir.clone(),
        metrics: shared.metrics.clone(),
        ready: shared.ready.clone(),
        heartbeat: shared.ctl.heartbeat(),
        stuck_after: settings.server.stuck_after,
        triggers: server_tx,
        reference: settings.source.reference.clone(),
        refresh_token,
        webhook_secrets: secrets,
        resource_diff: resource_diff(shared, reader.clone()),
        resource_explain: resource_explain(shared, reader),
        overlay: Some(super::unrecorded::overlay(shared.unrecorded.clone())),
        fleet: fleet_read(settings)?,
    };
    tracing::info!(%addr, "listening");
    let limits = settings.server.limits.within_open_files();
    tracing::debug!(?limits, "HTTP limits");
    let shutdown = async move { stop.notified().await };
    tokio::spawn(async move {
        if let Err(e) = server::serve(listener, state, limits, shutdown).await {
            tracing::warn!(error = %e, "HTTP server stopped");
        }
    });
    Ok(fetches)
}

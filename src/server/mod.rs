//! The HTTP surface (SPEC §6–7): metrics, health, the status API, webhooks
//! and the status page. Handlers only read the ledger and send triggers; the
//! loop stays the only writer.

mod api;
mod auth;
mod diff_view;
mod error;
mod fleet;
mod front;
mod history;
mod html;
mod listen;
mod load;
mod overview;
mod page;
mod webhooks;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

/// Request bodies are refused past this size, before more is read.
pub const BODY_LIMIT: usize = 1 << 20;

/// What the server asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Fetch the source now (a refresh or a push webhook).
    Fetch,
}

/// The current diff text of one resource, or None when tend knows no diff
/// for it. Supplied by whoever runs the loop; it must never return sensitive
/// content.
pub type ResourceDiff = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;
/// Where a resource comes from and what happened to it, as `tend explain`
/// tells it; `None` when it cannot be read now.
pub type ResourceExplain = Arc<dyn Fn(&str) -> Option<crate::explain::Explanation> + Send + Sync>;

/// Every host's status in the fleet's etcd (with `fleet:`), read with the
/// connection's timeout.
pub type FleetRead = Arc<
    dyn Fn() -> Result<crate::fleet::status::Fleet, crate::target::etcd::Unreachable> + Send + Sync,
>;

#[derive(Clone)]
pub struct AppState {
    pub state_dir: PathBuf,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The first pass has ended.
    pub ready: Arc<AtomicBool>,
    /// Unix millis of the loop's last tick; healthz fails once it is older
    /// than `stuck_after`.
    pub heartbeat: Arc<AtomicU64>,
    pub stuck_after: Duration,
    /// Fetch requests for the loop. Bounded at one: while a request waits,
    /// more of them add nothing (one fetch answers them all), so a flood of
    /// refreshes or pushes during a long pass costs no memory.
    pub triggers: tokio::sync::mpsc::Sender<Trigger>,
    /// The branch tend follows: pushes to other refs are ignored. None
    /// follows any push.
    pub reference: Option<String>,
    /// Bearer token that lets non-loopback clients refresh.
    pub refresh_token: Option<String>,
    /// "github" | "gitlab" | "gitea" | "generic" -> secret; an endpoint
    /// without one answers 404.
    pub webhook_secrets: BTreeMap<String, Vec<u8>>,
    pub resource_diff: ResourceDiff,
    pub resource_explain: ResourceExplain,
    /// What the loop knows beyond its ledger (outcomes it could not
    /// record), laid over the status the ledger gives.
    pub overlay: Option<crate::status::Overlay>,
    /// With `fleet:`: the fleet's table on the page.
    pub fleet: Option<FleetRead>,
}

impl std::fmt::Debug for AppState {
    // Secrets and tokens stay out of debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("state_dir", &self.state_dir)
            .field("stuck_after", &self.stuck_after)
            .field("reference", &self.reference)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<set>"),
            )
            .field("webhooks", &self.webhook_secrets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/resources/{*id}", get(page::resource))
        .route("/metrics", get(api::metrics))
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/api/v1/status", get(api::status))
        .route("/api/v1/resources/{*id}", get(api::resource))
        .route("/api/v1/refresh", post(api::refresh))
        .route("/webhook/{provider}", post(webhooks::receive))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

pub use error::ReadError;
pub use listen::Limits;

/// Serves until `shutdown` completes, within `limits`, with each client's
/// address available for the loopback check of refresh.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listen::serve(listener, router(state), limits, shutdown).await
}

#[cfg(test)]
mod tests;

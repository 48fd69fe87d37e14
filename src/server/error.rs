//! Why a handler could not read what it answers with, and the one place
//! each cause gets its status: nothing recorded yet is 503 (the daemon
//! will), a ledger that cannot be read is 500, as is a read that never
//! ran to its end; the fleet's etcd not answering is 502.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::ledger::LedgerError;
use crate::target::etcd::Unreachable;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No ledger yet, or one the daemon has not upgraded yet: it has
    /// recorded nothing this tend can read, and will.
    #[error("no status yet: {0}")]
    NotYet(#[source] LedgerError),
    /// The ledger is there but cannot be read: damaged, written by a
    /// newer tend, or failing.
    #[error("cannot read the ledger: {0}")]
    Ledger(#[source] LedgerError),
    /// The gate the reads wait at was closed.
    #[error("the reads are closed: {0}")]
    Closed(#[from] tokio::sync::AcquireError),
    /// The read panicked or was cancelled.
    #[error("the read did not finish: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The fleet's etcd did not answer.
    #[error("cannot read the fleet's status: {0}")]
    Fleet(#[from] Unreachable),
}

impl From<LedgerError> for ReadError {
    fn from(e: LedgerError) -> ReadError {
        match e {
            LedgerError::NotFound { .. } | LedgerError::OlderSchema { .. } => ReadError::NotYet(e),
            _ => ReadError::Ledger(e),
        }
    }
}

impl ReadError {
    pub fn status(&self) -> StatusCode {
        match self {
            ReadError::NotYet(_) => StatusCode::SERVICE_UNAVAILABLE,
            ReadError::Ledger(_) | ReadError::Closed(_) | ReadError::Task(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ReadError::Fleet(_) => StatusCode::BAD_GATEWAY,
        }
    }

    /// Whether only time is wanted: the page waits for it, reloading.
    pub fn not_yet(&self) -> bool {
        matches!(self, ReadError::NotYet(_))
    }

    /// The cause alone, for a page that says what failed in its own words.
    pub fn reason(&self) -> String {
        match self {
            ReadError::NotYet(e) | ReadError::Ledger(e) => e.to_string(),
            ReadError::Fleet(e) => e.to_string(),
            ReadError::Closed(_) | ReadError::Task(_) => self.to_string(),
        }
    }
}

impl IntoResponse for ReadError {
    fn into_response(self) -> Response {
        (self.status(), Json(json!({"error": self.to_string()}))).into_response()
    }
}

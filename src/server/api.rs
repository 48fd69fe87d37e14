//! The machine-facing endpoints: metrics, health, readiness, the status
//! document, one resource with its diff, and refresh.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::mpsc::error::TrySendError;

use super::auth::{bearer_matches, is_loopback};
use super::{load, AppState, Trigger};

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.metrics.encode(),
    )
        .into_response()
}

/// `GET /healthz`: fails while the loop has not ticked within `stuck_after`.
pub async fn healthz(State(state): State<AppState>) -> Response {
    let beat = state.heartbeat.load(Ordering::SeqCst);
    if beat == 0 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the loop has not started\n",
        )
            .into_response();
    }
    let age = Duration::from_millis(unix_millis(SystemTime::now()).saturating_sub(beat));
    if age > state.stuck_after {
        let message = format!(
            "stuck: the loop last ticked {} ago\n",
            crate::duration::short(age)
        );
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    }
    (StatusCode::OK, "ok\n").into_response()
}

/// `GET /readyz`: ready once the first pass has ended.
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the first pass has not ended\n",
        )
            .into_response()
    }
}

/// `GET /api/v1/status`: byte for byte what `tend status -o json` prints.
pub async fn status(State(state): State<AppState>) -> Response {
    match load::status(&state).await {
        Ok(doc) => {
            let text = serde_json::to_string_pretty(&doc).expect("status serializes") + "\n";
            ([(header::CONTENT_TYPE, "application/json")], text).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /api/v1/resources/{id}`: the resource's status entry and its
/// current diff. The work is one lookup, and a diff only for a resource
/// the ledger knows: an unknown name costs nothing more.
pub async fn resource(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let (generated_at, entry) = match load::resource(&state, id.clone()).await {
        Ok(found) => found,
        Err(e) => return e.into_response(),
    };
    if entry.is_none() {
        return error(
            StatusCode::NOT_FOUND,
            format!("tend knows no resource {id:?}"),
        );
    }
    let diff = load::diff(&state, id.clone()).await;
    Json(json!({"id": id, "generated_at": generated_at, "status": entry, "diff": diff}))
        .into_response()
}

/// `POST /api/v1/refresh`: asks the loop to fetch now. Loopback clients may;
/// others need the configured bearer token.
pub async fn refresh(State(state): State<AppState>, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    if !is_loopback(&parts.extensions, &parts.headers) {
        match &state.refresh_token {
            None => {
                return error(
                    StatusCode::FORBIDDEN,
                    "refresh from other hosts needs a token (server.refresh_token_file)",
                )
            }
            Some(token) if !bearer_matches(&parts.headers, token) => {
                let mut r = error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
                return r;
            }
            Some(_) => {}
        }
    }
    match state.triggers.try_send(Trigger::Fetch) {
        Ok(()) | Err(TrySendError::Full(_)) => {
            (StatusCode::ACCEPTED, Json(json!({"result": "triggered"}))).into_response()
        }
        Err(TrySendError::Closed(_)) => {
            error(StatusCode::SERVICE_UNAVAILABLE, "the loop is not running")
        }
    }
}

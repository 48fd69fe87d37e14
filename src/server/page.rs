//! The status page's two routes, `GET /` and `GET /resources/{id}`: what
//! each reads and the status it answers with. The HTML is built in
//! `front.rs` and `diff_view.rs` from the same status document the API
//! serves.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use super::diff_view::{render_resource, render_unread};
use super::front::{render_index, MAX_ROWS};
use super::load;
use super::AppState;

/// How many audit entries the page reads for its picture of the day.
pub const DAY_AUDIT: usize = crate::ledger::day::AUDIT_ENTRIES;
/// Bytes of the audit log's end the page reads at most to find them.
pub const AUDIT_READ_CAP: u64 = crate::ledger::day::AUDIT_BYTES;

/// `GET /`.
pub async fn index(State(state): State<AppState>) -> Response {
    let doc = load::summary(&state, MAX_ROWS).await;
    let audit = load::audit(state.state_dir.clone(), DAY_AUDIT, AUDIT_READ_CAP).await;
    let fleet = load::fleet(&state).await;
    // A page that cannot read the ledger yet still loads (200) and reloads
    // itself until it can; one that cannot read it for another cause has
    // that cause's status.
    let status = match &doc {
        Err(e) if !e.not_yet() => e.status(),
        _ => StatusCode::OK,
    };
    let page = render_index(
        doc.as_ref(),
        audit.as_ref(),
        fleet.as_ref().map(Result::as_ref),
    );
    (status, Html(page)).into_response()
}

/// `GET /resources/{id}`: one lookup, and a diff and history only for a
/// resource the ledger knows: an unknown name costs nothing more.
pub async fn resource(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let entry = match load::resource(&state, id.clone()).await {
        Ok((_, entry)) => entry,
        Err(e) => return (e.status(), Html(render_unread(&id, &e))).into_response(),
    };
    let Some(entry) = entry else {
        let page = render_resource(&id, None, None, None);
        return (StatusCode::NOT_FOUND, Html(page)).into_response();
    };
    let diff = load::diff(&state, id.clone()).await;
    let history = load::explain(&state, id.clone()).await;
    Html(render_resource(
        &id,
        Some(&entry),
        diff.as_deref(),
        history.as_ref(),
    ))
    .into_response()
}

//! Push webhooks from GitHub, GitLab, Gitea and generic senders. A request
//! is checked in this order: a secret is configured (else 404), the body fits
//! the cap (413), the signature holds (401), the payload parses (400); only
//! then may a push to the followed branch send one fetch trigger. Nothing in
//! a payload is trusted beyond the ref it names.

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::auth::{header_text, hmac_sha256_matches, same};
use super::{AppState, Trigger, BODY_LIMIT};

/// Bodies read at once, each up to [`BODY_LIMIT`].
const BODIES_AT_ONCE: usize = 8;
static BODIES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(BODIES_AT_ONCE);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    GitHub,
    GitLab,
    Gitea,
    Generic,
}

impl Provider {
    fn parse(name: &str) -> Option<Provider> {
        match name {
            "github" => Some(Provider::GitHub),
            "gitlab" => Some(Provider::GitLab),
            "gitea" => Some(Provider::Gitea),
            "generic" => Some(Provider::Generic),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Gitea => "gitea",
            Provider::Generic => "generic",
        }
    }

    /// Whether the request proves knowledge of the secret.
    fn authentic(self, headers: &HeaderMap, secret: &[u8], body: &[u8]) -> bool {
        let prefixed = |name: &str| {
            header_text(headers, name)
                .and_then(|v| v.trim().strip_prefix("sha256="))
                .is_some_and(|sig| hmac_sha256_matches(secret, body, sig))
        };
        match self {
            Provider::GitHub => prefixed("x-hub-signature-256"),
            Provider::Generic => prefixed("x-tend-signature"),
            Provider::Gitea => header_text(headers, "x-gitea-signature")
                .is_some_and(|sig| hmac_sha256_matches(secret, body, sig)),
            Provider::GitLab => {
                header_text(headers, "x-gitlab-token").is_some_and(|t| same(t.as_bytes(), secret))
            }
        }
    }

    /// The event the sender names, when it names one and it is not a push.
    fn other_event(self, headers: &HeaderMap) -> Option<String> {
        let (name, pushes): (&str, &[&str]) = match self {
            Provider::GitHub => ("x-github-event", &["push"]),
            Provider::GitLab => ("x-gitlab-event", &["Push Hook", "Tag Push Hook"]),
            Provider::Gitea => ("x-gitea-event", &["push"]),
            Provider::Generic => return None,
        };
        header_text(headers, name)
            .filter(|e| !pushes.contains(e))
            .map(String::from)
    }
}

/// A webhook answer: JSON naming the outcome, which the metrics count too.
struct Outcome {
    status: StatusCode,
    result: &'static str,
    detail: String,
}

fn outcome(status: StatusCode, result: &'static str, detail: impl Into<String>) -> Outcome {
    Outcome {
        status,
        result,
        detail: detail.into(),
    }
}

/// Whether a push to `pushed` moves what tend follows.
pub fn follows(followed: Option<&str>, pushed: &str) -> bool {
    let Some(f) = followed else {
        return true;
    };
    pushed == f
        || pushed.strip_prefix("refs/heads/") == Some(f)
        || pushed.strip_prefix("refs/tags/") == Some(f)
}

/// Why a signed body holds no payload to read.
#[derive(Debug, thiserror::Error)]
enum Malformed {
    #[error("form: {0}")]
    Form(#[source] serde_urlencoded::de::Error),
    #[error("form body without a payload field")]
    NoPayload,
    #[error("not JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("the payload is not a JSON object")]
    NotAnObject,
}

/// The JSON document of a payload. GitHub may send it form-encoded as the
/// `payload` field; the signature covers the raw body either way.
fn payload(headers: &HeaderMap, body: &[u8]) -> Result<Value, Malformed> {
    let form = header_text(headers, header::CONTENT_TYPE.as_str())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let json: std::borrow::Cow<[u8]> = if form {
        let fields: Vec<(String, String)> =
            serde_urlencoded::from_bytes(body).map_err(Malformed::Form)?;
        let text = fields
            .into_iter()
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| v);
        text.ok_or(Malformed::NoPayload)?.into_bytes().into()
    } else {
        body.into()
    };
    let value: Value = serde_json::from_slice(&json).map_err(Malformed::Json)?;
    if !value.is_object() {
        return Err(Malformed::NotAnObject);
    }
    Ok(value)
}

async fn judge(state: &AppState, provider: Provider, request: Request) -> Outcome {
    let Some(secret) = state.webhook_secrets.get(provider.name()) else {
        return outcome(
            StatusCode::NOT_FOUND,
            "disabled",
            "no secret is configured for this webhook",
        );
    };
    let declared = header_text(request.headers(), header::CONTENT_LENGTH.as_str())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return outcome(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the body exceeds 1 MiB",
        );
    }
    let headers = request.headers().clone();
    // A flood of large bodies holds BODIES_AT_ONCE of them in memory, not
    // one per connection; the rest wait, within the request timeout.
    let _reading = BODIES.acquire().await;
    let body = match Bytes::from_request(request, &()).await {
        Ok(b) => b,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return outcome(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "the body exceeds 1 MiB",
            );
        }
        Err(rejection) => {
            return outcome(StatusCode::BAD_REQUEST, "malformed", rejection.body_text())
        }
    };
    if !provider.authentic(&headers, secret, &body) {
        return outcome(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong signature",
        );
    }
    if provider == Provider::Generic && body.iter().all(u8::is_ascii_whitespace) {
        return trigger(state, "a signed request without a body");
    }
    let value = match payload(&headers, &body) {
        Ok(v) => v,
        Err(e) => return outcome(StatusCode::BAD_REQUEST, "malformed", e.to_string()),
    };
    if let Some(event) = provider.other_event(&headers) {
        if provider == Provider::GitHub && event == "ping" {
            return outcome(StatusCode::OK, "ignored", "pong");
        }
        return outcome(
            StatusCode::OK,
            "ignored",
            format!("event {event:?} is not a push"),
        );
    }
    let pushed = match value.get("ref") {
        Some(Value::String(r)) => r.clone(),
        None if provider == Provider::Generic => {
            return trigger(state, "a signed request without a ref")
        }
        _ => {
            return outcome(
                StatusCode::BAD_REQUEST,
                "malformed",
                "a push payload needs a string \"ref\"",
            )
        }
    };
    if !follows(state.reference.as_deref(), &pushed) {
        return outcome(
            StatusCode::OK,
            "ignored",
            format!("a push to {pushed}, which tend does not follow"),
        );
    }
    trigger(state, &format!("a push to {pushed}"))
}

fn trigger(state: &AppState, why: &str) -> Outcome {
    // A full channel holds a fetch not yet made: this push joins it.
    match state.triggers.try_send(Trigger::Fetch) {
        Ok(()) | Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => outcome(
            StatusCode::ACCEPTED,
            "triggered",
            format!("fetch requested by {why}"),
        ),
        Err(_) => outcome(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the loop is not running",
        ),
    }
}

/// `POST /webhook/{provider}`.
pub async fn receive(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    let Some(provider) = Provider::parse(&name) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let o = judge(&state, provider, request).await;
    if o.status != StatusCode::NOT_FOUND {
        state.metrics.webhook(provider.name(), o.result);
    }
    match o.status {
        StatusCode::UNAUTHORIZED => {
            tracing::warn!(provider = provider.name(), "webhook refused: {}", o.detail)
        }
        s if s.is_success() => tracing::info!(
            provider = provider.name(),
            result = o.result,
            "webhook: {}",
            o.detail
        ),
        _ => tracing::debug!(
            provider = provider.name(),
            result = o.result,
            "webhook: {}",
            o.detail
        ),
    }
    (
        o.status,
        Json(json!({"result": o.result, "detail": o.detail})),
    )
        .into_response()
}

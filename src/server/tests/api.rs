//! Health, readiness, metrics, the status API, one resource, and refresh.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;

use super::{call, fixture, get, loopback, populate, remote};
use crate::ledger::Ledger;

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test]
async fn healthz_fails_until_the_loop_ticks_and_when_it_is_stuck() {
    let f = fixture(&[], None);
    let (status, _, _) = call(f.app(), get("/healthz")).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "healthy before the first tick"
    );
    f.state
        .heartbeat
        .store(millis(SystemTime::now()), Ordering::SeqCst);
    assert_eq!(call(f.app(), get("/healthz")).await.0, StatusCode::OK);
    f.state.heartbeat.store(
        millis(SystemTime::now() - Duration::from_secs(120)),
        Ordering::SeqCst,
    );
    let (status, _, body) = call(f.app(), get("/healthz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("stuck") && body.contains("2m"), "{body}");
}

#[tokio::test]
async fn readyz_follows_the_first_pass() {
    let f = fixture(&[], None);
    assert_eq!(
        call(f.app(), get("/readyz")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    f.state.ready.store(true, Ordering::SeqCst);
    assert_eq!(call(f.app(), get("/readyz")).await.0, StatusCode::OK);
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let f = fixture(&[], None);
    f.state.metrics.set_queue_depth(7);
    let (status, headers, body) = call(f.app(), get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(body.lines().any(|l| l == "tend_queue_depth 7"), "{body}");
}

#[tokio::test]
async fn status_is_the_document_tend_status_prints() {
    let f = fixture(&[], None);
    let (status, _, body) = call(f.app(), get("/api/v1/status")).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a state dir without a ledger: {body}"
    );
    populate(f.dir.path());
    let (status, headers, body) = call(f.app(), get("/api/v1/status")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    let ledger = Ledger::open_read_only(f.dir.path()).unwrap();
    let served: Value = serde_json::from_str(&body).unwrap();
    let at = crate::server::html::parse_time(served["generated_at"].as_str().unwrap()).unwrap();
    let printed =
        serde_json::to_string_pretty(&crate::status::build(&ledger, at).unwrap()).unwrap() + "\n";
    // Ages are relative to generated_at, which has whole seconds: they may
    // differ by one; everything else is the CLI's document byte for byte.
    let (mut a, mut b) = (
        served.clone(),
        serde_json::from_str::<Value>(&printed).unwrap(),
    );
    let (ages_a, ages_b) = (strip_ages(&mut a), strip_ages(&mut b));
    assert_eq!(a, b);
    assert_eq!(ages_a.len(), ages_b.len());
    assert!(
        ages_a.iter().zip(&ages_b).all(|(x, y)| x.abs_diff(*y) <= 1),
        "{ages_a:?} vs {ages_b:?}"
    );
    // The fixture's ages keep their digit count across a one-second shift.
    assert_eq!(
        body.len(),
        printed.len(),
        "formatting differs from `tend status -o json`"
    );
    assert_eq!(
        served["resources"][0]["id"],
        "files/file/etc/nginx/nginx.conf"
    );
    assert_eq!(served["counts"]["Failed"], 1);
}

#[tokio::test]
async fn one_resource_comes_with_its_diff() {
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    f.state.resource_diff = Arc::new(|id: &str| {
        (id == "files/file/etc/hosts")
            .then(|| "--- live/files/file/etc/hosts\n+++ desired/files/file/etc/hosts\n".into())
    });
    let (status, _, body) = call(f.app(), get("/api/v1/resources/files/file/etc/hosts")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"]["state"], "Drifted");
    assert_eq!(v["status"]["reason"], "content differs");
    assert!(v["diff"]
        .as_str()
        .unwrap()
        .starts_with("--- live/files/file/etc/hosts"));
    let (status, _, body) = call(
        f.app(),
        get("/api/v1/resources/files/file/srv/a%20b%3Cc%3E.txt"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"]["state"], "Blocked");
    assert!(v["diff"].is_null());
    let (status, _, _) = call(f.app(), get("/api/v1/resources/files/file/nowhere")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Removes every age field, returning their values in document order.
fn strip_ages(v: &mut Value) -> Vec<u64> {
    let mut ages = Vec::new();
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k.ends_with("age_seconds") || k.starts_with("seconds_since") {
                    ages.extend(x.as_u64());
                    *x = Value::Null;
                } else {
                    ages.extend(strip_ages(x));
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| ages.extend(strip_ages(x))),
        _ => {}
    }
    ages
}

fn refresh(
    peer: Option<axum::extract::ConnectInfo<std::net::SocketAddr>>,
    headers: &[(&str, &str)],
) -> Request<Body> {
    let mut b = Request::post("/api/v1/refresh");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut request = b.body(Body::empty()).unwrap();
    if let Some(p) = peer {
        request.extensions_mut().insert(p);
    }
    request
}

#[tokio::test]
async fn refresh_is_open_to_loopback_and_closed_to_others_without_a_token() {
    let mut f = fixture(&[], None);
    assert_eq!(
        call(f.app(), refresh(Some(loopback()), &[])).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(f.sent(), 1);
    assert_eq!(
        call(f.app(), refresh(Some(remote()), &[])).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(f.app(), refresh(None, &[])).await.0,
        StatusCode::FORBIDDEN,
        "an unknown peer was trusted"
    );
    let proxied = refresh(Some(loopback()), &[("x-forwarded-for", "203.0.113.5")]);
    assert_eq!(
        call(f.app(), proxied).await.0,
        StatusCode::FORBIDDEN,
        "a proxied client passed as loopback"
    );
    let guessed = refresh(Some(remote()), &[("authorization", "Bearer anything")]);
    assert_eq!(call(f.app(), guessed).await.0, StatusCode::FORBIDDEN);
    assert_eq!(f.sent(), 0);
}

#[tokio::test]
async fn refresh_from_another_host_needs_the_bearer_token() {
    let mut f = fixture(&[], None);
    f.state.refresh_token = Some("c0rrect-h0rse".into());
    let (status, headers, _) = call(f.app(), refresh(Some(remote()), &[])).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], "Bearer");
    let wrong = refresh(Some(remote()), &[("authorization", "Bearer c0rrect-h0rsf")]);
    assert_eq!(call(f.app(), wrong).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(f.sent(), 0);
    let right = refresh(Some(remote()), &[("authorization", "Bearer c0rrect-h0rse")]);
    assert_eq!(call(f.app(), right).await.0, StatusCode::ACCEPTED);
    assert_eq!(f.sent(), 1);
}

#[tokio::test]
async fn refresh_reports_a_stopped_loop() {
    let f = fixture(&[], None);
    let app = f.app();
    drop(f.triggers);
    assert_eq!(
        call(app, refresh(Some(loopback()), &[])).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_get_cannot_refresh() {
    let mut f = fixture(&[], None);
    let mut request = get("/api/v1/refresh");
    request.extensions_mut().insert(loopback());
    assert_eq!(
        call(f.app(), request).await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(f.sent(), 0);
}

//! Each cause of a failed read gets its own status, from the one
//! `IntoResponse` of `ReadError`: nothing recorded yet 503, a ledger that
//! cannot be read 500, a read that never ran to its end 500, the fleet's
//! etcd not answering 502; an unknown resource stays 404.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::Value;

use super::{call, fixture, get, populate};
use crate::server::{load, ReadError};
use crate::target::etcd::Unreachable;

fn error_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn no_ledger_yet_is_503_and_says_so() {
    let f = fixture(&[], None);
    for uri in ["/api/v1/status", "/api/v1/resources/files/file/etc/hosts"] {
        let (status, _, body) = call(f.app(), get(uri)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}: {body}");
        assert!(
            error_of(&body).starts_with("no status yet: no ledger at"),
            "{body}"
        );
    }
    // The page waits for it, reloading itself.
    let (status, _, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("No status yet: no ledger at"), "{page}");
}

#[tokio::test]
async fn a_damaged_ledger_is_500_not_no_status_yet() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let db = f.dir.path().join(crate::ledger::DATABASE_FILE);
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    for uri in ["/api/v1/status", "/api/v1/resources/files/file/etc/hosts"] {
        let (status, _, body) = call(f.app(), get(uri)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{uri}: {body}");
        let said = error_of(&body);
        assert!(said.contains("is corrupt"), "{said}");
        assert!(!said.contains("no status yet"), "{said}");
    }
    for uri in ["/", "/resources/files/file/etc/hosts"] {
        let (status, _, page) = call(f.app(), get(uri)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{uri}");
        assert!(page.contains("is corrupt"), "{uri}: {page}");
    }
}

#[tokio::test]
async fn a_ledger_of_a_newer_tend_is_500() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let db = f.dir.path().join(crate::ledger::DATABASE_FILE);
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", 999)
        .unwrap();
    let (status, _, body) = call(f.app(), get("/api/v1/status")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(error_of(&body).contains("newer than this tend"), "{body}");
}

#[tokio::test]
async fn a_read_that_panicked_is_500() {
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    f.state.overlay = Some(Arc::new(|_: &mut crate::status::StatusDoc| {
        panic!("an overlay that fails")
    }));
    let (status, _, body) = call(f.app(), get("/api/v1/status")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(
        error_of(&body).starts_with("the read did not finish"),
        "{body}"
    );
    // The gate's permit went with the task: the next read is served.
    f.state.overlay = None;
    assert_eq!(call(f.app(), get("/api/v1/status")).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_closed_gate_is_500() {
    let gate: &'static tokio::sync::Semaphore = Box::leak(Box::new(tokio::sync::Semaphore::new(1)));
    gate.close();
    let e = load::gated(gate, || Ok(())).await.unwrap_err();
    assert!(matches!(e, ReadError::Closed(_)), "{e}");
    assert_eq!(
        e.into_response().status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

#[tokio::test]
async fn the_fleets_etcd_not_answering_is_502_and_a_banner_on_the_page() {
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    f.state.fleet = Some(Arc::new(|| {
        Err(Unreachable {
            endpoints: "http://127.0.0.1:1".into(),
            reason: "connection refused".into(),
        })
    }));
    let e = load::fleet(&f.state).await.unwrap().unwrap_err();
    assert!(matches!(e, ReadError::Fleet(_)), "{e}");
    let response = e.into_response();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    let said = error_of(std::str::from_utf8(&body).unwrap());
    assert_eq!(
        said,
        "cannot read the fleet's status: etcd http://127.0.0.1:1: connection refused"
    );
    // The host's own status is there all the same: the page is 200, and
    // its fleet section says why it is empty.
    let (status, _, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(
            "Cannot read the fleet's status: etcd http://127.0.0.1:1: connection refused"
        ),
        "{page}"
    );
}

#[tokio::test]
async fn an_unknown_resource_stays_404() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let (status, _, body) = call(f.app(), get("/api/v1/resources/files/file/nowhere")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, _) = call(f.app(), get("/resources/files/file/nowhere")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

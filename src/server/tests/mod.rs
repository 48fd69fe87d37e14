//! In-process tests of the router (tower's `oneshot`), over a state dir
//! written through the real ledger API, plus one test over a real port.

mod api;
mod bounded;
mod causes;
mod limits;
mod page;
mod webhooks;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tempfile::TempDir;
use tokio::sync::mpsc::{channel, Receiver};
use tower::ServiceExt;

use super::{router, AppState, ResourceDiff, Trigger};
use crate::ledger::{AuditEntry, AuditLog, Ledger, ResourceRecord, SourceRecord, State};
use crate::metrics::Metrics;

pub struct Fixture {
    pub dir: TempDir,
    pub state: AppState,
    pub triggers: Receiver<Trigger>,
}

impl Fixture {
    pub fn app(&self) -> Router {
        router(self.state.clone())
    }

    /// How many triggers the handlers sent so far.
    pub fn sent(&mut self) -> usize {
        let mut n = 0;
        while self.triggers.try_recv().is_ok() {
            n += 1;
        }
        n
    }
}

fn no_diff() -> ResourceDiff {
    Arc::new(|_: &str| None)
}

pub fn fixture(secrets: &[(&str, &str)], reference: Option<&str>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = channel(1);
    let state = AppState {
        state_dir: dir.path().to_path_buf(),
        metrics: Arc::new(Metrics::new()),
        ready: Arc::new(AtomicBool::new(false)),
        heartbeat: Arc::new(AtomicU64::new(0)),
        stuck_after: Duration::from_secs(60),
        triggers: tx,
        reference: reference.map(String::from),
        refresh_token: None,
        webhook_secrets: secrets
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect::<BTreeMap<_, _>>(),
        resource_diff: no_diff(),
        resource_explain: Arc::new(|_: &str| None),
        overlay: None,
        fleet: None,
    };
    Fixture {
        dir,
        state,
        triggers: rx,
    }
}

pub fn ago(secs: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(secs)
}

pub fn record(
    id: &str,
    state: State,
    drift_secs: Option<u64>,
    reason: Option<&str>,
) -> ResourceRecord {
    ResourceRecord {
        id: id.into(),
        state,
        drift_since: drift_secs.map(ago),
        attempts: if state == State::Failed { 3 } else { 0 },
        reason: reason.map(String::from),
        next_retry: (state == State::Failed).then(|| SystemTime::now() + Duration::from_secs(40)),
        last_applied: Some(ago(7200)),
        corrections: Default::default(),
    }
}

/// A state dir as a daemon leaves it: a source that fetched a revision it
/// has not applied yet, resources in several states and some audit lines.
pub fn populate(dir: &std::path::Path) {
    let ledger = Ledger::open(dir).unwrap();
    ledger
        .put_source(&SourceRecord {
            repo: "https://git.example.com/ops/hosts.git".into(),
            reference: Some("main".into()),
            fetched_revision: Some("b".repeat(40)),
            applied_revision: Some("a".repeat(40)),
            last_fetch_at: Some(ago(30)),
            last_fetch_error: None,
            last_success_at: Some(ago(30)),
            drift_since: Some(ago(30)),
        })
        .unwrap();
    ledger
        .put_resource(&record("files/file/etc/motd", State::InSync, None, None))
        .unwrap();
    ledger
        .put_resource(&record(
            "files/file/etc/hosts",
            State::Drifted,
            Some(300),
            Some("content differs"),
        ))
        .unwrap();
    let reason = "write failed: <disk full> & \"more\"";
    ledger
        .put_resource(&record(
            "files/file/etc/nginx/nginx.conf",
            State::Failed,
            Some(7300),
            Some(reason),
        ))
        .unwrap();
    ledger
        .put_resource(&record(
            "files/file/srv/a b<c>.txt",
            State::Blocked,
            Some(60),
            Some("path outside root"),
        ))
        .unwrap();
    let audit = AuditLog::open(dir).unwrap();
    for i in 0..25 {
        audit
            .append(&AuditEntry {
                time: ago(1000 - i),
                revision: "a".repeat(40),
                id: format!("files/file/etc/app/conf{i}"),
                action: "update".into(),
                why: vec!["content".into(), "mode".into()],
                before: Some(format!("git:{}", "1".repeat(40))),
                after: Some(format!("git:{}", "2".repeat(40))),
                backup: Some(format!("sha256:{}", "3".repeat(64))),
                sensitive: false,
            })
            .unwrap();
    }
}

pub fn loopback() -> ConnectInfo<SocketAddr> {
    ConnectInfo("127.0.0.1:40000".parse().unwrap())
}

pub fn remote() -> ConnectInfo<SocketAddr> {
    ConnectInfo("192.0.2.10:40000".parse().unwrap())
}

pub fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

pub async fn call(app: Router, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let response = app.oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

pub fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// `serve` over a real port: the peer address reaches the loopback check.
#[tokio::test]
async fn serve_passes_the_peer_address_and_stops_on_shutdown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut f = fixture(&[], None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(super::serve(
        listener,
        f.state.clone(),
        super::Limits::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = "POST /api/v1/refresh HTTP/1.1\r\nHost: tend\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 202"), "{response}");
    assert_eq!(f.sent(), 1, "a loopback refresh sent no trigger");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("serve did not stop")
        .unwrap()
        .unwrap();
}

//! The listener and its limits: at most `connections` connections at once,
//! the oldest one without a request in progress closed to make room for a
//! new one; a request's headers must arrive within `header_timeout` of the
//! connection opening or of the previous answer (so a stalled or idle
//! connection closes); each request is answered within `request_timeout`,
//! its body included. Thousands of slow clients then hold a bounded number
//! of descriptors and cannot keep a fresh request from being answered.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// Headers past this are refused (431); it bounds each connection's buffer.
const MAX_HEADER_BYTES: usize = 64 << 10;

/// What one client may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub connections: usize,
    pub header_timeout: Duration,
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 256,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// At most an eighth of the open-files limit goes to connections: file
    /// writes, the ledger and the mirror need descriptors too.
    pub fn within_open_files(mut self) -> Limits {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        if let Some(n) = limit {
            self.connections = self.connections.min((n / 8).max(1) as usize);
        }
        self
    }
}

/// One open connection, as the accept loop sees it.
struct Conn {
    /// Requests in progress.
    busy: AtomicUsize,
    close: Notify,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Open {
    next: AtomicU64,
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Open {
    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            close: Notify::new(),
        });
        self.lock().insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the oldest connection without a request in progress: one
    /// still sending its first headers, or idle between requests. False
    /// when every connection is answering a request.
    fn close_oldest_idle(&self) -> bool {
        let mut conns = self.lock();
        let oldest = conns
            .iter()
            .find(|(_, c)| c.busy.load(Ordering::SeqCst) == 0)
            .map(|(id, _)| *id);
        match oldest.and_then(|id| conns.remove(&id)) {
            Some(c) => {
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Counts a request in progress while it lives.
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: &Arc<Conn>) -> Busy {
        conn.busy.fetch_add(1, Ordering::SeqCst);
        Busy(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A slot for a new connection: a free one, else one freed by closing the
/// oldest idle connection, else the next to free up (the new connection
/// waits, queued like those behind it in the kernel's backlog).
async fn slot(slots: &Arc<Semaphore>, open: &Open) -> OwnedSemaphorePermit {
    if let Ok(p) = slots.clone().try_acquire_owned() {
        return p;
    }
    open.close_oldest_idle();
    slots
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed")
}

/// A descriptor shortage (EMFILE, ENFILE) or an aborted handshake passes;
/// the loop waits a moment instead of spinning on it.
async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves `app` until `shutdown` completes, then lets requests in progress
/// finish for at most `request_timeout`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.connections.max(1)));
    let open = Arc::new(Open::default());
    let (stopping, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => accepted,
        };
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = slot(&slots, &open) => p,
        };
        let (id, conn) = open.add();
        let (app, open, stop_rx) = (app.clone(), open.clone(), stop_rx.clone());
        tokio::spawn(async move {
            connection(stream, peer, app, &conn, limits, stop_rx).await;
            open.remove(id);
            drop(permit);
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a slot until it ends.
    let all = u32::try_from(limits.connections.max(1)).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.request_timeout, slots.acquire_many(all)).await;
    Ok(())
}

fn timed_out(limit: Duration) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the request was not answered within {}\n",
            crate::duration::short(limit)
        ),
    )
        .into_response()
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    conn: &Arc<Conn>,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) {
    let counted = conn.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let busy = Busy::new(&counted);
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(ConnectInfo(peer));
        let answer = app.clone().oneshot(request);
        async move {
            let response = match tokio::time::timeout(limits.request_timeout, answer).await {
                Ok(Ok(r)) => r,
                Ok(Err(never)) => match never {},
                Err(_) => timed_out(limits.request_timeout),
            };
            drop(busy);
            Ok::<_, Infallible>(response)
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    let served = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let stop = async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    tokio::select! {
        _ = served.as_mut() => {}
        () = conn.close.notified() => {}
        () = stop => {
            served.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.request_timeout, served).await;
        }
    }
}

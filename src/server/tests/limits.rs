//! The listener's limits over a real port: a stalled or idle connection
//! closes at the header timeout, a body sent slowly is cut at the request
//! timeout, and at the connection limit the oldest idle connection makes
//! room for a new one.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fixture;
use crate::server::{serve, Limits};

/// Serves a fixture's router within `limits` until the test ends.
async fn serving(limits: Limits, secrets: &[(&str, &str)]) -> (SocketAddr, super::Fixture) {
    let f = fixture(secrets, None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        f.state.clone(),
        limits,
        std::future::pending(),
    ));
    (addr, f)
}

/// Reads until the server closes the connection; what it sent, and how long
/// that took. Fails the test past `bound`.
async fn until_closed(conn: &mut TcpStream, bound: Duration) -> (String, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let read = tokio::time::timeout(bound, async {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "still open after {bound:?}");
    (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
}

async fn stalled(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: tend\r\nX-Slow: ")
        .await
        .unwrap();
    c
}

async fn healthz(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: tend\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    until_closed(&mut c, Duration::from_secs(5)).await.0
}

#[tokio::test]
async fn stalled_and_idle_connections_close_at_the_header_timeout() {
    let limits = Limits {
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let (addr, _f) = serving(limits, &[]).await;
    let mut half = stalled(addr).await;
    let (_, took) = until_closed(&mut half, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(400), "closed after {took:?}");

    // Kept alive after an answer, then silent: the same timeout.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: tend\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
}

#[tokio::test]
async fn a_body_sent_slowly_is_cut_at_the_request_timeout() {
    let limits = Limits {
        request_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let (addr, mut f) = serving(limits, &[("generic", "s3cret")]).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(
        b"POST /webhook/generic HTTP/1.1\r\nHost: tend\r\nContent-Length: 1000\r\n\r\n{\"ref\":",
    )
    .await
    .unwrap();
    let (answer, took) = until_closed(&mut c, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("not answered within"), "{answer}");
    assert!(took >= Duration::from_millis(400), "cut after {took:?}");
    assert_eq!(f.sent(), 0);
}

#[tokio::test]
async fn at_the_limit_the_oldest_idle_connection_makes_room() {
    let limits = Limits {
        connections: 3,
        header_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let (addr, _f) = serving(limits, &[]).await;
    let mut oldest = stalled(addr).await;
    let _older = stalled(addr).await;
    let mut old = stalled(addr).await;
    // The accept loop takes connections one at a time from the kernel's
    // backlog, in the order they connected, so the oldest is known without
    // waiting.
    let answer = healthz(addr).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    until_closed(&mut oldest, Duration::from_secs(5)).await;
    // The youngest stalled connection is still served once it finishes.
    old.write_all(b"1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = until_closed(&mut old, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
}

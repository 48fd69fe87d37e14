//! HTTP hooks: one HTTP/1.1 request over a plain TCP connection (http://
//! only, no TLS: the application is a neighbour in the pod or on the host),
//! body `{"revision", "changed"}`; any 2xx answer is success. Written by
//! hand over `std::net` so the pass needs no async runtime. Every wait is
//! cut into short slices, so a stop asked for ends the call within one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::Delivery;
use crate::config::HttpHook;

/// The status line and headers read at most; the body is never read.
const HEAD_MAX: usize = 16 << 10;

/// The longest wait between two looks at whether tend is stopping.
const SLICE: Duration = Duration::from_millis(200);

/// Why an HTTP hook's call failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("{0} has no address")]
    NoAddress(String),
    #[error("timed out connecting")]
    ConnectTimeout,
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("ended, tend is stopping")]
    Stopping,
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Exchange(#[source] std::io::Error),
    #[error("the connection closed without an answer")]
    NoAnswer,
    #[error("the answer is not HTTP")]
    NotHttp,
    #[error("answered {code} {reason}")]
    Answered { code: u16, reason: String },
}

/// Calls the hook, bounded by `timeout` and by `stop`, which says tend is
/// stopping.
pub(super) fn call(
    hook: &HttpHook,
    timeout: Duration,
    delivery: &Delivery,
    stop: &dyn Fn() -> bool,
) -> Result<(), HttpError> {
    let deadline = Instant::now() + timeout;
    let body =
        serde_json::json!({"revision": delivery.revision, "changed": delivery.changed}).to_string();
    let mut stream = connect(hook, deadline, stop)?;
    let request = request(hook, &body);
    let mut exchange = || -> std::io::Result<Vec<u8>> {
        stream.set_write_timeout(Some(left(deadline)?))?;
        stream.write_all(request.as_bytes())?;
        read_head(&mut stream, deadline, stop)
    };
    let head = exchange().map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            HttpError::TimedOut(timeout)
        }
        std::io::ErrorKind::Interrupted => HttpError::Stopping,
        _ => HttpError::Exchange(e),
    })?;
    if head.is_empty() {
        return Err(HttpError::NoAnswer);
    }
    let (code, reason) = status(&head).ok_or(HttpError::NotHttp)?;
    match code {
        200..=299 => Ok(()),
        _ => Err(HttpError::Answered { code, reason }),
    }
}

fn request(hook: &HttpHook, body: &str) -> String {
    let host = match (hook.host.contains(':'), hook.port) {
        (true, 80) => format!("[{}]", hook.host),
        (true, port) => format!("[{}]:{port}", hook.host),
        (false, 80) => hook.host.clone(),
        (false, port) => format!("{}:{port}", hook.host),
    };
    format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tend/{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        hook.method,
        hook.target,
        env!("CARGO_PKG_VERSION"),
        body.len()
    )
}

/// What is left of the time before `deadline`; an error once it passed.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    let rest = deadline.saturating_duration_since(Instant::now());
    if rest.is_zero() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    Ok(rest)
}

/// The first address of the host that accepts a connection in time. A
/// host that does not answer is tried again slice by slice, so a stop is
/// seen.
fn connect(
    hook: &HttpHook,
    deadline: Instant,
    stop: &dyn Fn() -> bool,
) -> Result<TcpStream, HttpError> {
    let addrs: Vec<SocketAddr> = (hook.host.as_str(), hook.port)
        .to_socket_addrs()
        .map_err(|source| HttpError::Resolve {
            host: hook.host.clone(),
            source,
        })?
        .collect();
    let mut last = HttpError::NoAddress(hook.host.clone());
    for addr in addrs {
        loop {
            if stop() {
                return Err(HttpError::Stopping);
            }
            let Ok(rest) = left(deadline) else {
                return Err(HttpError::ConnectTimeout);
            };
            match TcpStream::connect_timeout(&addr, rest.min(SLICE)) {
                Ok(stream) => return Ok(stream),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                Err(source) => {
                    last = HttpError::Connect { addr, source };
                    break;
                }
            }
        }
    }
    Err(last)
}

/// Reads until the end of the headers (or of the stream), at most
/// [`HEAD_MAX`] bytes, within the time left; `Interrupted` when `stop`
/// says tend is stopping.
fn read_head(
    stream: &mut TcpStream,
    deadline: Instant,
    stop: &dyn Fn() -> bool,
) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < HEAD_MAX && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if stop() {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        stream.set_read_timeout(Some(left(deadline)?.min(SLICE)))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                left(deadline)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(head)
}

/// The code and reason of an `HTTP/1.x NNN reason` status line.
fn status(head: &[u8]) -> Option<(u16, String)> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().splitn(3, ' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?.parse().ok()?;
    Some((code, parts.next().unwrap_or_default().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A real server on a loopback port: answers each connection with the
    /// next of `answers` and hands back what it received.
    fn server(answers: Vec<&'static str>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let mut got = Vec::new();
            for answer in answers {
                let (mut conn, _) = listener.accept().unwrap();
                let mut text = Vec::new();
                let mut buf = [0u8; 4096];
                // Headers, then the body its Content-Length announces.
                loop {
                    let n = conn.read(&mut buf).unwrap();
                    text.extend_from_slice(&buf[..n]);
                    let s = String::from_utf8_lossy(&text).to_string();
                    if let Some((head, body)) = s.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                            .map_or(0, |v| v.parse().unwrap());
                        if body.len() >= len || n == 0 {
                            break;
                        }
                    }
                }
                got.push(String::from_utf8_lossy(&text).into_owned());
                if answer.is_empty() {
                    // Silent: holds the connection open a while.
                    std::thread::sleep(Duration::from_secs(3));
                } else {
                    conn.write_all(answer.as_bytes()).unwrap();
                }
            }
            got
        });
        (port, handle)
    }

    fn hook(port: u16) -> HttpHook {
        crate::config::parse_http(&format!("http://127.0.0.1:{port}/-/reload"), None).unwrap()
    }

    const DELIVERY: Delivery = Delivery {
        revision: "abc123",
        changed: 2,
    };

    #[test]
    fn posts_the_revision_and_a_2xx_is_success() {
        let (port, server) = server(vec![
            "HTTP/1.1 204 No Content\r\n\r\n",
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
        ]);
        let h = hook(port);
        call(&h, Duration::from_secs(10), &DELIVERY, &|| false).unwrap();
        let err = call(&h, Duration::from_secs(10), &DELIVERY, &|| false).unwrap_err();
        assert!(
            err.to_string().contains("answered 503 Service Unavailable"),
            "{err}"
        );
        let got = server.join().unwrap();
        let first = &got[0];
        assert!(first.starts_with("POST /-/reload HTTP/1.1\r\n"), "{first}");
        assert!(
            first.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")),
            "{first}"
        );
        let body = first.split_once("\r\n\r\n").unwrap().1;
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v, serde_json::json!({"revision": "abc123", "changed": 2}));
    }

    #[test]
    fn a_silent_server_times_out_and_a_closed_port_fails() {
        // Accepts and reads, never answers.
        let (port, _server) = server(vec![""]);
        let started = Instant::now();
        let err = call(&hook(port), Duration::from_millis(300), &DELIVERY, &|| {
            false
        })
        .unwrap_err();
        assert!(matches!(err, HttpError::TimedOut(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let err = call(&hook(port), Duration::from_secs(5), &DELIVERY, &|| false).unwrap_err();
        assert!(err.to_string().contains("cannot connect"), "{err}");
    }

    #[test]
    fn a_stop_ends_a_call_to_a_silent_server_at_once() {
        let (port, _server) = server(vec![""]);
        let started = Instant::now();
        let asked = Instant::now() + Duration::from_millis(300);
        let stop = || Instant::now() >= asked;
        let err = call(&hook(port), Duration::from_secs(60), &DELIVERY, &stop).unwrap_err();
        assert!(matches!(err, HttpError::Stopping), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}

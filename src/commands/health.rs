//! `tend health`: whether the daemon at the listen address answers
//! `/healthz` (with `--ready`, `/readyz` first), for container health
//! checks in images that carry no curl (SPEC §10). Plain HTTP/1.1 GETs,
//! bounded in time together.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::{Cause, Failure};
use crate::cli::Flags;

/// Enough of a response for its status line and a short reason.
const RESPONSE_CAP: usize = 4096;

/// Why a path did not answer healthy.
#[derive(Debug, thiserror::Error)]
enum Unhealthy {
    #[error("not a listen address ({0})")]
    Address(#[source] std::io::Error),
    #[error("the address resolves to nothing")]
    NoAddress,
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error("cannot send the request: {0}")]
    Send(#[source] std::io::Error),
    #[error("{0}")]
    Socket(#[source] std::io::Error),
    #[error("cannot read the answer: {0}")]
    Read(#[source] std::io::Error),
    #[error("no HTTP answer")]
    NotHttp,
    #[error("answered {code}{}", if .body.is_empty() { String::new() } else { format!(": {}", .body) })]
    Answered { code: String, body: String },
}

/// With `ready`, the first pass must have ended and the loop be alive: a
/// container is healthy once the volume is filled, and not while frozen.
/// Every failure is [`Cause::Unhealthy`], config errors included.
pub fn run(g: &Flags, ready: bool, max_time: Duration) -> Result<ExitCode, Failure> {
    let paths: &[&str] = if ready {
        &["/readyz", "/healthz"]
    } else {
        &["/healthz"]
    };
    let listen = crate::config::listen_only(g).map_err(|e| Failure::new(Cause::Unhealthy, e))?;
    let deadline = Instant::now() + max_time;
    for path in paths {
        let reason = check(&listen, path, deadline, max_time)
            .map_err(|e| Failure::new(Cause::Unhealthy, e).context(format!("{listen}{path}")))?;
        super::outln!("{listen}{path}: {reason}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The answer's first body line when it is 200, otherwise why not.
fn check(
    listen: &str,
    path: &str,
    deadline: Instant,
    max_time: Duration,
) -> Result<String, Unhealthy> {
    let addr = target(listen)?;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(Unhealthy::Timeout(max_time))
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()?).map_err(Unhealthy::Connect)?;
    stream
        .set_write_timeout(Some(left()?))
        .and_then(|()| {
            let host = addr.to_string();
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes())
        })
        .map_err(Unhealthy::Send)?;
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    while response.len() < RESPONSE_CAP {
        stream
            .set_read_timeout(Some(left()?))
            .map_err(Unhealthy::Socket)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            // A socket timeout may end a little before the deadline: ask
            // again for what is left, so that only the deadline ends it.
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(Unhealthy::Read(e)),
        }
    }
    let text = String::from_utf8_lossy(&response);
    let status_line = text.lines().next().unwrap_or_default();
    let code = status_line.split_whitespace().nth(1).unwrap_or_default();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.lines().next().unwrap_or_default().trim().to_string())
        .unwrap_or_default();
    match code {
        "200" => Ok(if body.is_empty() { "ok".into() } else { body }),
        "" => Err(Unhealthy::NotHttp),
        _ => Err(Unhealthy::Answered {
            code: code.to_string(),
            body,
        }),
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The address to ask: a daemon listening on every interface
/// (`0.0.0.0:9420`, the image's default) is asked on loopback.
fn target(listen: &str) -> Result<SocketAddr, Unhealthy> {
    let mut addr = listen
        .to_socket_addrs()
        .map_err(Unhealthy::Address)?
        .next()
        .ok_or(Unhealthy::NoAddress)?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_interface_is_asked_on_loopback() {
        assert_eq!(
            target("0.0.0.0:9420").unwrap().to_string(),
            "127.0.0.1:9420"
        );
        assert_eq!(target("[::]:9420").unwrap().to_string(), "[::1]:9420");
        assert_eq!(target("10.1.2.3:80").unwrap().to_string(), "10.1.2.3:80");
        assert!(target("no port").is_err());
    }
}

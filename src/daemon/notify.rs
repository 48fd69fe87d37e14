//! systemd's notify protocol: READY=1 after the first pass, EXTEND_TIMEOUT_USEC
//! while a long first pass runs, WATCHDOG=1 while the loop is alive, STATUS=
//! lines, STOPPING=1 on shutdown. Silent when NOTIFY_SOCKET is unset.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

pub struct Notifier {
    socket: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

fn address(raw: &str) -> Option<SocketAddr> {
    match raw.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()).ok(),
        None if raw.starts_with('/') => SocketAddr::from_pathname(raw).ok(),
        None => None,
    }
}

impl Notifier {
    /// Reads NOTIFY_SOCKET and WATCHDOG_USEC (honouring WATCHDOG_PID).
    pub fn from_env() -> Notifier {
        let socket = std::env::var("NOTIFY_SOCKET")
            .ok()
            .and_then(|raw| address(&raw))
            .and_then(|addr| UnixDatagram::unbound().ok().map(|s| (s, addr)));
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|us| *us > 0 && for_us)
            .map(Duration::from_micros);
        Notifier { socket, watchdog }
    }

    /// One that tells systemd nothing, whatever the environment says.
    #[cfg(test)]
    pub fn silent() -> Notifier {
        Notifier {
            socket: None,
            watchdog: None,
        }
    }

    pub fn enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// How often to ping the watchdog: half its timeout.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog.map(|d| d / 2)
    }

    fn send(&self, msg: &str) {
        if let Some((sock, addr)) = &self.socket {
            if let Err(e) = sock.send_to_addr(msg.as_bytes(), addr) {
                tracing::debug!(error = %e, "cannot notify systemd");
            }
        }
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }
    pub fn extend(&self, by: Duration) {
        self.send(&format!("EXTEND_TIMEOUT_USEC={}", by.as_micros()));
    }
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={status}"));
    }
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_path_and_abstract_addresses() {
        assert!(address("/run/systemd/notify").is_some());
        assert!(address("@abstract-name").is_some());
        assert!(address("relative").is_none());
    }
}

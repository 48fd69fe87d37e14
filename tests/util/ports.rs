//! Loopback ports for test servers. Self-contained: unit tests include it
//! beside `etcd.rs` as `ports`.

use std::net::TcpListener;

/// Where ports are picked: below the kernel's ephemeral range (32768 and
/// up by default). A port from that range, once let go, can become the
/// local port of any process's next outgoing connection before the server
/// it was picked for binds it; a port below it is only ever taken by
/// someone binding it on purpose.
const RANGE: std::ops::Range<u16> = 20_000..32_768;

/// A loopback port nothing listens on right now, outside the ephemeral
/// range, chosen at random so that tests running at once rarely pick the
/// same one.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let port = rand::random_range(RANGE);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {RANGE:?}");
}

//! Tests of persisted state against real files in temp dirs.

mod audit_full;
mod audit_key;
mod audit_read;
mod audit_rotate;
mod backup;
mod db;
mod drift;
mod lock;
mod trust;
mod upgrade;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A fixed, millisecond-precise time: what goes in must come out equal.
fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + secs * 1000 + 123)
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

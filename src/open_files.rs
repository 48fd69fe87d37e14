//! The open-files limit: raised for tend, put back for the programs it
//! starts.
//!
//! systemd starts services with a soft limit of 1024 open files and a hard
//! one far above it; the soft limit is kept low for programs that still use
//! select(2), which tend does not. A batch makes its writes durable with
//! one syncfs per run of staged files, each holding two descriptors, so the
//! soft limit decides how many syncs a first sync makes (a run of 256 files
//! under 1024, of 4096 from about 12,500). As Go's runtime does, tend raises
//! its soft limit toward the hard one at start, and gives hooks and plugins
//! the limit it was started with.

use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Open files tend asks for at most: room for the longest run of staged
/// files and the rest of the process.
const WANTED: u64 = 16 << 10;

/// The soft limit tend was started with, once it raised its own; `NONE`
/// while it has not.
static STARTED_WITH: AtomicU64 = AtomicU64::new(NONE);
const NONE: u64 = u64::MAX;

/// Raises the soft limit on open files to [`WANTED`], or to the hard limit
/// when that is lower. Never lowers it; a refusal leaves it as it was.
pub fn raise() {
    let limit = getrlimit(Resource::Nofile);
    let Some(current) = limit.current else {
        return; // unlimited
    };
    let wanted = limit.maximum.map_or(WANTED, |max| max.min(WANTED));
    if wanted <= current {
        return;
    }
    let raised = Rlimit {
        current: Some(wanted),
        maximum: limit.maximum,
    };
    if setrlimit(Resource::Nofile, raised).is_ok() {
        STARTED_WITH.store(current, Ordering::Relaxed);
    }
}

/// Makes `cmd`'s process start with the soft limit tend was started with,
/// when tend raised its own.
pub fn put_back_for(cmd: &mut std::process::Command) {
    let started_with = STARTED_WITH.load(Ordering::Relaxed);
    if started_with == NONE {
        return;
    }
    let maximum = getrlimit(Resource::Nofile).maximum;
    let limit = Rlimit {
        current: Some(started_with),
        maximum,
    };
    // SAFETY: setrlimit is a single async-signal-safe system call; the
    // closure only copies `limit`, allocating nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            setrlimit(Resource::Nofile, limit).map_err(std::io::Error::from)
        });
    }
}

//! The `tend` binary: bound malloc's arenas, raise the open-files limit,
//! parse the command line, run the command, exit with its code or say why
//! it failed. (libgit2's process-wide settings are made once the config is
//! read: `source::configure_transport`.)

use std::process::ExitCode;

use clap::Parser;

/// glibc malloc arenas: memory freed on one thread stays in that thread's
/// arena, so passes on changing worker threads would each grow a new one.
/// One arena: the declaration is built on one thread and a pass runs on
/// another, and with two arenas each kept its own peak (tend run at 100k
/// files: VmHWM ~210 MiB with two, ~173 MiB with one). tend's threads
/// spend their time in system calls, not in malloc.
const MALLOC_ARENAS: i32 = 1;

/// Allocations from this size on get their own mapping, returned to the
/// system when freed. Set, it stays put: by default glibc raises it to the
/// largest block freed so far, and then a pass's large vectors (each
/// declared file's entry, each observation) come from the heap and leave
/// holes the next revision's do not fit, so the heap grows from pass to
/// pass (tend run at 100k files, eight new revisions and 100 drift
/// repairs: VmHWM 97 -> 104 MiB).
const MALLOC_MMAP_THRESHOLD: i32 = 256 << 10;

fn limit_memory() {
    // SAFETY: called first thing in `main`, before any thread exists; it
    // only sets a process global. libgit2 is not started here: which
    // certificates it loads depends on the config.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
    }
}

fn main() -> ExitCode {
    limit_memory();
    tend::open_files::raise();
    match tend::commands::run(tend::cli::Cli::parse()) {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

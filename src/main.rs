//! The `tend` binary: set process-wide memory limits, parse the command
//! line, run the command, exit.

use std::process::ExitCode;

use clap::Parser;

/// Largest span of a pack file libgit2 maps at once, and the most it keeps
/// mapped in all: pages of a mapped pack count in the resident set, and a
/// pass over every blob header would otherwise keep the whole pack resident.
const PACK_WINDOW: usize = 4 << 20;
const PACK_MAPPED_LIMIT: usize = 32 << 20;
/// glibc malloc arenas: memory freed on one thread stays in that thread's
/// arena, so passes on changing worker threads would each grow a new one.
const MALLOC_ARENAS: i32 = 2;

fn limit_memory() {
    // SAFETY: called first thing in `main`, before any thread exists; both
    // only set process globals.
    unsafe {
        let window = git2::opts::set_mwindow_size(PACK_WINDOW);
        let mapped = git2::opts::set_mwindow_mapped_limit(PACK_MAPPED_LIMIT);
        if let Err(e) = window.and(mapped) {
            eprintln!("tend: cannot limit mapped pack memory: {e}");
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}

fn main() -> ExitCode {
    limit_memory();
    tend::commands::run(tend::cli::Cli::parse())
}

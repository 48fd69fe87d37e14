//! Process-wide libgit2 settings for remote transports: socket timeouts, so
//! a remote that accepts a connection and never answers is abandoned, an
//! extra trusted CA file for https remotes on private hosts, no loading of
//! the system's certificate bundle for a source that never uses TLS (nor,
//! where the system's certificate directory is hashed, before a handshake
//! needs it), and a bound on mapped pack memory.

use std::ffi::c_int;
use std::path::Path;
use std::time::Duration;

use super::url::{RepoUrl, Transport};
use super::SourceError;

/// Largest span of a pack file libgit2 maps at once, and the most it keeps
/// mapped in all: pages of a mapped pack count in the resident set, and a
/// pass over every blob header would otherwise keep the whole pack resident.
const PACK_WINDOW: usize = 4 << 20;
const PACK_MAPPED_LIMIT: usize = 32 << 20;

/// Where OpenSSL reads the trusted certificates it loads when libgit2 starts.
const CERT_FILE_VAR: &str = "SSL_CERT_FILE";

/// Whether fetching from `repo` may use TLS (http:// too: it may redirect to
/// https). An address that does not parse is assumed to.
pub fn may_use_tls(repo: &str) -> bool {
    RepoUrl::parse(repo).map_or(true, |url| url.transport == Transport::Http)
}

/// Applies the connect and read timeouts and the extra CA file to every
/// later connection libgit2 makes in this process, bounds its mapped pack
/// memory, and (when `tls` is false, or the system's certificate directory
/// is hashed) starts it without the system's certificate bundle, which the
/// first certificate refused without it adds.
///
/// libgit2 has no per-fetch setting for timeouts or CA files. The timeouts bound each
/// connect and each read (for ssh, each libssh2 call); a fetch's overall
/// deadline is also checked from its callbacks, so a remote that trickles
/// data is cut off too. The CA file adds to the system's roots, it does not
/// replace them. Calling this again adds further CA files.
///
/// # Safety
///
/// It writes libgit2 globals without synchronization. No other thread may
/// use libgit2 while it runs: call it once at startup, before starting
/// threads.
pub unsafe fn configure_transport(
    timeout: Duration,
    ca_file: Option<&Path>,
    tls: bool,
) -> Result<(), SourceError> {
    // Without TLS (a reload may bring it), or where the system's hashed
    // directory serves the handshakes, the system's bundle waits for a
    // certificate refused without it (see `roots`).
    let deferred = match tls {
        false => Some(super::roots::system_bundle()),
        true => super::roots::deferrable_bundle().map(Some),
    };
    if let Some(bundle) = deferred {
        // SAFETY: the caller guarantees a single thread: nothing reads the
        // environment concurrently.
        unsafe { start_without_certificates() };
        if let Some(bundle) = bundle {
            super::roots::defer(bundle);
        }
    }
    // 0 would mean "no timeout" to libgit2.
    let millis = c_int::try_from(timeout.as_millis())
        .unwrap_or(c_int::MAX)
        .max(1);
    let git = |what: &str, e: git2::Error| SourceError::git(what, e);
    // SAFETY: the caller guarantees no other thread uses libgit2 now, which
    // is all these global writes need.
    unsafe {
        git2::opts::set_server_connect_timeout_in_milliseconds(millis)
            .map_err(|e| git("setting the connect timeout", e))?;
        git2::opts::set_server_timeout_in_milliseconds(millis)
            .map_err(|e| git("setting the read timeout", e))?;
        git2::opts::set_mwindow_size(PACK_WINDOW)
            .map_err(|e| git("limiting mapped pack memory", e))?;
        git2::opts::set_mwindow_mapped_limit(PACK_MAPPED_LIMIT)
            .map_err(|e| git("limiting mapped pack memory", e))?;
        // After the timeouts, which each stream copies when made.
        if !super::nodelay::register() {
            tracing::debug!("libgit2's socket stream is not the one expected: TCP_NODELAY not set");
        }
    }
    let Some(path) = ca_file else {
        return Ok(());
    };
    let ca_error = |reason: String| SourceError::CaFile {
        path: path.to_path_buf(),
        reason,
    };
    // OpenSSL's message for a missing file is vague; say it plainly.
    std::fs::File::open(path).map_err(|e| ca_error(e.to_string()))?;
    // SAFETY: as above; libgit2 initializes its TLS context under its own
    // lock before adding the file to it.
    unsafe { git2::opts::set_ssl_cert_file(path) }.map_err(|e| {
        ca_error(format!(
            "not a usable PEM certificate file ({})",
            e.message()
        ))
    })
}

/// Starts libgit2 (and with it OpenSSL) with no trusted certificates loaded,
/// restoring the environment afterwards.
///
/// # Safety
///
/// Writes the environment: no other thread may run.
unsafe fn start_without_certificates() {
    let before = std::env::var_os(CERT_FILE_VAR);
    // SAFETY: single-threaded, per the caller.
    unsafe { std::env::set_var(CERT_FILE_VAR, "/dev/null") };
    // Any libgit2 call starts it; this one only reads a setting.
    // SAFETY: single-threaded, per the caller.
    let _ = unsafe { git2::opts::get_mwindow_size() };
    // SAFETY: as above.
    unsafe {
        match before {
            Some(value) => std::env::set_var(CERT_FILE_VAR, value),
            None => std::env::remove_var(CERT_FILE_VAR),
        }
    }
}

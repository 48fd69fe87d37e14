//! Process-wide libgit2 settings for remote transports: socket timeouts, so
//! a remote that accepts a connection and never answers is abandoned, and an
//! extra trusted CA file for https remotes on private hosts.

use std::ffi::c_int;
use std::path::Path;
use std::time::Duration;

use super::SourceError;

/// Applies the connect and read timeouts and the extra CA file to every
/// later connection libgit2 makes in this process.
///
/// libgit2 has no per-fetch setting for either. The timeouts bound each
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
) -> Result<(), SourceError> {
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

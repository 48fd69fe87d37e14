//! The system's trusted certificates, read when a handshake needs them.
//!
//! OpenSSL reads the system's roots from two places: a bundle (every
//! certificate in one file, `SSL_CERT_FILE`), parsed whole when libgit2
//! starts, and a hashed directory (one file per certificate, named by its
//! subject's hash, `SSL_CERT_DIR`), where a handshake looks up only the
//! issuer it needs. Parsing a bundle of about 140 certificates took 45 ms
//! of every https fetch's start, more than the handshake. Where the
//! directory is hashed, tend starts without the bundle; when a server's
//! certificate cannot be verified without it, the bundle is added and the
//! fetch made again. A source that does not use TLS starts without the
//! bundle too, and a reload to one that does reads it the same way. What is
//! trusted does not change: the bundle's and the directory's certificates
//! and `auth.ca_file`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The bundle left out at the start, until a refusal adds it.
static DEFERRED: Mutex<Option<PathBuf>> = Mutex::new(None);

fn deferred() -> MutexGuard<'static, Option<PathBuf>> {
    DEFERRED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The system's bundle, where it may be left out at the start of an https
/// source: the system (as git2 finds it) has both a bundle and a hashed
/// directory.
pub(super) fn deferrable_bundle() -> Option<PathBuf> {
    let found = openssl_probe::probe();
    let bundle = found.cert_file?;
    hashed(&found.cert_dir?).then_some(bundle)
}

/// The system's bundle, if it has one: left out at the start of a source
/// that does not use TLS, for a reload to one that does.
pub(super) fn system_bundle() -> Option<PathBuf> {
    openssl_probe::probe().cert_file
}

/// Remembers the bundle left out, for [`add_deferred`].
pub(super) fn defer(bundle: PathBuf) {
    *deferred() = Some(bundle);
}

/// Adds the bundle left out at the start, once. Says whether it did: a
/// fetch refused for its certificate is then worth making again.
pub(super) fn add_deferred() -> bool {
    let Some(bundle) = deferred().take() else {
        return false;
    };
    // SAFETY: libgit2 hands the file to OpenSSL, which adds each
    // certificate to the TLS context's store under the store's own lock;
    // a handshake elsewhere reads the store under that lock too.
    match unsafe { git2::opts::set_ssl_cert_file(&bundle) } {
        Ok(()) => {
            tracing::debug!(bundle = %bundle.display(), "added the system's certificate bundle");
            true
        }
        Err(e) => {
            tracing::warn!(bundle = %bundle.display(), error = %e.message(), "cannot read the system's certificate bundle");
            false
        }
    }
}

/// Whether `dir` holds certificates by subject hash (`1a2b3c4d.0`), as
/// `openssl rehash` and update-ca-certificates leave them.
fn hashed(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_str().is_some_and(is_hash_name))
    })
}

fn is_hash_name(name: &str) -> bool {
    let Some((hash, n)) = name.split_once('.') else {
        return false;
    };
    hash.len() == 8
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_names_are_eight_hex_digits_a_dot_and_a_count() {
        for name in ["1a2b3c4d.0", "ABCDEF01.12", "00000000.1"] {
            assert!(is_hash_name(name), "{name}");
        }
        for name in [
            "1a2b3c4d",
            "1a2b3c4d.",
            "1a2b3c4.0",
            "1a2b3c4g.0",
            "ca.pem",
            "1a2b3c4d.r0",
        ] {
            assert!(!is_hash_name(name), "{name}");
        }
    }

    #[test]
    fn a_directory_is_hashed_when_it_holds_a_hash_name() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!hashed(dir.path()), "empty");
        std::fs::write(dir.path().join("ca-certificates.crt"), "").unwrap();
        assert!(!hashed(dir.path()), "a bundle only");
        std::fs::write(dir.path().join("5e98733a.0"), "").unwrap();
        assert!(hashed(dir.path()));
        assert!(!hashed(&dir.path().join("missing")));
    }
}

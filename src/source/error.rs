//! Errors of the Git puller. Every repository address in them is already
//! redacted and every libgit2 message from a fetch is scrubbed, so their
//! Display can go to logs and status output as is.

use std::path::PathBuf;
use std::time::Duration;

use git2::Oid;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("invalid repository {repo:?}: {reason}")]
    InvalidRepo { repo: String, reason: String },

    #[error("fetching {url}: {message}")]
    Fetch { url: String, message: String },

    #[error("fetching {url}: no answer within {}", humantime::format_duration(*.timeout))]
    Timeout { url: String, timeout: Duration },

    #[error("fetching {url}: authentication: {reason}")]
    Auth { url: String, reason: String },

    /// The remote's identity could not be verified: an ssh host key not in
    /// known_hosts or different from it, a TLS certificate that does not
    /// verify. Nothing was sent to it.
    #[error("fetching {url}: untrusted remote: {reason}")]
    Untrusted { url: String, reason: String },

    #[error("auth.ca_file {}: {reason}", .path.display())]
    CaFile { path: PathBuf, reason: String },

    #[error("{reference:?} is not a valid branch, tag, ref name (refs/...) or full commit id")]
    InvalidRef { reference: String },

    #[error("ref {reference:?} not found in {url}")]
    UnknownRef { reference: String, url: String },

    #[error("commit {id} not found in {url}")]
    CommitNotFound { id: Oid, url: String },

    #[error("ref {reference:?} in {url} points to a {kind}, not a commit")]
    NotACommit {
        reference: String,
        url: String,
        kind: String,
    },

    #[error("{url} has no default branch (empty repository, or HEAD names no branch); set a ref")]
    NoDefaultBranch { url: String },

    #[error("mirror {} is busy: another process kept fetching into it for {}", .dir.display(), humantime::format_duration(*.waited))]
    Busy { dir: PathBuf, waited: Duration },

    #[error("mirror {} belongs to {found}, not {expected}", .dir.display())]
    MirrorMismatch {
        dir: PathBuf,
        found: String,
        expected: String,
    },

    #[error("{}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("reading the mirror: {context}: {message}")]
    Git { context: String, message: String },

    #[error("{path:?} not found in revision {revision}")]
    NotFound { path: String, revision: Oid },

    #[error("{path:?} is a directory, not a file")]
    IsDirectory { path: String },

    #[error("{path:?} is not a directory")]
    NotADirectory { path: String },

    #[error("{path:?} is a submodule; its content is not in this repository")]
    Submodule { path: String },

    #[error("{path:?} leads outside the repository{}", escape_detail(.link, .target))]
    Escapes {
        path: String,
        link: Option<String>,
        target: String,
    },

    #[error("{path:?}: more than 40 symbolic links on the way")]
    TooManyLinks { path: String },

    #[error("invalid path {path:?} in the repository: {reason}")]
    InvalidPath { path: String, reason: String },

    #[error("object {oid} is a {kind}, not a file")]
    NotABlob { oid: Oid, kind: String },
}

fn escape_detail(link: &Option<String>, target: &str) -> String {
    match link {
        Some(link) => format!(": symlink {link:?} points to {target:?}"),
        None => String::new(),
    }
}

impl SourceError {
    /// A failed operation on the local mirror (not a fetch: no address to scrub).
    pub(crate) fn git(context: impl Into<String>, error: git2::Error) -> SourceError {
        SourceError::Git {
            context: context.into(),
            message: error.message().to_string(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> SourceError {
        SourceError::Io {
            path: path.into(),
            error,
        }
    }

    /// Whether a later attempt may succeed without anyone changing the
    /// configuration or the repository (network trouble, a busy mirror).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SourceError::Fetch { .. }
                | SourceError::Timeout { .. }
                | SourceError::Busy { .. }
                | SourceError::Io { .. }
        )
    }
}

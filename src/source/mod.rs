//! The Git puller: a bare mirror per repository under the state dir,
//! incremental forced fetches, ref resolution, and reading trees and blobs
//! of one revision straight from the object database.

mod damage;
mod deepen;
mod error;
mod gc;
mod known_hosts;
mod links;
mod local;
mod mirror;
mod mirror_dir;
mod names;
mod nodelay;
pub(crate) mod packs;
mod refs;
mod remote;
mod repair;
mod roots;
mod seed;
mod shallow;
mod signed;
mod sizes;
mod snapshot;
mod ssh_key;
mod stamp;
mod transport;
mod url;
pub mod verify;
mod walk;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

pub use error::SourceError;
pub use gc::{mirrors_bytes, Collected, GcSpec};
pub use local::{local_repository, snapshot_at};
pub use mirror::{CommitInfo, Mirror};
pub(crate) use names::refused as refused_name;
pub use shallow::DEFAULT_DEPTH;
pub use snapshot::{routes_through_lfs, BlobReader, Entry, EntryMode, Snapshot};
pub use transport::{configure_transport, may_use_tls};
pub use url::redact_url;
pub use walk::{Refused, Walk};

/// Credentials and trust anchors for remote repositories. Every field is a
/// path so secrets never sit in the config file or on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Auth {
    /// Private key for ssh remotes (OpenSSH or PEM format).
    pub ssh_key: Option<PathBuf>,
    /// The passphrase of `ssh_key`, if it has one (one line; a trailing
    /// newline is not part of it).
    pub ssh_key_passphrase_file: Option<PathBuf>,
    /// Host keys an ssh remote must present; anything else is refused.
    pub known_hosts: Option<PathBuf>,
    /// Token for https remotes, sent as the password of a basic credential,
    /// only to the scheme, host and port of the configured address.
    pub token_file: Option<PathBuf>,
    /// Extra CA certificates (PEM) trusted for https besides the system's.
    /// Process-wide: applied by [`configure_transport`], not per fetch.
    pub ca_file: Option<PathBuf>,
}

/// What to pull: a repository, a ref in it, and how long one fetch may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    /// https://, ssh://, scp-like `user@host:path`, file:// or a local path.
    pub repo: String,
    /// A branch, a tag, a full ref name (`refs/...`) or a full commit id;
    /// `None` follows the remote's HEAD (its default branch).
    pub reference: Option<String>,
    /// Deadline for one fetch; a hung remote is abandoned after it.
    pub timeout: Duration,
    pub auth: Auth,
    /// Commits of history a remote's first fetch brings (0: all of it);
    /// deepened only as far as the anti-rollback check needs.
    pub depth: u32,
}

impl SourceSpec {
    /// A spec for `repo` at its default branch with the default 2 minute timeout.
    pub fn new(repo: impl Into<String>) -> Self {
        SourceSpec {
            repo: repo.into(),
            reference: None,
            timeout: Duration::from_secs(120),
            auth: Auth::default(),
            depth: shallow::DEFAULT_DEPTH,
        }
    }

    pub fn with_reference(mut self, reference: impl Into<String>) -> Self {
        self.reference = Some(reference.into());
        self
    }
}

//! What a command runs with, validated: the source, the targets, the
//! policy, the listener, logging and this host.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::model::host::Host;
use crate::server::Limits as ServerLimits;

use super::policy::Policy;
use super::{Hook, TargetSettings};

#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub repo: String,
    pub reference: Option<String>,
    pub path: String,
    pub mirror: bool,
    pub interval: Duration,
    pub timeout: Duration,
    pub auth: crate::source::Auth,
    /// The hook run after any pass that changed something.
    pub on_change: Option<String>,
    /// Consecutive failed fetches allowed before giving up; `None` when
    /// not set (sync: no retry; run: retry forever).
    pub max_failures: Option<u32>,
    /// Signatures to check before a revision is applied (SPEC §9).
    pub verify: crate::source::verify::VerifySpec,
    /// Apply a fetched revision that does not descend from the newest one
    /// applied before.
    pub allow_rewind: bool,
    /// Commits of history a remote's first fetch brings (0: all of it);
    /// deepened only as far as the anti-rollback check needs.
    pub depth: u32,
    /// When the mirror is pruned, and what it keeps (`source.gc`).
    pub gc: crate::source::GcSpec,
    /// Mirror mode: files ending so are age files, published decrypted
    /// under their name less the suffix.
    pub decrypt_suffix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: String,
    pub refresh_token_file: Option<PathBuf>,
    pub webhooks: BTreeMap<String, PathBuf>,
    pub stuck_after: Duration,
    pub limits: ServerLimits,
}

/// Everything a command needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub source: SourceSettings,
    pub targets: Vec<TargetSettings>,
    pub hooks: BTreeMap<String, Hook>,
    pub policy: Policy,
    pub state_dir: PathBuf,
    pub server: ServerSettings,
    pub log_format: String,
    pub log_level: String,
    /// This host in a fleet: `{host}`/`{label.KEY}` in `source.path` are
    /// filled in from it, and declarations' `hosts:` select by it.
    pub host: Host,
    /// Whether the host was named (`--host` or `host.name`) rather than
    /// taken from the machine: reads with no host at hand (`diff
    /// --against`, `validate --as-written`) select by it only then.
    pub host_named: bool,
    /// Identities and recipients of age-encrypted sources (SPEC §13).
    pub secrets: crate::secrets::AgeSettings,
    /// The election this replica takes part in, when replicas share the
    /// writing (SPEC §11); `None`: this tend alone writes.
    pub ha: Option<super::HaSettings>,
    /// The fleet this host coordinates with (SPEC §12); `None`: alone.
    pub fleet: Option<super::FleetSettings>,
}

//! The config file as written (SPEC §3): each section typed, unknown keys
//! refused (config/load.rs reads the YAML and names each with its line).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::hooks::HookConfig;
use crate::duration::Dur;

/// The config file as written (SPEC §3). Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub source: Option<SourceConfig>,
    /// Each block is typed by its adapter (config/targets.rs).
    pub targets: Option<BTreeMap<String, serde_yaml::Value>>,
    pub hooks: Option<BTreeMap<String, HookConfig>>,
    pub policy: Option<PolicyConfig>,
    pub state_dir: Option<PathBuf>,
    pub server: Option<ServerConfig>,
    pub log: Option<LogConfig>,
    pub host: Option<super::host::HostConfig>,
    pub secrets: Option<super::secrets::SecretsConfig>,
    /// Replicas electing one writer (SPEC §11).
    pub ha: Option<super::ha::HaConfig>,
    /// Hosts of one repository coordinating (SPEC §12).
    pub fleet: Option<super::fleet::FleetConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub repo: Option<String>,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub path: Option<String>,
    pub mirror: Option<bool>,
    /// `skip` (the default): gitlinks are left out with a warning.
    pub submodules: Option<String>,
    pub interval: Option<Dur>,
    pub timeout: Option<Dur>,
    pub auth: Option<AuthConfig>,
    /// A hook run after any pass that changed something (mirror mode has
    /// no declarations to name one).
    pub on_change: Option<String>,
    /// Consecutive failed fetches allowed before `sync` (and `run`, before
    /// any revision was applied) gives up.
    pub max_failures: Option<u32>,
    pub verify: Option<VerifyConfig>,
    pub allow_rewind: Option<bool>,
    /// Commits of history a remote's first fetch brings (0: all of it).
    pub depth: Option<u32>,
    /// Mirror mode: age files published decrypted (SPEC §13).
    pub decrypt: Option<super::secrets::DecryptConfig>,
    /// `source.gc`: pruning the mirror of what nothing reaches.
    pub gc: Option<GcConfig>,
}

/// `source.gc`; each key has a default.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcConfig {
    pub interval: Option<Dur>,
    pub grace: Option<Dur>,
    pub budget: Option<Dur>,
}

/// `source.verify` (SPEC §9).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    pub allowed_signers: Option<PathBuf>,
    pub keyring: Option<PathBuf>,
    pub require: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub ssh_key: Option<PathBuf>,
    pub ssh_key_passphrase_file: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub prune: Option<bool>,
    pub max_prune: Option<String>,
    pub self_heal: Option<bool>,
    pub adopt: Option<bool>,
    pub allow_empty: Option<bool>,
    pub resync: Option<Dur>,
    pub contested: Option<ContestedConfig>,
    pub backup_retention: Option<Dur>,
    pub backup_max: Option<String>,
    /// The audit log and its rotated files together stay within this size.
    pub audit_max: Option<String>,
    /// Rotated audit files whose newest line is older than this go.
    pub audit_retention: Option<Dur>,
    pub dry_run: Option<bool>,
    /// Watch managed directories for changes (default true); off, drift is
    /// found at the resync timer.
    pub watch: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContestedConfig {
    pub corrections: u32,
    pub window: Dur,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub listen: Option<String>,
    pub refresh_token_file: Option<PathBuf>,
    pub webhooks: Option<WebhooksConfig>,
    /// `/healthz` fails when the loop shows no sign of life for this long.
    pub stuck_after: Option<Dur>,
    /// Connections open at once, at most.
    pub max_connections: Option<usize>,
    /// A request's headers must arrive within this, from the connection's
    /// start or the previous answer; an idle connection closes after it.
    pub header_timeout: Option<Dur>,
    /// A request must be answered within this, its body included.
    pub request_timeout: Option<Dur>,
}

/// One field per provider tend understands: another name is an unknown key,
/// reported with its line by `validate` as by every command.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhooksConfig {
    pub github: Option<WebhookConfig>,
    pub gitlab: Option<WebhookConfig>,
    pub gitea: Option<WebhookConfig>,
    pub generic: Option<WebhookConfig>,
}

impl WebhooksConfig {
    /// (provider, secret file) for each configured provider.
    pub fn secret_files(self) -> impl Iterator<Item = (String, PathBuf)> {
        [
            ("github", self.github),
            ("gitlab", self.gitlab),
            ("gitea", self.gitea),
            ("generic", self.generic),
        ]
        .into_iter()
        .filter_map(|(name, c)| c.map(|c| (name.to_string(), c.secret_file)))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub secret_file: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    pub format: Option<String>,
    pub level: Option<String>,
}

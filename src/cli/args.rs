//! The flags of each subcommand: the shared groups (`groups.rs`) flattened
//! into each command's own arguments, so `--help` lists only what the
//! command uses.

use clap::Args;

use super::groups::{
    Color, ConfigArg, DryRunArg, LinkArgs, LogArgs, MaxFailuresArg, Output, OutputArg, RewindArg,
    RootArg, SecretArgs, SourceArgs, StateDirArg, TrustArgs,
};
use crate::duration::Dur;

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    /// HTTP listen address (status page, API, metrics, webhooks)
    #[arg(long, env = "TEND_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub dry_run: DryRunArg,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Poll period (with jitter)
    #[arg(
        long,
        env = "TEND_INTERVAL",
        value_name = "DUR",
        help_heading = "Source"
    )]
    pub interval: Option<Dur>,
    #[command(flatten)]
    pub max_failures: MaxFailuresArg,
    #[command(flatten)]
    pub link: LinkArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub rewind: RewindArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct SyncArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub dry_run: DryRunArg,
    /// Allow this pass to prune more than policy.max_prune
    #[arg(long)]
    pub allow_mass_prune: bool,
    #[command(flatten)]
    pub output: OutputArg,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub max_failures: MaxFailuresArg,
    #[command(flatten)]
    pub link: LinkArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub rewind: RewindArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Compare the declared state at REV (branch, tag, commit; any revision
    /// of a local repository) with that at --ref, instead of with a root
    #[arg(long, value_name = "REV")]
    pub against: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    /// Output format (markdown: a summary table and collapsed diffs, for a
    /// pull-request comment)
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
    /// Colour in diffs (NO_COLOR disables)
    #[arg(long, value_enum, default_value = "auto")]
    pub color: Color,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub link: LinkArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub output: OutputArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct FleetStatusArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub output: OutputArg,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Who to check as (SPEC §12): what another host of the fleet would get.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// Read as the host of this name (`{host}` in source.path, `hosts:`
    /// selectors), instead of host.name or this machine's name
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Read as a host with this label (repeatable; together they replace
    /// host.labels)
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Check what the repository alone decides (for CI): hook, owner, group
    /// and target names are taken as written, not looked up in the config
    /// or on this host
    #[arg(long)]
    pub as_written: bool,
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub output: OutputArg,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    /// Resource identities (`files/file/etc/motd`); none means all
    pub ids: Vec<String>,
    /// Resume by itself after this long (30s, 5m, 1h, 7d)
    #[arg(long = "for", value_name = "DUR")]
    pub duration: Option<Dur>,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ResumeArgs {
    /// Resource identities; none means all
    pub ids: Vec<String>,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PinArgs {
    /// A commit id (abbreviated or full) or a tag, fetched already
    pub rev: String,
    /// Unpin by itself after this long (30s, 5m, 1h, 7d)
    #[arg(long = "for", value_name = "DUR")]
    pub duration: Option<Dur>,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RolloutResumeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct UnpinArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// Resource identity (files/file/etc/motd) or path
    #[arg(value_name = "ID|PATH")]
    pub what: String,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub output: OutputArg,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct BackupCatArgs {
    /// hmac-sha256:<hex>, as `tend explain` and the audit log name it
    #[arg(value_name = "REF")]
    pub backup: String,
    /// Print it even when it is the content of a sensitive resource
    #[arg(long)]
    pub sensitive: bool,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub state: StateDirArg,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Ask /readyz as well: the first pass has ended (the image's health check)
    #[arg(long)]
    pub ready: bool,
    /// Give up after this long without an answer
    #[arg(long, value_name = "DUR", default_value = "2s")]
    pub max_time: Dur,
    /// The daemon's HTTP listen address
    #[arg(long, env = "TEND_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub config: ConfigArg,
}

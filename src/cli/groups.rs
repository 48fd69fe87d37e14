//! The flag groups several subcommands share (config, source, root, link,
//! state dir, dry run, trust, secrets, logging, output), each flattened
//! into the commands that use it (`args.rs`). Every flag keeps its
//! environment variable; the config file comes after both
//! (`config::resolve`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::duration::Dur;

/// What a command prints. `markdown` is `diff`'s only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
    Markdown,
}

/// The formats of every command but `diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum PlainOutput {
    #[default]
    Text,
    Json,
}

impl From<PlainOutput> for Output {
    fn from(o: PlainOutput) -> Output {
        match o {
            PlainOutput::Text => Output::Text,
            PlainOutput::Json => Output::Json,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Color {
    #[default]
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Args)]
pub struct ConfigArg {
    /// Config file (YAML)
    #[arg(short = 'c', long, env = "TEND_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Source")]
pub struct SourceArgs {
    /// Repository: https://, ssh://, git@host:path, file:// or a local path
    #[arg(long, env = "TEND_REPO", value_name = "URL|PATH")]
    pub repo: Option<String>,
    /// Branch, tag or full commit id (default: the repository's HEAD)
    #[arg(long = "ref", env = "TEND_REF", value_name = "REF")]
    pub reference: Option<String>,
    /// Directory inside the repository holding the declarations
    #[arg(long, env = "TEND_PATH", value_name = "DIR")]
    pub path: Option<String>,
    /// Mirror every file under --path to the same path under the root
    /// (`--mirror=false` or TEND_MIRROR=false turns off a config's `true`)
    #[arg(long, env = "TEND_MIRROR", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), value_name = "BOOL")]
    pub mirror: Option<bool>,
    /// Bound on one fetch
    #[arg(long, env = "TEND_TIMEOUT", value_name = "DUR")]
    pub timeout: Option<Dur>,
}

#[derive(Debug, Clone, Args)]
pub struct RootArg {
    /// Root of the `files` target
    #[arg(long, env = "TEND_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,
}

/// Whole-tree publishing (SPEC §10), for the `files` target.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Publishing")]
pub struct LinkArgs {
    /// Publish each revision as a whole tree under <root>/.tend/revs/ and
    /// switch the symlink <root>/NAME to it atomically
    #[arg(long, env = "TEND_LINK", value_name = "NAME")]
    pub link: Option<String>,
    /// With --link: how many previous trees to keep (default 1)
    #[arg(long, env = "TEND_LINK_KEEP", value_name = "N")]
    pub link_keep: Option<usize>,
}

/// git-sync's `--max-failures`.
#[derive(Debug, Clone, Args)]
pub struct MaxFailuresArg {
    /// Consecutive failed fetches allowed before giving up (sync: retried
    /// with backoff; run: only while no revision was ever applied)
    #[arg(
        long,
        env = "TEND_MAX_FAILURES",
        value_name = "N",
        help_heading = "Source"
    )]
    pub max_failures: Option<u32>,
}

#[derive(Debug, Clone, Args)]
pub struct StateDirArg {
    /// State directory (lock, mirror, ledger, backups, audit log)
    #[arg(long, env = "TEND_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct DryRunArg {
    /// Never write: observe and record drift only
    /// (`--dry-run=false` or TEND_DRY_RUN=false turns off a config's `true`)
    #[arg(long, env = "TEND_DRY_RUN", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), value_name = "BOOL")]
    pub dry_run: Option<bool>,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Trust")]
pub struct TrustArgs {
    /// SSH signatures: git's allowed_signers file of trusted keys
    #[arg(long, env = "TEND_ALLOWED_SIGNERS", value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// OpenPGP signatures: an armored keyring of trusted public keys
    #[arg(long, env = "TEND_KEYRING", value_name = "FILE")]
    pub keyring: Option<PathBuf>,
}

/// Secrets kept in the repository as age files (SPEC §13).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Secrets")]
pub struct SecretArgs {
    /// An age identity file (or SSH private key, mode 0600) opening the
    /// `decrypt: age` sources; repeatable (TEND_AGE_IDENTITY: colon-separated)
    #[arg(
        long = "age-identity",
        env = "TEND_AGE_IDENTITY",
        value_name = "FILE",
        value_delimiter = ':'
    )]
    pub age_identities: Vec<PathBuf>,
    /// A public key (age1... or ssh-ed25519 ...) the encrypted sources must
    /// be sealed to, checked without a private key; repeatable
    #[arg(long = "age-recipient", env = "TEND_AGE_RECIPIENT", value_name = "KEY")]
    pub age_recipients: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct RewindArg {
    /// Apply a fetched revision that does not descend from the newest one
    /// applied before (a rewound branch)
    #[arg(long, env = "TEND_ALLOW_REWIND", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), value_name = "BOOL",
          help_heading = "Trust")]
    pub allow_rewind: Option<bool>,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log format: text, json or journal (default: journal when stderr is
    /// the systemd journal, else text)
    #[arg(long, env = "TEND_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Log level: error, warn, info, debug, trace
    #[arg(long, env = "TEND_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct OutputArg {
    /// Output format
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: PlainOutput,
}

//! The command line: subcommands and the flags of SPEC §2.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration::Dur;

const EXAMPLES: &str = "\
Examples:
  tend diff --repo https://git.example.com/ops/hosts.git --path hosts/web-1 --root /
  tend sync --repo ./ops --root /srv/site --state-dir /tmp/tend-state
  tend run -c /etc/tend/tend.yaml
  tend status -o json
  tend validate --repo . --path hosts/web-1
  tend pause files/file/etc/motd --for 1h
  tend pin 3f2c9e1 --for 2h
  tend explain /etc/nginx/nginx.conf
  tend plugin check -- ./fixtures/plugins/settings --file /tmp/settings.json";

#[derive(Debug, Parser)]
#[command(name = "tend", version, about = "Keeps hosts and sidecars equal to a declaration in Git", after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Continuous reconciliation (the daemon)
    Run,
    /// Bounded reconciliation: fetch, converge, exit
    #[command(
        after_help = "Exit codes: 0 converged, 2 error before any change (incl. state dir locked), 3 not converged."
    )]
    Sync {
        /// Allow this pass to prune more than policy.max_prune
        #[arg(long)]
        allow_mass_prune: bool,
    },
    /// Dry run: print what sync would change, change nothing
    #[command(after_help = "Exit codes: 0 no differences, 1 differences, 2 error.")]
    Diff,
    /// Print the drift ledger and source state
    #[command(after_help = "Exit codes: 0 all in sync, 1 some resource not InSync, 2 error.")]
    Status,
    /// Parse and check declarations, touch no target
    #[command(
        after_help = "Exit codes: 0 valid, 1 invalid declarations, 2 usage, config or source error."
    )]
    Validate,
    /// Stop correcting (all, or the named resources); drift is still recorded
    Pause {
        /// Resource identities (`files/file/etc/motd`); none means all
        ids: Vec<String>,
        /// Resume by itself after this long (30s, 5m, 1h, 7d)
        #[arg(long = "for", value_name = "DUR")]
        duration: Option<Dur>,
    },
    /// Restart correcting (all, or the named resources)
    Resume { ids: Vec<String> },
    /// Hold the source at a revision (a deliberate rollback); new commits
    /// are fetched, not applied
    #[command(
        after_help = "The revision must have been fetched and must verify as any other.\nExit codes: 0 pinned, 2 error."
    )]
    Pin {
        /// A commit id (abbreviated or full) or a tag
        rev: String,
        /// Unpin by itself after this long (30s, 5m, 1h, 7d)
        #[arg(long = "for", value_name = "DUR")]
        duration: Option<Dur>,
    },
    /// Return to the ref's newest revision
    Unpin,
    /// Where a resource comes from and what happened to it since
    #[command(
        after_help = "ID is an identity (files/file/etc/motd) or a path under a files target's root.\nExit codes: 0 found, 2 error or unknown resource."
    )]
    Explain {
        /// Resource identity or path
        what: String,
    },
    /// Work with the backups of replaced content
    Backup {
        #[command(subcommand)]
        command: BackupCommand,
    },
    /// Work with exec plugins
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Run the protocol against a plugin and report each conformance check
    #[command(
        after_help = "Example:\n  tend plugin check -- /usr/lib/tend/plugins/flags --db /tmp/flags.db\n\nExit codes: 0 every check passed, 1 some check failed, 2 usage error."
    )]
    Check {
        /// Bound on each call to the plugin
        #[arg(long, value_name = "DUR", default_value = "10s")]
        timeout: Dur,
        /// The plugin's command line, after `--`
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Print a backup's content (as `tend explain` and the audit log name it)
    Cat {
        /// hmac-sha256:<hex>
        #[arg(value_name = "REF")]
        backup: String,
        /// Print it even when it is the content of a sensitive resource
        #[arg(long)]
        sensitive: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Config file (YAML)
    #[arg(
        short = 'c',
        long,
        env = "TEND_CONFIG",
        global = true,
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
    /// Repository: https://, ssh://, git@host:path, file:// or a local path
    #[arg(long, env = "TEND_REPO", global = true, value_name = "URL|PATH")]
    pub repo: Option<String>,
    /// Branch, tag or full commit id (default: the repository's HEAD)
    #[arg(long = "ref", env = "TEND_REF", global = true, value_name = "REF")]
    pub reference: Option<String>,
    /// Directory inside the repository holding the declarations
    #[arg(long, env = "TEND_PATH", global = true, value_name = "DIR")]
    pub path: Option<String>,
    /// Mirror every file under --path to the same path under the root
    /// (`--mirror=false` or TEND_MIRROR=false turns off a config's `true`)
    #[arg(long, env = "TEND_MIRROR", global = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), value_name = "BOOL")]
    pub mirror: Option<bool>,
    /// Poll period (with jitter)
    #[arg(long, env = "TEND_INTERVAL", global = true, value_name = "DUR")]
    pub interval: Option<Dur>,
    /// Bound on one fetch
    #[arg(long, env = "TEND_TIMEOUT", global = true, value_name = "DUR")]
    pub timeout: Option<Dur>,
    /// Root of the `files` target
    #[arg(long, env = "TEND_ROOT", global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// State directory (lock, mirror, ledger, backups, audit log)
    #[arg(long, env = "TEND_STATE_DIR", global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// HTTP listen address (run only)
    #[arg(long, env = "TEND_LISTEN", global = true, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Never write: run and sync observe and record drift only
    /// (`--dry-run=false` or TEND_DRY_RUN=false turns off a config's `true`)
    #[arg(long, env = "TEND_DRY_RUN", global = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), value_name = "BOOL")]
    pub dry_run: Option<bool>,
    /// SSH signatures: git's allowed_signers file of trusted keys
    #[arg(long, env = "TEND_ALLOWED_SIGNERS", global = true, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// OpenPGP signatures: an armored keyring of trusted public keys
    #[arg(long, env = "TEND_KEYRING", global = true, value_name = "FILE")]
    pub keyring: Option<PathBuf>,
    /// Apply a fetched revision that does not descend from the newest one
    /// applied before (a rewound branch)
    #[arg(long, env = "TEND_ALLOW_REWIND", global = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), value_name = "BOOL")]
    pub allow_rewind: Option<bool>,
    /// Log format: text or json
    #[arg(long, env = "TEND_LOG_FORMAT", global = true, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Log level: error, warn, info, debug, trace
    #[arg(long, env = "TEND_LOG_LEVEL", global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Output format
    #[arg(short = 'o', long, value_enum, default_value = "text", global = true)]
    pub output: Output,
    /// Colour in diffs and tables (NO_COLOR disables)
    #[arg(long, value_enum, default_value = "auto", global = true)]
    pub color: Color,
}

impl GlobalArgs {
    /// Whether to colour output written to stdout.
    pub fn use_color(&self) -> bool {
        use std::io::IsTerminal;
        match self.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
            }
        }
    }
}

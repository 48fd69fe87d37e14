//! The command line: subcommands and the flags of SPEC §2. Each subcommand
//! takes only the flags it uses (shared groups are flattened into each);
//! [`Command::flags`] gathers them into one [`Flags`] for the config.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration::Dur;

const EXAMPLES: &str = "\
Examples:
  tend diff --repo https://git.example.com/ops/hosts.git --path hosts/web-1 --root /
  tend diff --repo . --path hosts/web-1 --against origin/main -o markdown
  tend sync --repo ./ops --root /srv/site --state-dir /tmp/tend-state
  tend run -c /etc/tend/tend.yaml
  tend status -o json
  tend validate --repo . --path hosts/web-1 --as-written
  tend pause files/file/etc/motd --for 1h
  tend pin 3f2c9e1 --for 2h
  tend explain /etc/nginx/nginx.conf
  tend plugin check -- ./fixtures/plugins/settings --file /tmp/settings.json";

const DIFF_HELP: &str = "\
Against a root (the default): what `tend sync` would change there. Without a
state dir (none given, and the default one not there) a throwaway one is used
and removed: nothing is left behind.

With --against REV: the declared state at REV against the declared state at
--ref (default HEAD), reading only the repository: no target, no state dir, no
config needed. For CI: `tend diff --repo . --against origin/main -o markdown`.

Exit codes: 0 no differences, 1 differences, 2 error (usage, config, source,
observation, invalid declarations at --ref).";

#[derive(Debug, Parser)]
#[command(name = "tend", version, about = "Keeps hosts and sidecars equal to a declaration in Git", after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Continuous reconciliation (the daemon)
    Run(RunArgs),
    /// Bounded reconciliation: fetch, converge, exit
    #[command(
        after_help = "Exit codes: 0 converged, 2 error before any change (incl. state dir locked), 3 not converged."
    )]
    Sync(SyncArgs),
    /// Dry run: print what sync would change (or what a revision changes), change nothing
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Print the drift ledger and source state
    #[command(after_help = "Exit codes: 0 all in sync, 1 some resource not InSync, 2 error.")]
    Status(StatusArgs),
    /// Parse and check declarations, touch no target
    #[command(
        after_help = "Exit codes: 0 valid, 1 invalid declarations, 2 usage, config or source error."
    )]
    Validate(ValidateArgs),
    /// Stop correcting (all, or the named resources); drift is still recorded
    Pause(PauseArgs),
    /// Restart correcting (all, or the named resources)
    Resume(ResumeArgs),
    /// Hold the source at a revision (a deliberate rollback); new commits
    /// are fetched, not applied
    #[command(
        after_help = "The revision must have been fetched and must verify as any other.\nExit codes: 0 pinned, 2 error."
    )]
    Pin(PinArgs),
    /// Return to the ref's newest revision
    Unpin(UnpinArgs),
    /// Where a resource comes from and what happened to it since
    #[command(
        after_help = "ID is an identity (files/file/etc/motd) or a path under a files target's root.\nExit codes: 0 found, 2 error or unknown resource."
    )]
    Explain(ExplainArgs),
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
    /// Print a shell completion script (bash, zsh or fish)
    #[command(
        after_help = "Examples:\n  tend completions bash > /usr/share/bash-completion/completions/tend\n  tend completions zsh > /usr/share/zsh/vendor-completions/_tend\n  tend completions fish > /usr/share/fish/vendor_completions.d/tend.fish"
    )]
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page (roff), or write one page per command into a directory
    Man {
        /// Write tend.1, tend-run.1, tend-diff.1, ... into DIR instead
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
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
        #[command(flatten)]
        output: OutputArg,
        #[command(flatten)]
        log: LogArgs,
        /// The plugin's command line, after `--`
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Print a backup's content (as `tend explain` and the audit log name it)
    Cat(BackupCatArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

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
    pub trust: TrustArgs,
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
    pub trust: TrustArgs,
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
    pub trust: TrustArgs,
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
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Check what the repository alone decides (for CI): hook, owner, group
    /// and target names are taken as written, not looked up in the config
    /// or on this host
    #[arg(long)]
    pub as_written: bool,
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

/// The flags of SPEC §2 one command was given (each flag already merged
/// with its environment variable by clap); what it was not given is `None`
/// and comes from the config file or the default (`config::resolve`).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub config: Option<PathBuf>,
    pub repo: Option<String>,
    pub reference: Option<String>,
    pub path: Option<String>,
    pub mirror: Option<bool>,
    pub interval: Option<Dur>,
    pub timeout: Option<Dur>,
    pub root: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub listen: Option<String>,
    pub dry_run: Option<bool>,
    pub log_format: Option<String>,
    pub log_level: Option<String>,
    pub output: Output,
    pub color: Color,
    pub allowed_signers: Option<PathBuf>,
    pub keyring: Option<PathBuf>,
    pub allow_rewind: Option<bool>,
}

impl Flags {
    fn source(mut self, s: &SourceArgs) -> Flags {
        self.repo.clone_from(&s.repo);
        self.reference.clone_from(&s.reference);
        self.path.clone_from(&s.path);
        self.mirror = s.mirror;
        self.timeout = s.timeout;
        self
    }

    fn trust(mut self, t: &TrustArgs) -> Flags {
        self.allowed_signers.clone_from(&t.allowed_signers);
        self.keyring.clone_from(&t.keyring);
        self
    }

    fn common(config: &ConfigArg, state: &StateDirArg, log: &LogArgs) -> Flags {
        Flags {
            config: config.config.clone(),
            state_dir: state.state_dir.clone(),
            log_format: log.log_format.clone(),
            log_level: log.log_level.clone(),
            ..Flags::default()
        }
    }

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

impl Command {
    /// The flags this command was given, as one set.
    pub fn flags(&self) -> Flags {
        match self {
            Command::Run(a) => Flags {
                root: a.root.root.clone(),
                listen: a.listen.clone(),
                dry_run: a.dry_run.dry_run,
                interval: a.interval,
                allow_rewind: a.rewind.allow_rewind,
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .trust(&a.trust)
            },
            Command::Sync(a) => Flags {
                root: a.root.root.clone(),
                dry_run: a.dry_run.dry_run,
                output: a.output.output.into(),
                allow_rewind: a.rewind.allow_rewind,
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .trust(&a.trust)
            },
            Command::Diff(a) => Flags {
                root: a.root.root.clone(),
                output: a.output,
                color: a.color,
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .trust(&a.trust)
            },
            Command::Validate(a) => Flags {
                root: a.root.root.clone(),
                output: a.output.output.into(),
                ..Flags::common(&a.config, &a.state, &a.log).source(&a.source)
            },
            Command::Status(a) => Flags {
                output: a.output.output.into(),
                ..Flags::common(&a.config, &a.state, &a.log)
            },
            Command::Pause(a) => Flags::common(&a.config, &a.state, &a.log),
            Command::Resume(a) => Flags::common(&a.config, &a.state, &a.log),
            Command::Pin(a) => Flags {
                root: a.root.root.clone(),
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .trust(&a.trust)
            },
            Command::Unpin(a) => Flags::common(&a.config, &a.state, &a.log),
            Command::Explain(a) => Flags {
                root: a.root.root.clone(),
                output: a.output.output.into(),
                ..Flags::common(&a.config, &a.state, &a.log).source(&a.source)
            },
            Command::Backup {
                command: BackupCommand::Cat(a),
            } => Flags {
                root: a.root.root.clone(),
                ..Flags::common(&a.config, &a.state, &a.log).source(&a.source)
            },
            Command::Plugin {
                command: PluginCommand::Check { output, log, .. },
            } => Flags {
                output: output.output.into(),
                log_format: log.log_format.clone(),
                log_level: log.log_level.clone(),
                ..Flags::default()
            },
            Command::Completions { .. } | Command::Man { .. } => Flags::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Each subcommand lists only the flags it uses.
    #[test]
    fn subcommands_take_only_their_flags() {
        let cli = Cli::command();
        let longs = |name: &str| -> Vec<String> {
            let sub = cli.find_subcommand(name).expect(name);
            sub.get_arguments()
                .filter_map(|a| a.get_long().map(str::to_string))
                .collect()
        };
        let has = |name: &str, flag: &str| longs(name).iter().any(|l| l == flag);
        assert!(has("diff", "against") && !has("diff", "listen") && !has("diff", "dry-run"));
        assert!(has("run", "listen") && has("run", "interval") && !has("run", "output"));
        assert!(!has("sync", "interval") && has("sync", "dry-run"));
        assert!(!has("status", "repo") && !has("status", "root") && has("status", "state-dir"));
        assert!(!has("pause", "output") && !has("validate", "color"));
    }

    #[test]
    fn flags_keep_their_values_per_command() {
        let cli = Cli::parse_from([
            "tend", "diff", "--repo", "r", "--ref", "main", "--root", "/x",
        ]);
        let f = cli.command.flags();
        assert_eq!(f.repo.as_deref(), Some("r"));
        assert_eq!(f.reference.as_deref(), Some("main"));
        assert_eq!(f.root, Some(PathBuf::from("/x")));
        let cli = Cli::parse_from(["tend", "status", "-o", "json", "--state-dir", "/s"]);
        let f = cli.command.flags();
        assert_eq!(f.output, Output::Json);
        assert_eq!(f.state_dir, Some(PathBuf::from("/s")));
        assert!(Cli::try_parse_from(["tend", "status", "-o", "markdown"]).is_err());
        assert!(Cli::try_parse_from(["tend", "diff", "--listen", "x"]).is_err());
    }
}

//! The command line: subcommands and the flags of SPEC §2. Each subcommand
//! takes only the flags it uses (shared groups are flattened into each);
//! [`Command::flags`] gathers them into one [`Flags`] for the config.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::duration::Dur;

mod args;
mod flags;
mod groups;

pub use args::*;
pub use flags::Flags;
pub use groups::*;

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
  tend rollout resume -c /etc/tend/tend.yaml
  tend explain /etc/nginx/nginx.conf
  tend health --listen 127.0.0.1:9420
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
    /// Work with the staged rollout of a fleet (fleet.rollout)
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Work with the backups of replaced content
    Backup {
        #[command(subcommand)]
        command: BackupCommand,
    },
    /// Ask the daemon at --listen whether its loop is alive (container health checks)
    #[command(
        after_help = "Asks GET /healthz (with --ready, GET /readyz first) of the daemon at --listen\n(TEND_LISTEN, the config's server.listen, or 127.0.0.1:9420); an address\nof every interface (0.0.0.0) is asked on loopback.\n\nExit codes: 0 it answered 200, 1 anything else (no answer in time, an error\nanswer, a bad address or config)."
    )]
    Health(HealthArgs),
    /// Work with the fleet this host belongs to (`fleet:` in the config)
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
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
pub enum FleetCommand {
    /// Print every host's status as it keeps it in etcd, sorted by host
    #[command(after_help = FLEET_STATUS_HELP)]
    Status(FleetStatusArgs),
}

const FLEET_STATUS_HELP: &str = "Reads every tend/fleet/<host> key of the config's fleet.etcd: revision\napplied, resources in sync, drifted, failed and otherwise, the oldest\ndrift's age, the role (ha leader or follower; the fleet's poller) and the\nlast pass's age. A host that stopped drops out when its lease expires.\n\nExit codes: 0 every host listed is in sync, 1 some host is not, 2 error\n(no fleet configured, etcd unreachable).";

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Lift a halted rollout: the halted revision is marked promoted, so
    /// every host applies it
    #[command(
        after_help = "Reads fleet.etcd from the config. A fixing commit needs no resume: it starts\nits own rollout from the canaries.\n\nExit codes: 0 a halt was lifted, 1 nothing was halted, 2 error."
    )]
    Resume(RolloutResumeArgs),
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

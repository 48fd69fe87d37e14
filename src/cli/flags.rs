//! [`Flags`]: what one command was given, gathered from its argument
//! groups into the one set the config resolves against.

use std::path::PathBuf;

use super::*;
use crate::duration::Dur;

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
    pub link: Option<String>,
    pub link_keep: Option<usize>,
    pub max_failures: Option<u32>,
    pub allowed_signers: Option<PathBuf>,
    pub keyring: Option<PathBuf>,
    pub age_identities: Vec<PathBuf>,
    pub age_recipients: Vec<String>,
    pub allow_rewind: Option<bool>,
    /// `validate --host`/`--label`: check as another host would read.
    pub host: Option<String>,
    pub labels: Vec<String>,
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

    fn link(mut self, l: &LinkArgs) -> Flags {
        self.link.clone_from(&l.link);
        self.link_keep = l.link_keep;
        self
    }

    fn trust(mut self, t: &TrustArgs) -> Flags {
        self.allowed_signers.clone_from(&t.allowed_signers);
        self.keyring.clone_from(&t.keyring);
        self
    }

    fn secrets(mut self, a: &SecretArgs) -> Flags {
        self.age_identities.clone_from(&a.age_identities);
        self.age_recipients.clone_from(&a.age_recipients);
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
                max_failures: a.max_failures.max_failures,
                allow_rewind: a.rewind.allow_rewind,
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .link(&a.link)
                    .trust(&a.trust)
                    .secrets(&a.secrets)
            },
            Command::Sync(a) => Flags {
                root: a.root.root.clone(),
                dry_run: a.dry_run.dry_run,
                output: a.output.output.into(),
                max_failures: a.max_failures.max_failures,
                allow_rewind: a.rewind.allow_rewind,
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .link(&a.link)
                    .trust(&a.trust)
                    .secrets(&a.secrets)
            },
            Command::Diff(a) => Flags {
                root: a.root.root.clone(),
                output: a.output,
                color: a.color,
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .link(&a.link)
                    .trust(&a.trust)
                    .secrets(&a.secrets)
            },
            Command::Validate(a) => Flags {
                root: a.root.root.clone(),
                output: a.output.output.into(),
                host: a.host.host.clone(),
                labels: a.host.labels.clone(),
                ..Flags::common(&a.config, &a.state, &a.log)
                    .source(&a.source)
                    .secrets(&a.secrets)
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
                    .secrets(&a.secrets)
            },
            Command::Unpin(a) => Flags::common(&a.config, &a.state, &a.log),
            Command::Health(a) => Flags {
                config: a.config.config.clone(),
                listen: a.listen.clone(),
                ..Flags::default()
            },
            Command::Explain(a) => Flags {
                root: a.root.root.clone(),
                output: a.output.output.into(),
                ..Flags::common(&a.config, &a.state, &a.log).source(&a.source)
            },
            Command::Rollout {
                command: RolloutCommand::Resume(a),
            } => Flags {
                config: a.config.config.clone(),
                log_format: a.log.log_format.clone(),
                log_level: a.log.log_level.clone(),
                ..Flags::default()
            },
            Command::Backup {
                command: BackupCommand::Cat(a),
            } => Flags {
                root: a.root.root.clone(),
                ..Flags::common(&a.config, &a.state, &a.log).source(&a.source)
            },
            Command::Fleet {
                command: FleetCommand::Status(a),
            } => Flags {
                config: a.config.config.clone(),
                output: a.output.output.into(),
                log_format: a.log.log_format.clone(),
                log_level: a.log.log_level.clone(),
                ..Flags::default()
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

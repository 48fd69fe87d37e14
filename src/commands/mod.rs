//! The subcommands, each returning its exit code (SPEC §2).

mod diff;
mod explain;
mod pause;
mod pin;
mod plugin;
mod status;
mod sync;
mod validate;

use std::process::ExitCode;

use crate::cli::{BackupCommand, Cli, Command, GlobalArgs, PluginCommand};
use crate::config::{self, Settings};

/// Exit code for errors of usage, config, source or lock.
pub const ERROR: u8 = 2;

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tend: {message}");
    ExitCode::from(ERROR)
}

fn settings(args: &GlobalArgs) -> Result<Settings, ExitCode> {
    configured(config::resolve(args).map_err(fail)?)
}

/// Settings with libgit2 configured for them.
fn configured(settings: Settings) -> Result<Settings, ExitCode> {
    let source = &settings.source;
    let tls = crate::source::may_use_tls(&source.repo);
    // SAFETY: `run` is called by main on the process's only thread: nothing
    // has used libgit2 yet, and the runtime and server threads start later.
    unsafe {
        crate::source::configure_transport(source.timeout, source.auth.ca_file.as_deref(), tls)
    }
    .map_err(fail)?;
    Ok(settings)
}

fn init_logging(format: &str, level: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a terminal: a log file or the journal would
    // keep them as noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.with_target(false).try_init()
    };
}

/// Writes command output to stdout. A reader that went away (`tend diff |
/// head`) ends the output, not the command: its exit code still tells.
pub(crate) fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("tend: cannot write the output: {e}");
        }
    }
}

/// [`out`] with a newline, as `println!` takes its arguments.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::commands::out(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// Runs one command. Call it from the main thread before starting any other:
/// it sets libgit2's process-wide transport options.
pub fn run(cli: Cli) -> ExitCode {
    let g = &cli.global;
    // The daemon logs as its settings say (flag, env, then the config's
    // `log` section; info by default); the short commands stay quiet
    // unless asked.
    if let Some(e) = g
        .log_level
        .as_deref()
        .and_then(|l| config::check_log_level(l).err())
    {
        return fail(e);
    }
    if !matches!(cli.command, Command::Run) {
        let level = g.log_level.clone().unwrap_or_else(|| "warn".into());
        init_logging(g.log_format.as_deref().unwrap_or("text"), &level);
    }
    match &cli.command {
        Command::Status => status::run(g),
        Command::Pause { ids, duration } => pause::pause(g, ids, duration.map(|d| d.0)),
        Command::Resume { ids } => pause::resume(g, ids),
        Command::Pin { rev, duration } => match settings(g) {
            Ok(s) => pin::pin(s, rev, duration.map(|d| d.0)),
            Err(code) => code,
        },
        Command::Unpin => pin::unpin(g),
        Command::Explain { what } => match settings(g) {
            Ok(s) => explain::run(g, s, what),
            Err(code) => code,
        },
        Command::Backup {
            command: BackupCommand::Cat { backup, sensitive },
        } => match settings(g) {
            Ok(s) => explain::backup_cat(s, backup, *sensitive),
            Err(code) => code,
        },
        Command::Validate => match config::resolve_for_validate(g)
            .map_err(fail)
            .and_then(configured)
        {
            Ok(s) => validate::run(g, s),
            Err(code) => code,
        },
        Command::Diff => match settings(g) {
            Ok(s) => diff::run(g, s),
            Err(code) => code,
        },
        Command::Sync { allow_mass_prune } => match settings(g) {
            Ok(s) => sync::run(g, s, *allow_mass_prune),
            Err(code) => code,
        },
        Command::Plugin {
            command: PluginCommand::Check { timeout, command },
        } => plugin::check(g, command, timeout.0),
        Command::Run => match settings(g) {
            Ok(s) => {
                init_logging(&s.log_format, &s.log_level);
                crate::daemon::run(s)
            }
            Err(code) => code,
        },
    }
}

/// The revision to work on: a fresh fetch when the state dir lock can be
/// taken, otherwise the last fetched revision (a daemon holds the lock).
pub(crate) struct Fetched {
    pub revision: git2::Oid,
    pub lock: Option<crate::ledger::StateLock>,
}

pub(crate) fn fetch_or_last(
    ctx: &crate::reconcile::Context,
    what: &str,
) -> Result<Fetched, ExitCode> {
    match crate::ledger::StateLock::acquire(&ctx.settings.state_dir, what) {
        Ok(lock) => match ctx.mirror.fetch() {
            Ok(revision) => Ok(Fetched {
                revision,
                lock: Some(lock),
            }),
            Err(e) => Err(fail(e)),
        },
        Err(crate::ledger::LedgerError::Locked { holder }) => match ctx.mirror.resolved() {
            Ok(Some(revision)) => {
                eprintln!(
                    "tend: state dir is locked by {holder}; using the last fetched revision {}",
                    &revision.to_string()[..12]
                );
                Ok(Fetched {
                    revision,
                    lock: None,
                })
            }
            Ok(None) => Err(fail(format!(
                "state dir is locked by {holder} and nothing was fetched yet"
            ))),
            Err(e) => Err(fail(e)),
        },
        Err(e) => Err(fail(e)),
    }
}

//! The subcommands, each returning its exit code (SPEC §2).

mod against;
mod diff;
mod explain;
mod fleet;
mod generate;
mod health;
mod pause;
mod pin;
mod plugin;
mod revisions;
mod rollout;
mod status;
mod sync;
mod validate;

use std::process::ExitCode;

use crate::cli::{BackupCommand, Cli, Command, Flags, FleetCommand, PluginCommand, RolloutCommand};
use crate::config::{self, ConfigError, Settings};

/// Exit code for errors of usage, config, source or lock.
pub const ERROR: u8 = 2;

/// Says why a command failed; a message may name a path, so its control
/// bytes are escaped as in all text output.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!(
        "tend: {}",
        crate::render::quote::escape_controls(&message.to_string())
    );
    ExitCode::from(ERROR)
}

/// Says why the config was refused: each problem on a line of its own,
/// escaped as [`fail`] escapes.
fn refused(e: ConfigError) -> ExitCode {
    for problem in e.problems() {
        eprintln!(
            "tend: {}",
            crate::render::quote::escape_controls(&problem.to_string())
        );
    }
    ExitCode::from(ERROR)
}

fn settings(args: &Flags) -> Result<Settings, ExitCode> {
    configured(config::resolve(args).map_err(refused)?)
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
    let g = cli.command.flags();
    match &cli.command {
        Command::Completions { shell } => return generate::completions(*shell),
        Command::Man { out_dir } => return generate::man(out_dir.as_deref()),
        _ => {}
    }
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
    if !matches!(cli.command, Command::Run(_)) {
        let level = g.log_level.clone().unwrap_or_else(|| "warn".into());
        crate::logging::init(g.log_format.as_deref().unwrap_or("text"), &level);
    }
    match &cli.command {
        Command::Status(_) => status::run(&g),
        Command::Health(a) => health::run(&g, a.ready, a.max_time.0),
        Command::Pause(a) => pause::pause(&g, &a.ids, a.duration.map(|d| d.0)),
        Command::Resume(a) => pause::resume(&g, &a.ids),
        Command::Pin(a) => match settings(&g) {
            Ok(s) => pin::pin(s, &a.rev, a.duration.map(|d| d.0)),
            Err(code) => code,
        },
        Command::Unpin(_) => pin::unpin(&g),
        Command::Explain(a) => match settings(&g) {
            Ok(s) => explain::run(&g, s, &a.what),
            Err(code) => code,
        },
        // Only `fleet` is read: no target is needed.
        Command::Rollout {
            command: RolloutCommand::Resume(_),
        } => match config::resolve_for_validate(&g) {
            Ok(s) => rollout::resume(&s),
            Err(e) => refused(e),
        },
        Command::Backup {
            command: BackupCommand::Cat(a),
        } => match settings(&g) {
            Ok(s) => explain::backup_cat(s, &a.backup, a.sensitive),
            Err(code) => code,
        },
        Command::Validate(a) => match config::resolve_for_validate(&g)
            .map_err(refused)
            .and_then(configured)
        {
            Ok(s) => validate::run(&g, s, a.as_written),
            Err(code) => code,
        },
        Command::Diff(a) => match &a.against {
            Some(rev) => match config::resolve_for_validate(&g)
                .map_err(refused)
                .and_then(configured)
            {
                Ok(s) => against::run(&g, s, rev),
                Err(code) => code,
            },
            None => match settings(&g) {
                Ok(s) => diff::run(&g, s),
                Err(code) => code,
            },
        },
        Command::Sync(a) => match settings(&g) {
            Ok(s) => sync::run(&g, s, a.allow_mass_prune),
            Err(code) => code,
        },
        Command::Fleet {
            command: FleetCommand::Status(_),
        } => fleet::status(&g),
        Command::Plugin {
            command: PluginCommand::Check {
                timeout, command, ..
            },
        } => plugin::check(&g, command, timeout.0),
        Command::Run(_) => match settings(&g) {
            Ok(s) => {
                crate::logging::init(&s.log_format, &s.log_level);
                let args = g.clone();
                let read = move || config::resolve(&args);
                match crate::daemon::run(s, Box::new(read)) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(e),
                }
            }
            Err(code) => code,
        },
        Command::Completions { .. } | Command::Man { .. } => unreachable!("handled above"),
    }
}

/// For commands that write no state (`diff`, `validate`): a state dir that
/// is not there is not made. They work in a throwaway one instead, removed
/// when the returned guard drops (keep it until the command's end).
pub(crate) fn throwaway_state_dir(
    settings: &mut Settings,
) -> Result<Option<tempfile::TempDir>, ExitCode> {
    if settings.state_dir.exists() {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("tend-state-")
        .tempdir()
        .map_err(|e| fail(format!("cannot make a throwaway state dir: {e}")))?;
    tracing::debug!(
        state_dir = %settings.state_dir.display(),
        throwaway = %dir.path().display(),
        "no state dir: using a throwaway one"
    );
    settings.state_dir = dir.path().to_path_buf();
    Ok(Some(dir))
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

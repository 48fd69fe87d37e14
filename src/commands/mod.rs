//! The subcommands, each returning its exit code (SPEC §2), or the
//! [`Failure`] that ended it.

mod against;
mod diff;
mod explain;
mod failure;
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
use crate::config::{self, Settings};
pub use failure::{Because, Cause, Failure};

fn settings(args: &Flags) -> Result<Settings, Failure> {
    configured(config::resolve(args)?)
}

/// Settings with libgit2 configured for them.
fn configured(settings: Settings) -> Result<Settings, Failure> {
    let source = &settings.source;
    let tls = crate::source::may_use_tls(&source.repo);
    // SAFETY: `run` is called by main on the process's only thread: nothing
    // has used libgit2 yet, and the runtime and server threads start later.
    unsafe {
        crate::source::configure_transport(source.timeout, source.auth.ca_file.as_deref(), tls)
    }
    .because(Cause::Config)?;
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
pub fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let g = cli.command.flags();
    match &cli.command {
        Command::Completions { shell } => return Ok(generate::completions(*shell)),
        Command::Man { out_dir } => return generate::man(out_dir.as_deref()),
        _ => {}
    }
    // The daemon logs as its settings say (flag, env, then the config's
    // `log` section; info by default); the short commands stay quiet
    // unless asked.
    if let Some(l) = g.log_level.as_deref() {
        config::check_log_level(l).because(Cause::Usage)?;
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
        Command::Pin(a) => pin::pin(settings(&g)?, &a.rev, a.duration.map(|d| d.0)),
        Command::Unpin(_) => pin::unpin(&g),
        Command::Explain(a) => explain::run(&g, settings(&g)?, &a.what),
        // Only `fleet` is read: no target is needed.
        Command::Rollout {
            command: RolloutCommand::Resume(_),
        } => rollout::resume(&config::resolve_for_validate(&g)?),
        Command::Backup {
            command: BackupCommand::Cat(a),
        } => explain::backup_cat(settings(&g)?, &a.backup, a.sensitive),
        Command::Validate(a) => {
            let s = configured(config::resolve_for_validate(&g)?)?;
            validate::run(&g, s, a.as_written)
        }
        Command::Diff(a) => match &a.against {
            Some(rev) => against::run(&g, configured(config::resolve_for_validate(&g)?)?, rev),
            None => diff::run(&g, settings(&g)?),
        },
        Command::Sync(a) => sync::run(&g, settings(&g)?, a.allow_mass_prune),
        Command::Fleet {
            command: FleetCommand::Status(_),
        } => fleet::status(&g),
        Command::Plugin {
            command: PluginCommand::Check {
                timeout, command, ..
            },
        } => Ok(plugin::check(&g, command, timeout.0)),
        Command::Run(_) => {
            let s = settings(&g)?;
            crate::logging::init(&s.log_format, &s.log_level);
            let args = g.clone();
            let read = move || config::resolve(&args);
            crate::daemon::run(s, Box::new(read)).because(Cause::Daemon)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { .. } | Command::Man { .. } => unreachable!("handled above"),
    }
}

/// For commands that write no state (`diff`, `validate`): a state dir that
/// is not there is not made. They work in a throwaway one instead, removed
/// when the returned guard drops (keep it until the command's end).
pub(crate) fn throwaway_state_dir(
    settings: &mut Settings,
) -> Result<Option<tempfile::TempDir>, Failure> {
    if settings.state_dir.exists() {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("tend-state-")
        .tempdir()
        .because(Cause::Io)
        .map_err(|f| f.context("cannot make a throwaway state dir"))?;
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
) -> Result<Fetched, Failure> {
    match crate::ledger::StateLock::acquire(&ctx.settings.state_dir, what) {
        Ok(lock) => Ok(Fetched {
            revision: ctx.mirror.fetch().because(Cause::Source)?,
            lock: Some(lock),
        }),
        Err(crate::ledger::LedgerError::Locked { holder }) => {
            match ctx.mirror.resolved().because(Cause::Source)? {
                Some(revision) => {
                    eprintln!(
                        "tend: state dir is locked by {holder}; using the last fetched revision {}",
                        &revision.to_string()[..12]
                    );
                    Ok(Fetched {
                        revision,
                        lock: None,
                    })
                }
                None => Err(Failure::says(
                    Cause::State,
                    format!("state dir is locked by {holder} and nothing was fetched yet"),
                )),
            }
        }
        Err(e) => Err(Failure::new(Cause::State, e)),
    }
}

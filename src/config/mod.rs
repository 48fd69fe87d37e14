//! The config file, flags and environment merged into one validated
//! [`Settings`]: flag, then env, then config file, then default. Every
//! problem is reported at once, each with its key and line.

use std::path::PathBuf;

use crate::cli::Flags;

mod file;
mod fleet;
mod ha;
mod hooks;
mod host;
mod load;
mod locate;
mod log;
mod policy;
mod problem;
mod resolve;
mod secrets;
mod server;
mod settings;
mod source;
mod target_flags;
mod targets;
#[cfg(test)]
mod tests;

pub use file::{
    AuthConfig, ContestedConfig, FileConfig, LogConfig, PolicyConfig, ServerConfig, SourceConfig,
    VerifyConfig, WebhookConfig,
};
pub use fleet::{FleetSettings, RolloutSettings};
pub use ha::HaSettings;
pub use hooks::{parse_http, parse_signal, Hook, HookAction, HookConfig, HookError, HttpHook};
pub use load::load_file;
pub use log::{check_log_level, UnknownLevel};
pub use policy::{Policy, PruneLimit};
pub use problem::{ConfigError, Problem};
pub use settings::{ServerSettings, Settings, SourceSettings};
pub use targets::{TargetKind, TargetSettings};

/// Where `tend run` listens when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9420";

/// The state dir alone, for commands that need nothing else (status,
/// pause, resume): flag, env, config file, default.
pub fn state_dir_only(args: &Flags) -> Result<PathBuf, ConfigError> {
    if let Some(d) = &args.state_dir {
        return Ok(d.clone());
    }
    let file = match &args.config {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    Ok(file.state_dir.unwrap_or_else(resolve::default_state_dir))
}

/// The daemon's listen address alone, for `tend health`: flag, env, config
/// file, default.
pub fn listen_only(args: &Flags) -> Result<String, ConfigError> {
    if let Some(l) = &args.listen {
        return Ok(l.clone());
    }
    let file = match &args.config {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    Ok(file
        .server
        .and_then(|s| s.listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.into()))
}

/// The config's `fleet:` alone (`tend fleet status`): `None` when it has
/// none.
pub fn fleet_only(args: &Flags) -> Result<Option<FleetSettings>, ConfigError> {
    let Some(path) = &args.config else {
        return Ok(None);
    };
    let name = path.display().to_string();
    let text = load::read(path)?;
    let mut problems = problem::Problems::new(Some(&name), &text);
    let file = load::parse(&name, &text, &mut problems)?;
    let fleet = fleet::resolve(file.fleet, &mut problems);
    problems.finish(fleet)
}

/// Merges flags/env (already combined by clap) over the config file over
/// defaults, and checks what can be checked without I/O.
pub fn resolve(args: &Flags) -> Result<Settings, ConfigError> {
    resolve::resolve(args, false)
}

/// [`resolve`] for `tend validate`, which touches no target: without one
/// configured, declarations are checked as a `files` target would read
/// them.
pub fn resolve_for_validate(args: &Flags) -> Result<Settings, ConfigError> {
    resolve::resolve(args, true)
}

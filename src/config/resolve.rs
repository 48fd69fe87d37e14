//! The config file, flags and environment merged into one [`Settings`]:
//! each section checked on its own, every problem of every section
//! gathered before any is reported.

use std::path::PathBuf;

use super::file::FileConfig;
use super::problem::{ConfigError, Problems};
use super::settings::Settings;
use super::{
    fleet, ha, hooks, host, load, log, policy, secrets, server, source, target_flags, targets,
};
use crate::cli::Flags;
use crate::model::host::Host;

/// Merges flags/env (already combined by clap) over the config file over
/// defaults, and checks what can be checked without I/O. `any_target`:
/// without a target configured, declarations are read as a `files` target
/// would read them.
pub(super) fn resolve(args: &Flags, any_target: bool) -> Result<Settings, ConfigError> {
    let name = args.config.as_ref().map(|p| p.display().to_string());
    let text = match &args.config {
        Some(p) => load::read(p)?,
        None => String::new(),
    };
    let mut problems = Problems::new(name.as_deref(), &text);
    let file = match &name {
        Some(name) => load::parse(name, &text, &mut problems)?,
        None => FileConfig::default(),
    };

    let (host, host_named) = match host::resolve(args.host.as_deref(), &args.labels, file.host) {
        Ok(found) => found,
        Err(found) => {
            for p in found {
                match p.key.starts_with("--") {
                    true => problems.general(p.key, p.message),
                    false => problems.at(p.key, p.message),
                }
            }
            (Host::default(), false)
        }
    };
    let source = source::resolve(args, file.source, &host, &mut problems);
    let age = secrets::resolve(args, file.secrets, &mut problems);

    let mut targets = targets::resolve(file.targets.unwrap_or_default(), &mut problems);
    target_flags::apply(args, &mut targets, any_target, &mut problems);
    if targets.is_empty() && problems.is_empty() {
        problems.general("", "no target: give --root DIR or `targets:` in the config");
    }

    let ha = ha::resolve(file.ha, &mut problems);
    let fleet = fleet::resolve(file.fleet, &mut problems);
    let hooks = hooks::resolve(file.hooks, &mut problems);
    if let Some(name) = source
        .on_change
        .as_ref()
        .filter(|n| !hooks.contains_key(*n))
    {
        problems.at(
            "source.on_change",
            format!("hook {name:?} is not defined under `hooks:`"),
        );
    }

    let policy = policy::resolve(args, file.policy, &mut problems);
    let server = server::resolve(args, file.server, &mut problems);
    let (log_format, log_level) = log::resolve(args, file.log, &mut problems);
    let state_dir = args
        .state_dir
        .clone()
        .or(file.state_dir)
        .unwrap_or_else(default_state_dir);
    problems.finish(Settings {
        secrets: age,
        ha,
        fleet,
        source,
        targets,
        hooks,
        policy,
        host,
        host_named,
        state_dir,
        server,
        log_format,
        log_level,
    })
}

pub(super) fn default_state_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/tend");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("tend");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/state/tend")
}

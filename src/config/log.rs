//! `log:`: the format of log lines and the level (or filter directives)
//! that passes.

use super::file::LogConfig;
use super::problem::Problems;
use crate::cli::Flags;

/// The log format and level in force: flags over the config over the
/// defaults.
pub(super) fn resolve(
    args: &Flags,
    log: Option<LogConfig>,
    problems: &mut Problems,
) -> (String, String) {
    let log = log.unwrap_or_default();
    let format = args
        .log_format
        .clone()
        .or(log.format)
        .unwrap_or_else(|| default_format().into());
    if !["text", "json", "journal"].contains(&format.as_str()) {
        problems.at(
            "log.format",
            format!("log format {format:?}: use text, json or journal"),
        );
    }
    let level = args
        .log_level
        .clone()
        .or(log.level)
        .unwrap_or_else(|| "info".into());
    if let Err(m) = check_log_level(&level) {
        problems.at("log.level", m.to_string());
    }
    (format, level)
}

/// Under systemd, with stderr connected to the journal, lines go to the
/// journal with their fields; elsewhere text.
fn default_format() -> &'static str {
    match crate::logging::stderr_is_journal() {
        true => "journal",
        false => "text",
    }
}

/// A log level that names no level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("log level {0:?}: use error, warn, info, debug, trace or off (or directives like info,tend=debug)")]
pub struct UnknownLevel(pub String);

/// A level name, or filter directives naming one (`info,tend=debug`): a bare
/// word is otherwise taken as a module name, and `loud` would silence all.
pub fn check_log_level(level: &str) -> Result<(), UnknownLevel> {
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    let known = |l: &str| LEVELS.contains(&l.trim().to_ascii_lowercase().as_str());
    let valid = level
        .split(',')
        .all(|directive| match directive.rsplit_once('=') {
            Some((_, l)) => known(l),
            None => known(directive),
        });
    match valid {
        true => Ok(()),
        false => Err(UnknownLevel(level.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_are_names_or_directives_naming_them() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,tend=debug",
            "tend::source=trace",
        ] {
            assert!(check_log_level(ok).is_ok(), "{ok}");
        }
        for bad in ["loud", "", "info,tend=loud", "verbose"] {
            assert!(check_log_level(bad).is_err(), "{bad}");
        }
    }
}

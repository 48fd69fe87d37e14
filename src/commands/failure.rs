//! How a command fails: its [`Cause`], which alone decides the exit code
//! (README's "Exit codes" table, in [`Failure::code`]), and the error it
//! says on stderr as one chain, `tend: what failed: why: why`.

use std::fmt::{Debug, Display};
use std::process::ExitCode;

use crate::config::ConfigError;
use crate::render::quote::escape_controls;

/// What kind of failure ended a command. Every one is an error (2) but a
/// pass that stopped after changing something, which `sync` reports as
/// not converged, and an unhealthy daemon, which `health` reports as
/// Docker expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Flags that do not go together, or a command the config has no
    /// section for.
    Usage,
    /// The flags, environment or config file were refused.
    Config,
    /// The source: a fetch, a revision not there, one refused by the
    /// trust gate.
    Source,
    /// The state dir: locked by a writer, or its ledger unreadable.
    State,
    /// The ledger is damaged: what it says cannot be trusted.
    Damaged,
    /// A target that could not start, or resources it could not observe.
    Target,
    /// Declarations that are invalid.
    Declarations,
    /// The fleet's etcd did not answer.
    Fleet,
    /// The daemon could not start, or gave up.
    Daemon,
    /// Output or a temporary file that could not be written.
    Io,
    /// A pass failed after it had changed something: not converged.
    Unfinished,
    /// The daemon does not answer as healthy.
    Unhealthy,
}

/// Exit code of every error (SPEC §2).
const ERROR: u8 = 2;
/// `sync`'s exit code when it did not converge.
pub const NOT_CONVERGED: u8 = 3;
/// `health`'s one code for every way of not being healthy: Docker's
/// HEALTHCHECK reserves 2, so errors of usage or config say 1 as well.
const UNHEALTHY: u8 = 1;

/// A command's failure: why, and what is said of it (nothing when the
/// command's own output already told it).
#[derive(Debug)]
pub struct Failure {
    cause: Cause,
    error: Option<anyhow::Error>,
}

impl Failure {
    pub fn new(cause: Cause, error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            cause,
            error: Some(error.into()),
        }
    }

    /// A failure said in words of the command's own, with no error below.
    pub fn says(cause: Cause, message: impl Display + Debug + Send + Sync + 'static) -> Failure {
        Failure::new(cause, anyhow::Error::msg(message))
    }

    /// A failure the command's output has already told (declaration
    /// problems among a diff's changes, a damaged ledger in the status).
    pub fn told(cause: Cause) -> Failure {
        Failure { cause, error: None }
    }

    /// The same failure, said as part of `what`.
    pub fn context(self, what: impl Display + Send + Sync + 'static) -> Failure {
        Failure {
            cause: self.cause,
            error: self.error.map(|e| e.context(what)),
        }
    }

    /// The exit code: the one place a cause becomes one.
    pub fn code(&self) -> ExitCode {
        ExitCode::from(match self.cause {
            Cause::Unfinished => NOT_CONVERGED,
            Cause::Unhealthy => UNHEALTHY,
            Cause::Usage
            | Cause::Config
            | Cause::Source
            | Cause::State
            | Cause::Damaged
            | Cause::Target
            | Cause::Declarations
            | Cause::Fleet
            | Cause::Daemon
            | Cause::Io => ERROR,
        })
    }

    /// The lines said on stderr: one chain, each cause not already said
    /// by the one above it, control bytes escaped as in all text output;
    /// a refused config says each problem on a line of its own.
    pub fn lines(&self) -> Vec<String> {
        let Some(error) = &self.error else {
            return Vec::new();
        };
        if let Some(config) = error.downcast_ref::<ConfigError>() {
            return config
                .problems()
                .iter()
                .map(|p| format!("tend: {}", escape_controls(&p.to_string())))
                .collect();
        }
        vec![format!("tend: {}", escape_controls(&chain(error)))]
    }

    /// Says the failure on stderr and gives its exit code.
    pub fn report(self) -> ExitCode {
        for line in self.lines() {
            eprintln!("{line}");
        }
        self.code()
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Failure {
        Failure::new(Cause::Config, e)
    }
}

/// `outer: cause: cause`. An error that already says its cause in its own
/// message (`cannot read X: permission denied`) is not followed by it again.
fn chain(error: &anyhow::Error) -> String {
    let mut said = String::new();
    for e in error.chain() {
        let text = e.to_string();
        if said.is_empty() {
            said = text;
        } else if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
    }
    said
}

/// Names the cause of a library error as it reaches a command.
pub trait Because<T> {
    fn because(self, cause: Cause) -> Result<T, Failure>;
}

impl<T, E: Into<anyhow::Error>> Because<T> for Result<T, E> {
    fn because(self, cause: Cause) -> Result<T, Failure> {
        self.map_err(|e| Failure::new(cause, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Problem;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {path}: {source}")]
    struct Read {
        path: &'static str,
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the ledger")]
    struct Terse(#[source] std::io::Error);

    fn denied() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::PermissionDenied)
    }

    #[test]
    fn one_chain_each_cause_said_once() {
        let f = Failure::new(
            Cause::State,
            Read {
                path: "/s",
                source: denied(),
            },
        )
        .context("opening the state dir");
        assert_eq!(
            f.lines(),
            ["tend: opening the state dir: cannot read /s: permission denied"]
        );
        let f = Failure::new(Cause::State, Terse(denied()));
        assert_eq!(f.lines(), ["tend: the ledger: permission denied"]);
    }

    #[test]
    fn control_bytes_are_escaped_and_each_problem_has_its_line() {
        let f = Failure::says(Cause::Usage, "no \u{1b}[31mred");
        assert_eq!(f.lines(), ["tend: no \\033[31mred"]);
        let refused = ConfigError::new(vec![
            Problem::general("--link", "one"),
            Problem::general("", "two\nlines"),
        ]);
        let f = Failure::from(refused);
        assert_eq!(f.lines(), ["tend: --link: one", "tend: two\\nlines"]);
        assert!(Failure::told(Cause::Damaged).lines().is_empty());
    }

    #[test]
    fn each_cause_has_the_exit_code_of_the_table() {
        let code = |c| Failure::told(c).code();
        assert_eq!(code(Cause::Config), ExitCode::from(2));
        assert_eq!(code(Cause::Damaged), ExitCode::from(2));
        assert_eq!(code(Cause::Unfinished), ExitCode::from(3));
        assert_eq!(code(Cause::Unhealthy), ExitCode::from(1));
    }
}

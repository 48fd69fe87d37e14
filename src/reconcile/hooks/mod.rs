//! Runs the hooks named in the local config (commands, HTTP calls,
//! signals): the only effects tend has besides its targets. Declarations
//! and `source.on_change` only refer to them by name.

mod command;
mod http;
mod pending;
mod signal;

pub use pending::{run_pending, HookOutcome, Retries};

use std::path::PathBuf;

use crate::config::{Hook, HookAction};

/// Why a hook did not run to its end with success; each names the hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("hook {0:?} is not defined in the local config")]
    Undefined(String),
    #[error("hook {name}: {failure}")]
    Command {
        name: String,
        #[source]
        failure: command::CommandError,
    },
    #[error("hook {name}: {method} {url}: {failure}")]
    Http {
        name: String,
        method: String,
        url: String,
        #[source]
        failure: http::HttpError,
    },
    #[error("hook {name}: {}: {failure}", pidfile.display())]
    Signal {
        name: String,
        pidfile: PathBuf,
        #[source]
        failure: signal::SignalError,
    },
}

/// What every hook is told: the revision the pass applied and how many
/// resources changed for it.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    pub revision: &'a str,
    pub changed: usize,
}

/// Runs `hook` once, bounded by its timeout and by `stop`, which says tend
/// is stopping; an error says why it failed.
pub fn run(
    name: &str,
    hook: &Hook,
    delivery: &Delivery,
    stop: &dyn Fn() -> bool,
) -> Result<(), HookError> {
    let name_ = || name.to_string();
    match &hook.action {
        HookAction::Run(argv) => {
            command::run(name, argv, hook.timeout, delivery, stop).map_err(|failure| {
                HookError::Command {
                    name: name_(),
                    failure,
                }
            })
        }
        HookAction::Http(http) => {
            http::call(http, hook.timeout, delivery, stop).map_err(|failure| HookError::Http {
                name: name_(),
                method: http.method.clone(),
                url: http.url.clone(),
                failure,
            })
        }
        HookAction::Signal { pidfile, signal } => {
            signal::send(pidfile, *signal).map_err(|failure| HookError::Signal {
                name: name_(),
                pidfile: pidfile.clone(),
                failure,
            })
        }
    }?;
    tracing::info!(
        hook = name,
        revision = delivery.revision,
        changed = delivery.changed,
        "hook ran"
    );
    Ok(())
}

//! Runs the hooks named in the local config (commands, HTTP calls,
//! signals): the only effects tend has besides its targets. Declarations
//! and `source.on_change` only refer to them by name.

mod command;
mod http;
mod pending;
mod signal;

pub use pending::{run_pending, HookOutcome, Retries};

use crate::config::{Hook, HookAction};

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
) -> Result<(), String> {
    match &hook.action {
        HookAction::Run(argv) => command::run(name, argv, hook.timeout, delivery, stop),
        HookAction::Http(http) => http::call(name, http, hook.timeout, delivery, stop),
        HookAction::Signal { pidfile, signal } => signal::send(name, pidfile, *signal),
    }?;
    tracing::info!(
        hook = name,
        revision = delivery.revision,
        changed = delivery.changed,
        "hook ran"
    );
    Ok(())
}

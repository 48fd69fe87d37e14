//! tend: keeps live state equal to a versioned declaration in Git, and keeps
//! that responsibility after the first run.
//!
//! Data flows one way: source -> declare -> diff -> target -> ledger, with
//! the reconciler driving.

pub mod backoff;
pub mod cli;
pub mod commands;
pub mod config;
pub mod daemon;
pub mod declare;
pub mod diff;
pub mod duration;
pub mod explain;
pub mod fleet;
pub mod ha;
pub mod ledger;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod open_files;
pub mod ownership;
pub mod reconcile;
pub mod render;
pub mod secrets;
pub mod server;
pub mod source;
pub mod status;
pub mod target;

#[cfg(test)]
#[path = "../tests/util/gate.rs"]
pub(crate) mod test_gate;
/// The test Git repository shared with the binary-driven tests.
#[cfg(test)]
#[path = "../tests/util/repo.rs"]
pub(crate) mod test_repo;

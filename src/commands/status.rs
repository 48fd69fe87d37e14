//! `tend status`: the drift ledger and source state, readable beside a
//! running daemon.

use std::process::ExitCode;
use std::time::SystemTime;

use super::{Because, Cause, Failure};
use crate::cli::{Flags, Output};
use crate::ledger::Ledger;

/// A ledger that could not be opened for reading, said with the likely
/// reason.
#[derive(Debug, thiserror::Error)]
#[error("{0} (has `tend sync` or `tend run` used this state dir?)")]
pub(super) struct NoLedger(#[source] pub crate::ledger::LedgerError);

pub fn run(g: &Flags) -> Result<ExitCode, Failure> {
    let dir = crate::config::state_dir_only(g)?;
    let ledger = Ledger::open_read_only(&dir)
        .map_err(NoLedger)
        .because(Cause::State)?;
    let doc = match crate::status::build(&ledger, SystemTime::now()) {
        Ok(d) => d,
        Err(e) if e.is_damage() => {
            return Err(Failure::new(Cause::Damaged, e).context("ledger damaged"))
        }
        Err(e) => return Err(Failure::new(Cause::State, e)),
    };
    match g.output {
        Output::Json => super::outln!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("status serializes")
        ),
        Output::Text | Output::Markdown => super::out(&crate::status::text(&doc, false)),
    }
    // A damaged ledger is an error: what it says cannot be trusted. The
    // status above has said so.
    if doc.ledger.damaged.is_some() {
        Err(Failure::told(Cause::Damaged))
    } else if doc.all_in_sync() {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

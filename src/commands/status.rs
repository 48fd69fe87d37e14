//! `tend status`: the drift ledger and source state, readable beside a
//! running daemon.

use std::process::ExitCode;
use std::time::SystemTime;

use super::fail;
use crate::cli::{Flags, Output};
use crate::ledger::Ledger;

pub fn run(g: &Flags) -> ExitCode {
    let dir = match crate::config::state_dir_only(g) {
        Ok(d) => d,
        Err(e) => return super::refused(e),
    };
    let ledger = match Ledger::open_read_only(&dir) {
        Ok(l) => l,
        Err(e) => {
            return fail(format!(
                "{e} (has `tend sync` or `tend run` used this state dir?)"
            ))
        }
    };
    let doc = match crate::status::build(&ledger, SystemTime::now()) {
        Ok(d) => d,
        Err(e) if e.is_damage() => return fail(format!("ledger damaged: {e}")),
        Err(e) => return fail(e),
    };
    match g.output {
        Output::Json => super::outln!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("status serializes")
        ),
        Output::Text | Output::Markdown => super::out(&crate::status::text(&doc, false)),
    }
    // A damaged ledger is an error: what it says cannot be trusted.
    if doc.ledger.damaged.is_some() {
        ExitCode::from(2)
    } else if doc.all_in_sync() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

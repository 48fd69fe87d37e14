//! `tend pause` / `tend resume`: written to the ledger, so they act on a
//! running daemon without a lock.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use super::{Because, Cause, Failure};
use crate::cli::Flags;
use crate::ledger::Ledger;
use crate::render::quote::name;

fn open(g: &Flags) -> Result<Ledger, Failure> {
    let dir = crate::config::state_dir_only(g)?;
    Ledger::open(&dir).because(Cause::State)
}

pub fn pause(g: &Flags, ids: &[String], duration: Option<Duration>) -> Result<ExitCode, Failure> {
    let ledger = open(g)?;
    let until = duration.map(|d| SystemTime::now() + d);
    let targets: Vec<Option<&str>> = if ids.is_empty() {
        vec![None]
    } else {
        ids.iter().map(|i| Some(i.as_str())).collect()
    };
    for id in targets {
        if let Some(id) = id {
            warn_if_unknown(&ledger, id);
        }
        ledger.pause(id, until).because(Cause::State)?;
        let what = id.map_or("all resources".into(), name);
        match duration {
            Some(d) => super::outln!("paused {what} for {}", humantime::format_duration(d)),
            None => super::outln!("paused {what} until `tend resume`"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn resume(g: &Flags, ids: &[String]) -> Result<ExitCode, Failure> {
    let ledger = open(g)?;
    let targets: Vec<Option<&str>> = if ids.is_empty() {
        vec![None]
    } else {
        ids.iter().map(|i| Some(i.as_str())).collect()
    };
    let global = ledger
        .pauses()
        .because(Cause::State)?
        .iter()
        .any(|p| p.id.is_none());
    for id in targets {
        if let Some(id) = id {
            warn_if_unknown(&ledger, id);
        }
        ledger.resume(id).because(Cause::State)?;
        match id {
            Some(id) if global => {
                super::outln!(
                    "resumed {}; all others stay paused until `tend resume`",
                    name(id)
                )
            }
            _ => super::outln!("resumed {}", id.map_or("all resources".into(), name)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A typo pauses nothing: say so, while still recording the pause (the
/// identity may be declared by a later revision).
fn warn_if_unknown(ledger: &Ledger, id: &str) {
    if let Ok(found) = ledger.resources_of(std::iter::once(id)) {
        if found.is_empty() {
            let id = name(id);
            eprintln!("tend: note: no resource {id} has been seen yet; check the identity (`tend status -o json` lists them)");
        }
    }
}

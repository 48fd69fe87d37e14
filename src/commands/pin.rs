//! `tend pin REV [--for DUR]` / `tend unpin`: written to the ledger, as
//! pauses are, so a running daemon picks them up without a lock. A pin is
//! checked here first (fetched, signed as required) so a mistake is named
//! at once rather than in the daemon's log.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use super::{Because, Cause, Failure};
use crate::cli::Flags;
use crate::config::Settings;
use crate::ledger::{Ledger, PinRecord};
use crate::source::verify::TrustAnchors;
use crate::source::{Mirror, SourceError};

/// A revision a pin cannot name.
#[derive(Debug, thiserror::Error)]
#[error("revision {rev:?} is not in the mirror ({source}); a pin names a revision tend has fetched (see `tend status`)")]
struct NotFetched {
    rev: String,
    source: SourceError,
}

pub fn pin(settings: Settings, rev: &str, duration: Option<Duration>) -> Result<ExitCode, Failure> {
    let anchors = TrustAnchors::load(&settings.source.verify)
        .because(Cause::Config)
        .map_err(|f| f.context("source.verify"))?;
    let mirror = Mirror::open(
        &settings.state_dir,
        crate::reconcile::mirror_spec(&settings),
    )
    .because(Cause::Source)?;
    let commit = mirror
        .find_revision(rev)
        .map_err(|source| NotFetched {
            rev: rev.to_string(),
            source,
        })
        .because(Cause::Source)?;
    let signer = match &anchors {
        Some(a) => match mirror.verify(a, commit, false).because(Cause::Source)? {
            Ok(signer) => Some(signer),
            Err(refusal) => {
                return Err(Failure::says(
                    Cause::Source,
                    format!("cannot pin {}: {refusal}", &commit.to_string()[..12]),
                ))
            }
        },
        None => None,
    };
    let ledger = Ledger::open(&settings.state_dir).because(Cause::State)?;
    let now = SystemTime::now();
    let record = PinRecord {
        revision: commit.to_string(),
        until: duration.map(|d| now + d),
        pinned_at: now,
    };
    ledger.set_pin(Some(&record)).because(Cause::State)?;
    let signed = signer
        .map(|s| format!(", signed by {s}"))
        .unwrap_or_default();
    match duration {
        Some(d) => super::outln!(
            "pinned at {}{signed} for {}",
            &record.revision[..12],
            humantime::format_duration(d)
        ),
        None => super::outln!(
            "pinned at {}{signed} until `tend unpin`",
            &record.revision[..12]
        ),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn unpin(g: &Flags) -> Result<ExitCode, Failure> {
    let dir = crate::config::state_dir_only(g)?;
    let ledger = Ledger::open(&dir).because(Cause::State)?;
    let held = ledger.pin().because(Cause::State)?;
    ledger.set_pin(None).because(Cause::State)?;
    match held {
        Some(p) => super::outln!(
            "unpinned {}; the ref's newest revision applies",
            &p.revision[..p.revision.len().min(12)]
        ),
        None => super::outln!("nothing was pinned"),
    }
    Ok(ExitCode::SUCCESS)
}

//! `tend pin REV [--for DUR]` / `tend unpin`: written to the ledger, as
//! pauses are, so a running daemon picks them up without a lock. A pin is
//! checked here first (fetched, signed as required) so a mistake is named
//! at once rather than in the daemon's log.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use super::fail;
use crate::cli::Flags;
use crate::config::Settings;
use crate::ledger::{Ledger, PinRecord};
use crate::source::verify::TrustAnchors;
use crate::source::Mirror;

pub fn pin(settings: Settings, rev: &str, duration: Option<Duration>) -> ExitCode {
    let anchors = match TrustAnchors::load(&settings.source.verify) {
        Ok(a) => a,
        Err(e) => return fail(format!("source.verify: {e}")),
    };
    let mirror = match Mirror::open(
        &settings.state_dir,
        crate::reconcile::mirror_spec(&settings),
    ) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let commit = match mirror.find_revision(rev) {
        Ok(c) => c,
        Err(e) => {
            return fail(format!(
                "revision {rev:?} is not in the mirror ({e}); a pin names a revision tend has fetched (see `tend status`)"
            ))
        }
    };
    let signer = match &anchors {
        Some(a) => match mirror.verify(a, commit, false) {
            Ok(Ok(signer)) => Some(signer),
            Ok(Err(refusal)) => {
                return fail(format!(
                    "cannot pin {}: {refusal}",
                    &commit.to_string()[..12]
                ))
            }
            Err(e) => return fail(e),
        },
        None => None,
    };
    let ledger = match Ledger::open(&settings.state_dir) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let now = SystemTime::now();
    let record = PinRecord {
        revision: commit.to_string(),
        until: duration.map(|d| now + d),
        pinned_at: now,
    };
    if let Err(e) = ledger.set_pin(Some(&record)) {
        return fail(e);
    }
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
    ExitCode::SUCCESS
}

pub fn unpin(g: &Flags) -> ExitCode {
    let dir = match crate::config::state_dir_only(g) {
        Ok(d) => d,
        Err(e) => return super::refused(e),
    };
    let ledger = match Ledger::open(&dir) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let held = match ledger.pin() {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Err(e) = ledger.set_pin(None) {
        return fail(e);
    }
    match held {
        Some(p) => super::outln!(
            "unpinned {}; the ref's newest revision applies",
            &p.revision[..p.revision.len().min(12)]
        ),
        None => super::outln!("nothing was pinned"),
    }
    ExitCode::SUCCESS
}

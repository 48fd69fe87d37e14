//! `tend explain ID|PATH` and `tend backup cat REF`: readers beside a
//! running daemon (a read-only ledger, the mirror, the end of the audit
//! log); neither writes anything.

use std::process::ExitCode;

use git2::Oid;

use super::status::NoLedger;
use super::{Because, Cause, Failure};
use crate::cli::{Flags, Output};
use crate::config::Settings;
use crate::ledger::{audit_tail, BackupStore, Ledger, LedgerError};
use crate::model::{Desired, ResourceId};
use crate::reconcile::{self, Context, PassError, Revision};

/// Why the applied revision could not be read.
#[derive(Debug, thiserror::Error)]
enum AppliedError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Id(#[from] git2::Error),
    #[error(transparent)]
    Load(#[from] PassError),
}

/// The applied revision, read from the mirror, and whether a pin holds it.
fn applied(ctx: &Context, ledger: &Ledger) -> Result<Option<(Revision, bool)>, AppliedError> {
    let Some(applied) = ledger.source()?.and_then(|s| s.applied_revision) else {
        return Ok(None);
    };
    let id = Oid::from_str(&applied)?;
    let rev = reconcile::load(ctx, id)?;
    let pinned = ledger.pin()?.is_some_and(|p| p.revision == applied);
    Ok(Some((rev, pinned)))
}

/// The declaration named by identity, or by its path in a target (as
/// [`crate::config::TargetKind::locate`] reads it).
fn find<'a>(ctx: &Context, rev: &'a Revision, what: &str) -> Option<&'a Desired> {
    let resources = &rev.declared.resources;
    if let Some(d) = resources.get(&ResourceId::from_string(what.to_string())) {
        return Some(d);
    }
    let wanted: Vec<(String, String)> = ctx
        .settings
        .targets
        .iter()
        .filter_map(|t| Some((t.name.clone(), t.kind.locate(what)?)))
        .collect();
    resources.values().find(|d| {
        wanted
            .iter()
            .any(|(target, rel)| d.target() == target && d.path_str() == rel)
    })
}

fn open(settings: Settings) -> Result<(Context, Ledger), Failure> {
    let ledger = Ledger::open_read_only(&settings.state_dir)
        .map_err(NoLedger)
        .because(Cause::State)?;
    let ctx = Context::observing(settings).because(Cause::Target)?;
    Ok((ctx, ledger))
}

pub fn run(g: &Flags, settings: Settings, what: &str) -> Result<ExitCode, Failure> {
    let (ctx, ledger) = open(settings)?;
    let applied = applied(&ctx, &ledger)
        .because(Cause::Source)
        .map_err(|f| f.context("reading the applied revision"))?;
    let desired = applied.as_ref().and_then(|(rev, _)| find(&ctx, rev, what));
    let id = match desired {
        Some(d) => d.id.to_string(),
        None => match ledger.resource(what).because(Cause::State)? {
            Some(r) => r.id,
            None => {
                return Err(Failure::says(
                    Cause::Usage,
                    format!("no resource {what:?}: neither an identity nor a path declared by the applied revision (`tend status -o json` lists identities)"),
                ))
            }
        },
    };
    let origin = applied
        .as_ref()
        .map(|(rev, pinned)| crate::explain::Origin {
            revision: rev.id,
            desired,
            commit: ctx.mirror.commit_info(rev.id).ok(),
            pinned: *pinned,
        });
    let x = crate::explain::build(&ledger, &id, origin).because(Cause::State)?;
    match g.output {
        Output::Json => super::outln!(
            "{}",
            serde_json::to_string_pretty(&x).expect("an explanation serializes")
        ),
        Output::Text | Output::Markdown => super::out(&crate::explain::text(&x)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Audit entries that name one backup, at most.
const NAMING_ENTRIES: usize = 1000;

pub fn backup_cat(
    settings: Settings,
    reference: &str,
    sensitive: bool,
) -> Result<ExitCode, Failure> {
    let state_dir = settings.state_dir.clone();
    let (ctx, ledger) = open(settings)?;
    let (naming, _) = audit_tail(&state_dir, NAMING_ENTRIES, |v| v["backup"] == reference)
        .because(Cause::State)?;
    if !sensitive {
        let applied = applied(&ctx, &ledger).ok().flatten();
        let declared_sensitive = |id: &str| {
            applied.as_ref().is_some_and(|(rev, _)| {
                rev.declared
                    .resources
                    .get(&ResourceId::from_string(id.to_string()))
                    .is_some_and(|d| d.sensitive)
            })
        };
        let ids: Vec<&str> = naming.iter().filter_map(|e| e["id"].as_str()).collect();
        if naming.iter().any(|e| e["sensitive"] == true)
            || ids.iter().any(|id| declared_sensitive(id))
        {
            return Err(Failure::says(
                Cause::Usage,
                format!(
                    "{reference} holds content of a sensitive resource ({}); add --sensitive to print it",
                    ids.first().copied().unwrap_or_default()
                ),
            ));
        }
        if ids.is_empty() {
            return Err(Failure::says(
                Cause::Usage,
                format!("{reference} is not named by the end of the audit log, so tend cannot tell whether it is sensitive; add --sensitive to print it"),
            ));
        }
    }
    let store = BackupStore::new(&state_dir).because(Cause::State)?;
    let bytes = store.read(reference).because(Cause::State)?;
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::new(Cause::Io, e).context("cannot write the output"))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

//! `tend explain ID|PATH` and `tend backup cat REF`: readers beside a
//! running daemon (a read-only ledger, the mirror, the end of the audit
//! log); neither writes anything.

use std::process::ExitCode;

use git2::Oid;

use super::fail;
use crate::cli::{Flags, Output};
use crate::config::Settings;
use crate::ledger::{audit_tail, BackupStore, Ledger};
use crate::model::{Desired, ResourceId};
use crate::reconcile::{self, Context, Revision};

/// The applied revision, read from the mirror, and whether a pin holds it.
fn applied(ctx: &Context, ledger: &Ledger) -> Result<Option<(Revision, bool)>, String> {
    let Some(applied) = ledger
        .source()
        .map_err(|e| e.to_string())?
        .and_then(|s| s.applied_revision)
    else {
        return Ok(None);
    };
    let id = Oid::from_str(&applied).map_err(|e| e.to_string())?;
    let rev = reconcile::load(ctx, id).map_err(|e| e.to_string())?;
    let pinned = ledger
        .pin()
        .map_err(|e| e.to_string())?
        .is_some_and(|p| p.revision == applied);
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
            .any(|(target, rel)| d.target() == target && d.path.as_str() == rel)
    })
}

fn open(settings: Settings) -> Result<(Context, Ledger), ExitCode> {
    let ledger = Ledger::open_read_only(&settings.state_dir).map_err(|e| {
        fail(format!(
            "{e} (has `tend sync` or `tend run` used this state dir?)"
        ))
    })?;
    let ctx = Context::observing(settings).map_err(fail)?;
    Ok((ctx, ledger))
}

pub fn run(g: &Flags, settings: Settings, what: &str) -> ExitCode {
    let (ctx, ledger) = match open(settings) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let applied = match applied(&ctx, &ledger) {
        Ok(a) => a,
        Err(e) => return fail(format!("reading the applied revision: {e}")),
    };
    let desired = applied.as_ref().and_then(|(rev, _)| find(&ctx, rev, what));
    let id = match desired {
        Some(d) => d.id.to_string(),
        None => match ledger.resource(what) {
            Ok(Some(r)) => r.id,
            Ok(None) => {
                return fail(format!(
                    "no resource {what:?}: neither an identity nor a path declared by the applied revision (`tend status -o json` lists identities)"
                ))
            }
            Err(e) => return fail(e),
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
    let x = match crate::explain::build(&ledger, &id, origin) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    match g.output {
        Output::Json => super::outln!(
            "{}",
            serde_json::to_string_pretty(&x).expect("an explanation serializes")
        ),
        Output::Text | Output::Markdown => super::out(&crate::explain::text(&x)),
    }
    ExitCode::SUCCESS
}

/// Audit entries that name one backup, at most.
const NAMING_ENTRIES: usize = 1000;

pub fn backup_cat(settings: Settings, reference: &str, sensitive: bool) -> ExitCode {
    let state_dir = settings.state_dir.clone();
    let (ctx, ledger) = match open(settings) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let naming = match audit_tail(&state_dir, NAMING_ENTRIES, |v| v["backup"] == reference) {
        Ok((entries, _)) => entries,
        Err(e) => return fail(e),
    };
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
            return fail(format!(
                "{reference} holds content of a sensitive resource ({}); add --sensitive to print it",
                ids.first().copied().unwrap_or_default()
            ));
        }
        if ids.is_empty() {
            return fail(format!(
                "{reference} is not named by the end of the audit log, so tend cannot tell whether it is sensitive; add --sensitive to print it"
            ));
        }
    }
    let store = match BackupStore::new(&state_dir) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    match store.read(reference) {
        Ok(bytes) => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => fail(format!("cannot write the output: {e}")),
            }
        }
        Err(e) => fail(e),
    }
}

//! `tend sync`: fetch, converge once, exit 0 (converged), 2 (error before
//! any change) or 3 (not converged).

use std::process::ExitCode;
use std::time::SystemTime;

use super::fail;
use crate::cli::Flags;
use crate::config::Settings;
use crate::reconcile::{self, backoff, Context, PassOptions, Recorder};

pub fn run(g: &Flags, settings: Settings, allow_mass_prune: bool) -> ExitCode {
    // `--dry-run` (or TEND_DRY_RUN, or policy.dry_run) is honoured here too:
    // a user who asked for no writes gets none, whichever command ran.
    let dry_run = settings.policy.dry_run;
    let (_lock, ctx, mut rec) = match reconcile::open_writer(settings, "tend sync") {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let revision = match fetch_retrying(&ctx, &rec) {
        Ok(r) => r,
        Err(e) => return fail(format!("{e}{}", kept(&rec))),
    };
    let gate = match reconcile::trust::admit(&ctx, &rec.ledger, revision) {
        Ok(g) => g,
        Err(e) => return fail(e),
    };
    if !dry_run {
        if let Err(e) = reconcile::trust::record(&rec.ledger, &gate, SystemTime::now()) {
            return fail(e);
        }
    }
    let admitted = match gate {
        Ok(a) => a,
        Err(refused) => return fail(format!("{refused}{}", kept(&rec))),
    };
    if admitted.provenance.pinned {
        eprintln!(
            "tend: pinned at {} (`tend unpin` returns to the newest revision of the ref)",
            &admitted.revision.to_string()[..12]
        );
    }
    let revision = admitted.revision;
    let opts = PassOptions {
        allow_mass_prune,
        dry_run,
    };
    let mut rev = match reconcile::load(&ctx, revision) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    rev.provenance = admitted.provenance;
    let report =
        match reconcile::full_pass(&ctx, &mut rec, &rev, opts, &reconcile::Control::default()) {
            Ok(r) => r,
            Err(e) => {
                if let Some(e) = e.ledger() {
                    crate::ledger::note_damage(&ctx.settings.state_dir, e);
                }
                // 2 is an error before any change: so is one before any
                // target was asked to write.
                if !rec.touched() {
                    return fail(format!("{e}; nothing was changed"));
                }
                eprintln!("tend: {e}");
                return ExitCode::from(3);
            }
        };
    for p in &report.problems {
        eprintln!("{p}");
    }
    // Paths refused one by one are no declaration problems; they are named
    // here all the same (those a problem names already are not repeated).
    for (i, (id, reason)) in rev.declared.refused().enumerate() {
        if i == 20 {
            eprintln!("tend: ... and more blocked; see `tend status`");
            break;
        }
        eprintln!("blocked: {id}: {reason}");
    }
    for n in &rev.declared.notes {
        eprintln!("warning: {n}");
    }
    if let Some(reason) = &report.prune_blocked {
        eprintln!("tend: prune held: {reason}");
    }
    if let Some(reason) = &report.unpublished {
        eprintln!("tend: not published: {reason}");
    }
    let summary = format!(
        "revision {}: {} applied, {} pruned, {} failed{}",
        &revision.to_string()[..12],
        report.applied,
        report.deleted,
        report.failed,
        match (report.converged, dry_run) {
            (true, _) => ", converged",
            (false, true) => ", not converged (dry run: nothing written)",
            (false, false) => ", not converged",
        }
    );
    if g.output == crate::cli::Output::Json {
        let v = serde_json::json!({
            "revision": revision.to_string(), "applied": report.applied, "pruned": report.deleted,
            "failed": report.failed, "converged": report.converged,
            "problems": report.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        });
        super::outln!("{v}");
    } else {
        super::outln!("{summary}");
    }
    if report.converged {
        ExitCode::SUCCESS
    } else {
        if !g.output.eq(&crate::cli::Output::Json) {
            eprintln!("tend: not converged; see `tend status`");
        }
        ExitCode::from(3)
    }
}

/// Fetches, retrying with backoff while `source.max_failures` allows (as
/// git-sync's `--max-failures`: the failures allowed before giving up; an
/// init container's remote may come up after it).
fn fetch_retrying(ctx: &Context, rec: &Recorder) -> Result<git2::Oid, crate::source::SourceError> {
    let allowed = ctx.settings.source.max_failures.unwrap_or(0);
    let mut failures = 0;
    loop {
        match reconcile::fetch(ctx, rec, SystemTime::now()) {
            Ok(revision) => return Ok(revision),
            Err(e) if failures < allowed => {
                failures += 1;
                let wait = backoff::jittered(failures);
                eprintln!(
                    "tend: fetch failed (attempt {failures} of {}): {e}; retrying in {:.1}s",
                    allowed + 1,
                    wait.as_secs_f64()
                );
                std::thread::sleep(wait);
            }
            Err(e) => return Err(e),
        }
    }
}

/// What an error before any change leaves applied, for its message.
fn kept(rec: &reconcile::Recorder) -> String {
    let kept = rec
        .ledger
        .source()
        .ok()
        .flatten()
        .and_then(|s| s.applied_revision);
    match kept {
        Some(r) => format!(
            "; nothing was changed, revision {} stays applied",
            &r[..r.len().min(12)]
        ),
        None => "; nothing was changed".to_string(),
    }
}

//! `tend sync`: fetch, converge once, exit 0 (converged), 2 (error before
//! any change) or 3 (not converged).

use std::process::ExitCode;
use std::time::SystemTime;

use super::failure::NOT_CONVERGED;
use super::{Because, Cause, Failure};
use crate::backoff::{self, Failures};
use crate::cli::Flags;
use crate::config::Settings;
use crate::ledger::State;
use crate::model::ResourceId;
use crate::reconcile::{
    self, Context, NextStep, PassError, PassOptions, Recorder, StepKind, WriterError,
};
use crate::render::quote::{escape_controls as said, name};

/// An error before any change, said with what stays applied.
#[derive(Debug, thiserror::Error)]
#[error("{source}{kept}")]
struct NothingChanged<E: std::error::Error + 'static> {
    source: E,
    kept: String,
}

/// What a pass's error was about: the source, or the state dir's ledger.
fn cause_of(e: &PassError) -> Cause {
    match e {
        PassError::Source(_) => Cause::Source,
        PassError::Ledger(_) | PassError::Unrecorded { .. } => Cause::State,
    }
}

pub fn run(g: &Flags, settings: Settings, allow_mass_prune: bool) -> Result<ExitCode, Failure> {
    // `--dry-run` (or TEND_DRY_RUN, or policy.dry_run) is honoured here too:
    // a user who asked for no writes gets none, whichever command ran.
    // With `ha`, one sync never campaigns: only the daemon's leader
    // writes, so a sync observes as a follower does.
    let dry_run = settings.policy.dry_run || settings.ha.is_some();
    if settings.ha.is_some() && !settings.policy.dry_run {
        eprintln!("tend: ha is configured: `tend sync` writes nothing (only the leader of `tend run` replicas writes); this is a dry run");
    }
    let (_lock, ctx, mut rec) = match reconcile::open_writer(settings, "tend sync") {
        Ok(w) => w,
        Err(e @ WriterError::Build(_)) => return Err(Failure::new(Cause::Target, e)),
        Err(e @ WriterError::Ledger(_)) => return Err(Failure::new(Cause::State, e)),
    };
    let revision = fetch_retrying(&ctx, &rec)
        .map_err(|source| NothingChanged {
            source,
            kept: kept(&rec),
        })
        .because(Cause::Source)?;
    let gate = reconcile::trust::admit(&ctx, &rec.ledger, revision)
        .map_err(|e| Failure::new(cause_of(&e), e))?;
    if !dry_run {
        reconcile::trust::record(&rec.ledger, &gate, SystemTime::now()).because(Cause::State)?;
    }
    let admitted = gate
        .map_err(|source| NothingChanged {
            source,
            kept: kept(&rec),
        })
        .because(Cause::Source)?;
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
        follower: false,
    };
    let mut rev = reconcile::load(&ctx, revision).map_err(|e| Failure::new(cause_of(&e), e))?;
    rev.provenance = admitted.provenance;
    let report =
        match reconcile::full_pass(&ctx, &mut rec, &rev, opts, &reconcile::Control::default()) {
            Ok(r) => r,
            Err(e) => {
                if let Some(e) = e.ledger() {
                    crate::ledger::note_damage(&ctx.settings.state_dir, e);
                }
                // An error before any change: so is one before any target
                // was asked to write. After one, the pass did not converge.
                if !rec.touched() {
                    let cause = cause_of(&e);
                    let e = NothingChanged {
                        source: e,
                        kept: "; nothing was changed".into(),
                    };
                    return Err(Failure::new(cause, e));
                }
                return Err(Failure::new(Cause::Unfinished, e));
            }
        };
    reconcile::collect_mirror_if_due(&ctx, &rec);
    for p in &report.problems {
        eprintln!("{}", said(&p.to_string()));
    }
    // Paths refused one by one are no declaration problems; they are named
    // here all the same (those a problem names already are not repeated).
    for (i, (id, reason)) in rev.declared.refused().enumerate() {
        if i == 20 {
            eprintln!("tend: ... and more blocked; see `tend status`");
            break;
        }
        eprintln!("blocked: {}: {}", name(id.as_str()), said(reason));
    }
    for n in &rev.declared.notes {
        eprintln!("warning: {}", said(&n.to_string()));
    }
    if let Some(reason) = &report.prune_blocked {
        eprintln!("tend: prune held: {}", said(&reason.to_string()));
    }
    if let Some(reason) = &report.unpublished {
        eprintln!("tend: not published: {}", said(&reason.to_string()));
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
    let next = Next::of(&report, &ctx.settings.policy, ctx.clock.now());
    if g.output == crate::cli::Output::Json {
        let v = serde_json::json!({
            "revision": revision.to_string(), "applied": report.applied, "pruned": report.deleted,
            "failed": report.failed, "converged": report.converged,
            "problems": report.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            "next": next.json(),
        });
        super::outln!("{v}");
    } else {
        super::outln!("{summary}");
    }
    if report.converged {
        Ok(ExitCode::SUCCESS)
    } else {
        if !g.output.eq(&crate::cli::Output::Json) {
            next.explain();
            eprintln!("tend: not converged; see `tend status`");
        }
        Ok(ExitCode::from(NOT_CONVERGED))
    }
}

/// What the error policy says comes next for each resource not in sync:
/// the same rule the daemon schedules by, so a one-shot run tells a
/// transient failure (retried) from one that needs a human.
struct Next<'r> {
    by_action: Vec<(&'r ResourceId, NextStep)>,
}

impl<'r> Next<'r> {
    fn of(
        report: &'r reconcile::PassReport,
        policy: &crate::config::Policy,
        now: SystemTime,
    ) -> Next<'r> {
        let by_action = report
            .outcomes
            .iter()
            .filter(|(_, o)| o.state != State::InSync)
            .map(|(id, o)| (id, reconcile::next_step(o, policy, now)))
            .collect();
        Next { by_action }
    }

    /// Resources by what comes next for them: `{"retry": [...], ...}`.
    fn json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (id, a) in &self.by_action {
            let list = m
                .entry(a.as_str())
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let serde_json::Value::Array(list) = list {
                list.push(serde_json::Value::String(id.to_string()));
            }
        }
        serde_json::Value::Object(m)
    }

    /// One line per next action: how many resources, which (the first
    /// few), and what comes next for them.
    fn explain(&self) {
        let groups = [
            (
                StepKind::Retry,
                "to retry (transient: `tend run` retries with backoff, or run `tend sync` again)",
            ),
            (
                StepKind::Blocked,
                "blocked (needs a human or a new declaration)",
            ),
            (
                StepKind::Contested,
                "contested (another writer keeps changing them)",
            ),
            (StepKind::Paused, "paused (`tend resume` corrects them)"),
            (StepKind::AwaitChange, "left as they are"),
        ];
        for (kind, what) in groups {
            let ids: Vec<&ResourceId> = self
                .by_action
                .iter()
                .filter(|(_, a)| a.kind() == kind)
                .map(|(id, _)| *id)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let mut named = ids
                .iter()
                .take(5)
                .map(|id| name(id.as_str()).into_owned())
                .collect::<Vec<_>>()
                .join(", ");
            if ids.len() > 5 {
                named.push_str(&format!(" and {} more", ids.len() - 5));
            }
            eprintln!("tend: {} {what}: {named}", ids.len());
        }
    }
}

/// Fetches, retrying with backoff while `source.max_failures` allows (as
/// git-sync's `--max-failures`: the failures allowed before giving up; an
/// init container's remote may come up after it).
fn fetch_retrying(ctx: &Context, rec: &Recorder) -> Result<git2::Oid, crate::source::SourceError> {
    let allowed = ctx.settings.source.max_failures.unwrap_or(0);
    let mut fetches = Failures::default();
    loop {
        match reconcile::fetch(ctx, rec, ctx.clock.now()) {
            Ok(revision) => return Ok(revision),
            Err(e) => {
                let wait = fetches.failed(backoff::MAX);
                if reconcile::gives_up(&fetches, allowed) {
                    return Err(e);
                }
                eprintln!(
                    "tend: fetch failed (attempt {} of {}): {e}; retrying in {:.1}s",
                    fetches.count(),
                    allowed + 1,
                    wait.as_secs_f64()
                );
                std::thread::sleep(wait);
            }
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

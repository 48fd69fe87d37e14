//! One pass over a prepared plan, in order: decide per resource
//! (`decide.rs`), write what was decided (`write.rs`), publish a whole
//! tree (`publish.rs`), run the hooks, and record every outcome
//! (`record.rs`).

use super::control::Control;
use super::hooks::HookOutcome;
use super::outcome::Outcome;
use super::outcomes::Outcomes;
use super::pass::{PassError, PassOptions, PassReport, Revision};
use super::prepare::Prepared;
use super::record::claim_fields;
use super::record::Recorder;
use super::run::Run;
use super::{decide, write};
use crate::ledger::State;
use crate::model::ResourceId;

/// Applies a prepared plan and records the outcome of every resource in scope.
pub fn apply(
    ctx: &super::Context,
    rec: &mut Recorder,
    rev: &Revision,
    mut prepared: Prepared,
    opts: PassOptions,
    ctl: &Control,
) -> Result<PassReport, PassError> {
    // A keyed pass holds the records of its keys. A full pass holds only
    // those of the resources it may correct (their corrections and blocked
    // reasons; none on a no-op pass); the rest are read one at a time when
    // outcomes are recorded.
    // Those in sync are the plan's, taken over: on a no-op pass that is
    // every resource.
    let in_sync = std::mem::take(&mut prepared.plan.in_sync);
    let p = &prepared;
    let records = match p.scope.keys() {
        None => rec
            .ledger
            .resources_of(p.plan.applies.iter().map(|c| c.id.as_str()))?,
        Some(keys) => rec.ledger.resources_of(keys.iter().map(|k| k.as_str()))?,
    };
    let previous = records.into_iter().map(|r| (r.id.clone(), r)).collect();
    let mut run = Run {
        failures: std::cell::Cell::new(0),
        ctx,
        rev,
        previous,
        outcomes: Outcomes::in_sync(in_sync),
        now: ctx.clock.now(),
    };
    let mut report = PassReport {
        revision: Some(rev.id),
        problems: rev.declared.problems.clone(),
        dry_run: opts.dry_run,
        ..Default::default()
    };
    // A pass that prunes also drops the records of identities in its scope
    // it no longer covers.
    let full = p.scope.prunes();
    // Only structured resources have managed fields to claim.
    for (id, before) in &p.managed {
        if !run.outcomes.contains_key(id) {
            continue;
        }
        if let Some(d) = rev.declared.resources.get(id) {
            claim_fields(rec, d, Some(before))?;
        }
    }
    for (id, reason) in &p.plan.unknown {
        run.set(id, State::Unknown, Some(reason.clone()));
    }
    for (id, reason) in rev
        .declared
        .blocked
        .iter()
        .filter(|(id, _)| p.scope.contains(id))
    {
        let state = match rev.declared.waiting.contains(id) {
            true => State::Failed,
            false => State::Blocked,
        };
        run.set(id, state, Some(reason.clone()));
    }

    // Decide, then write: nothing is written before every check is made.
    let paused = rec.paused(run.now)?;
    let todo = decide::corrections(&mut run, rec, p, &paused, opts)?;
    let deletes = decide::deletes(&mut run, p, &paused, opts);
    let adopted = decide::adopted(&run, p, opts, &todo);
    write::adopt(rec, &adopted)?;
    write::corrections(&mut run, rec, p, &todo, ctl, &mut report)?;
    write::deletes(&mut run, rec, p, deletes, ctl, &mut report)?;

    if !opts.dry_run {
        let outcomes = run.outcomes.iter().map(|(id, o)| (id, o.state));
        report.unpublished = super::publish::show(ctx, rev, outcomes, report.cancelled);
    }

    // Every pending hook runs once at the end of the pass: those this pass
    // triggered and those still pending from earlier passes or processes;
    // not before what they are for is published.
    let hooks = match opts.dry_run || report.unpublished.is_some() {
        true => Vec::new(),
        false => super::hooks::run_pending(
            ctx,
            &mut rec.ledger,
            &mut rec.hook_retries,
            &rev.id.to_string(),
            &|| ctl.cancelled(),
        )?,
    };
    for hook in hooks {
        let (reason, retry_at) = match hook.outcome {
            HookOutcome::Delivered => {
                report.hooks.push((hook.name, true));
                continue;
            }
            HookOutcome::Failed { reason, retry_at } => {
                report.hooks.push((hook.name, false));
                (reason, retry_at)
            }
            HookOutcome::Waiting { reason, retry_at } => (reason, retry_at),
        };
        // Not delivered yet: what it is for is retried with it, at its time.
        for id in hook.ids.iter().filter(|id| p.scope.contains(id)) {
            let o = run
                .outcomes
                .get_or_insert_with(id, || Outcome::new(State::Failed, None));
            o.state = State::Failed;
            o.reason = Some(reason.clone());
            o.retry_at = Some(retry_at);
        }
    }

    let recorded = rec.record_all(
        &run.outcomes,
        p.scope.keys().is_some().then_some(&run.previous),
        run.now,
        full && !report.cancelled,
    );
    if let Ok(retries) = &recorded {
        for (id, at) in retries {
            let id = ResourceId::from_string(id.clone());
            if let Some(o) = run.outcomes.get_mut(&id) {
                o.retry_at = Some(*at);
            }
        }
    }
    report.converged = run.outcomes.values().all(|o| o.state == State::InSync)
        && report.problems.is_empty()
        && report.unpublished.is_none();
    report.outcomes = run.outcomes;
    // Saving the stat cache costs what the whole cache costs: keyed passes
    // leave it to the next full pass (a lost entry only means a re-read).
    let targets = ctx.targets.values().filter(|_| p.scope.keys().is_none());
    for t in targets {
        if let Err(e) = t.flush() {
            tracing::warn!(target = t.name(), error = %e, "cannot save the stat cache");
        }
    }
    // What was done and found is known even when the ledger cannot take it.
    match recorded {
        Ok(_) => Ok(report),
        Err(error) => Err(PassError::Unrecorded {
            report: Box::new(report),
            error,
        }),
    }
}

//! Applying a prepared plan: decide per resource (paused, dry run, self_heal,
//! blocked, contested), then write in batches — intents for a whole batch in
//! one transaction before any write, the writes, the audit lines in one
//! append — observe again, prune, run hooks, and record the outcomes.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::control::Control;
use super::hooks::HookOutcome;
use super::pass::{PassError, PassOptions, PassReport, Revision};
use super::prepare::{claim_fields, pruning, spec_digest, Prepared, Pruning, ONLY_FULL_PASSES};
use super::record::{clear_temp_swept, Outcome, Recorder};
use crate::diff::{self, Comparison};
use crate::ledger::{AuditEntry, IntentKind, InventoryEntry, LedgerError, ResourceRecord, State};
use crate::model::{Action, Change, Desired, ResourceId};
use crate::target::TargetError;

/// Changes written together: one intent transaction, one audit append and
/// (for the files target) the syncs that make the batch durable.
const BATCH: usize = 256;
/// A long run of writes (a first sync) doubles its batches up to this many,
/// so the fixed cost of each (a commit, an audit sync, a file system sync)
/// is spread over more files while a short pass stays at [`BATCH`].
const BATCH_MAX: usize = 4096;

/// `todo` cut into batches of [`BATCH`], then twice as many each time, up to
/// [`BATCH_MAX`].
fn growing_chunks<T>(mut todo: &[T]) -> impl Iterator<Item = &[T]> {
    let mut size = BATCH;
    std::iter::from_fn(move || {
        if todo.is_empty() {
            return None;
        }
        let (chunk, rest) = todo.split_at(size.min(todo.len()));
        todo = rest;
        size = (size * 2).min(BATCH_MAX);
        Some(chunk)
    })
}

/// Why a correction a pass decided on was not made.
const STOPPING: &str = "not corrected: tend was stopping";

/// Failed writes logged one by one in a pass; the rest are counted.
const FAILURES_LOGGED: usize = 20;

struct Run<'a> {
    ctx: &'a super::Context,
    /// Failed writes this pass, for [`FAILURES_LOGGED`].
    failures: std::cell::Cell<usize>,
    rev: &'a Revision,
    previous: BTreeMap<String, ResourceRecord>,
    outcomes: BTreeMap<ResourceId, Outcome>,
    now: SystemTime,
}

impl Run<'_> {
    fn set(&mut self, id: &ResourceId, state: State, reason: Option<String>) {
        self.outcomes
            .insert(id.clone(), Outcome::new(state, reason));
    }

    /// Corrections of this resource's drift inside the contested window.
    fn recent_corrections(&self, id: &ResourceId) -> Vec<SystemTime> {
        let window = self.ctx.settings.policy.contested_window;
        self.previous
            .get(id.as_str())
            .map(|r| r.corrections_within(self.now, window))
            .unwrap_or_default()
    }
}

/// A correction that passed every policy check.
struct Todo<'a> {
    change: &'a Change,
    digest: String,
    corrections: Vec<SystemTime>,
}

/// Applies a prepared plan and records the outcome of every resource in scope.
pub fn apply(
    ctx: &super::Context,
    rec: &mut Recorder,
    rev: &Revision,
    p: &Prepared,
    opts: PassOptions,
    ctl: &Control,
) -> Result<PassReport, PassError> {
    // A keyed pass holds the records of its keys. A full pass holds only
    // those of the resources it may correct (their corrections and blocked
    // reasons; none on a no-op pass); the rest are read one at a time when
    // outcomes are recorded.
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
        outcomes: BTreeMap::new(),
        now: ctx.clock.now(),
    };
    let mut report = PassReport {
        revision: Some(rev.id),
        problems: rev.declared.problems.clone(),
        ..Default::default()
    };
    // A pass that prunes also drops the records of identities in its scope
    // it no longer covers.
    let full = p.scope.prunes();
    // Built at once from the plan's identity order rather than one
    // insertion at a time: on a no-op pass this is every resource.
    run.outcomes = p
        .plan
        .in_sync
        .iter()
        .map(|id| (id.clone(), Outcome::new(State::InSync, None)))
        .collect();
    for id in &p.plan.in_sync {
        // Only structured resources have managed fields to claim.
        let Some(before) = p.managed.get(id) else {
            continue;
        };
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
        run.set(id, State::Blocked, Some(reason.clone()));
    }

    let todo = decide(&mut run, rec, p, opts)?;
    adopt(&run, rec, p, opts, &todo)?;
    let mut applied: Vec<(ResourceId, Vec<SystemTime>)> = Vec::new();
    for chunk in growing_chunks(&todo) {
        ctl.beat();
        if ctl.cancelled() {
            report.cancelled = true;
            break;
        }
        let changes: Vec<&Change> = chunk.iter().map(|t| t.change).collect();
        for (t, result) in chunk.iter().zip(write_batch(&run, rec, &changes)?) {
            match result {
                Ok(writes) => {
                    report.writes += writes;
                    *report
                        .writes_by_target
                        .entry(t.change.target.clone())
                        .or_default() += writes;
                    applied.push((t.change.id.clone(), t.corrections.clone()));
                    report.applied += 1;
                }
                Err(e) => {
                    report.failed += 1;
                    let state = match e {
                        TargetError::Transient(_) => State::Failed,
                        TargetError::Terminal(_) => {
                            rec.set_blocked_digest(&t.change.id, &t.digest)?;
                            State::Blocked
                        }
                    };
                    run.set(&t.change.id, state, Some(e.to_string()));
                }
            }
        }
    }
    verify(&mut run, rec, p, applied)?;
    if report.cancelled {
        // Not written: the last look found it differing, and its record
        // must say so rather than keep an older InSync.
        for t in &todo {
            if !run.outcomes.contains_key(&t.change.id) {
                run.set(&t.change.id, State::Drifted, Some(STOPPING.into()));
            }
        }
    }
    prune(&mut run, rec, p, opts, ctl, &mut report)?;

    if !opts.dry_run {
        let outcomes = run.outcomes.iter().map(|(id, o)| (id, o.state));
        report.unpublished = super::publish::show(ctx, rev, outcomes, report.cancelled);
    }

    // Every pending hook runs once at the end of the pass: those this pass
    // triggered and those still pending from earlier passes or processes;
    // not before what they are for is published.
    let hooks = match opts.dry_run || report.unpublished.is_some() {
        true => Vec::new(),
        false => super::hooks::run_pending(ctx, rec, &rev.id.to_string(), ctl.cancelled())?,
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
                .entry(id.clone())
                .or_insert_with(|| Outcome::new(State::Failed, None));
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
        for (id, o) in run.outcomes.iter_mut() {
            if let Some(at) = retries.get(id.as_str()) {
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

/// The policy checks of each create and update: what is left is to be written.
fn decide<'a>(
    run: &mut Run,
    rec: &Recorder,
    p: &'a Prepared,
    opts: PassOptions,
) -> Result<Vec<Todo<'a>>, LedgerError> {
    let policy = &run.ctx.settings.policy;
    let unowned: std::collections::HashSet<&ResourceId> = p.plan.unowned.updates.iter().collect();
    let paused = rec.paused(run.now)?;
    let applied = rec.applied_digests(p.plan.applies.len())?;
    let blocked = rec.blocked_digests(p.plan.applies.len())?;
    let mut todo = Vec::new();
    for change in &p.plan.applies {
        let d = change
            .desired
            .as_ref()
            .expect("applies carry their desired state");
        let digest = spec_digest(d);
        let drift_of_applied = applied.get(&change.id)?.as_deref() == Some(digest.as_str());
        let why = change
            .fields
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ");
        let why = if why.is_empty() {
            "existence".to_string()
        } else {
            why
        };
        if paused.is(&change.id) {
            run.set(
                &change.id,
                State::Paused,
                Some(format!("paused; differs in {why}")),
            );
            continue;
        }
        let heal = d.self_heal.unwrap_or(policy.self_heal);
        if opts.dry_run || (!heal && drift_of_applied) {
            let reason = if opts.dry_run {
                "dry run"
            } else {
                "self_heal is off"
            };
            run.set(
                &change.id,
                State::Drifted,
                Some(format!("{reason}; differs in {why}")),
            );
            continue;
        }
        if !policy.adopt && unowned.contains(&change.id) {
            run.set(
                &change.id,
                State::Blocked,
                Some(format!(
                    "differs in {why}, but tend did not create what is there and policy.adopt is false; remove it, or set adopt: true"
                )),
            );
            continue;
        }
        if blocked.get(&change.id)?.as_deref() == Some(digest.as_str()) {
            let reason = run
                .previous
                .get(change.id.as_str())
                .and_then(|r| r.reason.clone());
            run.set(&change.id, State::Blocked, reason);
            continue;
        }
        let mut corrections = Vec::new();
        if drift_of_applied {
            corrections = run.recent_corrections(&change.id);
            if corrections.len() >= policy.contested_corrections as usize {
                let reason = format!(
                    "contested: another writer overruled tend {} in the last {}; backing off",
                    crate::render::count(corrections.len(), "time", "times"),
                    humantime::format_duration(policy.contested_window)
                );
                let mut o = Outcome::new(State::Contested, Some(reason));
                o.corrections = Some(corrections);
                run.outcomes.insert(change.id.clone(), o);
                continue;
            }
            corrections.push(run.now);
        }
        todo.push(Todo {
            change,
            digest,
            corrections,
        });
    }
    Ok(todo)
}

/// Takes over the objects tend did not create that this pass finds in sync
/// or will update: their identities join the inventory (before any write),
/// so they are pruned once no longer declared, as created ones are.
fn adopt(
    run: &Run,
    rec: &mut Recorder,
    p: &Prepared,
    opts: PassOptions,
    todo: &[Todo],
) -> Result<(), LedgerError> {
    let unowned = &p.plan.unowned;
    let none = unowned.in_sync.is_empty() && unowned.updates.is_empty();
    if none || !run.ctx.settings.policy.adopt || opts.dry_run {
        return Ok(());
    }
    // Updates a policy check held back (paused, self_heal off) are not
    // taken over: only those about to be written.
    let updates: std::collections::HashSet<&ResourceId> = unowned.updates.iter().collect();
    let written = todo
        .iter()
        .map(|t| &t.change.id)
        .filter(|id| updates.contains(id));
    let adopted: Vec<&Desired> = unowned
        .in_sync
        .iter()
        .chain(written)
        .filter_map(|id| run.rev.declared.resources.get(id))
        .collect();
    if adopted.is_empty() {
        return Ok(());
    }
    tracing::info!(
        resources = adopted.len(),
        "adopting objects tend did not create"
    );
    rec.ledger.transaction(|tx| {
        for d in &adopted {
            tx.inventory_add(&InventoryEntry {
                id: d.id.to_string(),
                target: d.target().to_string(),
                path: d.path.to_string(),
            })?;
        }
        Ok(())
    })
}

/// Writes one batch: intents (inventory for creates, pending hooks) in one
/// transaction before any write, then the writes, then one audit append.
fn write_batch(
    run: &Run,
    rec: &mut Recorder,
    changes: &[&Change],
) -> Result<Vec<Result<u64, TargetError>>, LedgerError> {
    let swept = rec.temp_swept();
    rec.ledger.transaction(|tx| {
        if swept {
            clear_temp_swept(tx)?;
        }
        for c in changes {
            if c.action == Action::Create {
                tx.inventory_add(&InventoryEntry {
                    id: c.id.to_string(),
                    target: c.target.clone(),
                    path: c.path.to_string(),
                })?;
            }
            if let Some(hook) = c.desired.as_ref().and_then(|d| d.on_change.as_deref()) {
                tx.add_intent(IntentKind::Hook, hook, c.id.as_str())?;
            }
            // Deletes too: mirror mode names its hook here alone.
            if let Some(hook) = &run.ctx.settings.source.on_change {
                tx.add_intent(IntentKind::Hook, hook, c.id.as_str())?;
            }
        }
        Ok(())
    })?;
    rec.temp_swept_cleared();
    let mut results: Vec<Option<Result<u64, TargetError>>> =
        (0..changes.len()).map(|_| None).collect();
    let mut by_target: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, c) in changes.iter().enumerate() {
        by_target.entry(c.target.as_str()).or_default().push(i);
    }
    let mut audit = Vec::new();
    for (name, idxs) in by_target {
        let Some(target) = run.ctx.targets.get(name) else {
            for i in idxs {
                results[i] = Some(Err(TargetError::Terminal(format!(
                    "target {name:?} is not configured"
                ))));
            }
            continue;
        };
        let batch: Vec<&Change> = idxs.iter().map(|i| changes[*i]).collect();
        rec.touching();
        for (i, result) in
            idxs.into_iter()
                .zip(target.apply_batch(&batch, &run.rev.content, rec.backups()))
        {
            let c = changes[i];
            if let Err(e) = &result {
                let kind = match e {
                    TargetError::Transient(_) => "failed; retried with backoff",
                    TargetError::Terminal(_) => {
                        "blocked; needs the declaration or the live state changed"
                    }
                };
                let n = run.failures.get() + 1;
                run.failures.set(n);
                if n <= FAILURES_LOGGED {
                    tracing::warn!(id = %c.id, action = c.action.as_str(), error = %e, "{kind}");
                } else if n == FAILURES_LOGGED + 1 {
                    tracing::warn!("more writes failed this pass; `tend status` lists every one");
                }
            }
            results[i] = Some(result.map(|applied| {
                let sensitive = c.desired.as_ref().is_some_and(|d| d.sensitive);
                let why: Vec<String> = if c.action == Action::Create {
                    vec!["absent".into()]
                } else {
                    c.fields.iter().map(|f| f.name().to_string()).collect()
                };
                tracing::info!(id = %c.id, action = c.action.as_str(), why = ?why, writes = applied.writes, "applied");
                audit.push(AuditEntry {
                    time: run.ctx.clock.now(),
                    revision: run.rev.id.to_string(),
                    id: c.id.to_string(),
                    action: c.action.as_str().to_string(),
                    why,
                    before: rec.hash_observed(&c.observed, sensitive),
                    after: c.desired.as_ref().map(|d| rec.hash_desired(d)),
                    backup: applied.backups.first().cloned(),
                    sensitive,
                });
                applied.writes
            }));
        }
    }
    rec.audit_all(&audit)?;
    Ok(results
        .into_iter()
        .map(|r| r.expect("every change has a result"))
        .collect())
}

/// Observe again: an apply is only done when live state says so.
fn verify(
    run: &mut Run,
    rec: &mut Recorder,
    p: &Prepared,
    applied: Vec<(ResourceId, Vec<SystemTime>)>,
) -> Result<(), LedgerError> {
    let rev = run.rev;
    let verify: Vec<&Desired> = applied
        .iter()
        .filter_map(|(id, _)| rev.declared.resources.get(id))
        .collect();
    let again = run.ctx.observe(
        verify
            .iter()
            .map(|d| (&d.id, d.target(), &d.path, Some(&d.spec))),
    );
    let mut digests = Vec::new();
    for ((d, (_, corrections)), obs) in verify.into_iter().zip(applied).zip(again) {
        let before = p.managed.get(&d.id);
        let mut outcome =
            match diff::compare(d, &obs, before.map(Vec::as_slice).unwrap_or_default()) {
                Comparison::InSync => {
                    digests.push((d.id.clone(), spec_digest(d)));
                    claim_fields(rec, d, before)?;
                    Outcome::new(State::InSync, None)
                }
                Comparison::Unknown(r) => Outcome::new(State::Unknown, Some(r)),
                Comparison::Differs { .. } => {
                    // The write itself succeeded: what differs now is another
                    // writer's change, so it counts as drift of an applied
                    // declaration (self_heal: false leaves it alone).
                    digests.push((d.id.clone(), spec_digest(d)));
                    Outcome::new(
                        State::Failed,
                        Some(
                            "still differs right after apply: another writer may be changing it"
                                .into(),
                        ),
                    )
                }
            };
        outcome.applied = true;
        if !corrections.is_empty() {
            outcome.corrections = Some(corrections);
        }
        run.outcomes.insert(d.id.clone(), outcome);
    }
    rec.set_applied_digests(&digests)
}

/// Deletes of inventory members no longer declared, within the guards.
fn prune(
    run: &mut Run,
    rec: &mut Recorder,
    p: &Prepared,
    opts: PassOptions,
    ctl: &Control,
    report: &mut PassReport,
) -> Result<(), LedgerError> {
    let guard = match pruning(run.ctx, run.rev, p, opts) {
        Pruning::Delete => None,
        Pruning::Held(reason) => Some(reason),
        // Released, not deleted: out of the inventory (tend no longer
        // manages them) and left where they are; the pass can converge.
        Pruning::Release if opts.dry_run => return Ok(()),
        Pruning::Release => {
            let released: Vec<ResourceId> = p.plan.deletes.iter().map(|c| c.id.clone()).collect();
            tracing::info!(
                resources = released.len(),
                "no longer declared: released, not deleted (policy.prune is false)"
            );
            rec.forget_all(&released)?;
            rec.forget_all(&p.plan.forgotten)?;
            return Ok(());
        }
    };
    let paused = rec.paused(run.now)?;
    let mut todo = Vec::new();
    let keyed = !p.scope.prunes();
    for change in &p.plan.deletes {
        let held = match &guard {
            Some(reason) => Some(reason.as_str()),
            None if keyed && !p.deletes_retried.contains(&change.id) => Some(ONLY_FULL_PASSES),
            None => None,
        };
        if let Some(reason) = held {
            run.set(
                &change.id,
                State::Blocked,
                Some(format!("prune held: {reason}")),
            );
        } else if paused.is(&change.id) {
            run.set(
                &change.id,
                State::Paused,
                Some("paused; no longer declared".into()),
            );
        } else if opts.dry_run {
            run.set(
                &change.id,
                State::Drifted,
                Some("dry run; no longer declared".into()),
            );
        } else {
            todo.push(change);
        }
    }
    let mut chunks = todo.chunks(BATCH);
    while let Some(chunk) = chunks.next() {
        ctl.beat();
        if ctl.cancelled() {
            report.cancelled = true;
            for c in chunk.iter().chain(chunks.flatten()) {
                let reason = format!("no longer declared; {STOPPING}");
                run.set(&c.id, State::Drifted, Some(reason));
            }
            break;
        }
        let mut gone = Vec::new();
        for (c, result) in chunk.iter().zip(write_batch(run, rec, chunk)?) {
            match result {
                Ok(writes) => {
                    report.writes += writes;
                    *report.writes_by_target.entry(c.target.clone()).or_default() += writes;
                    gone.push(c.id.clone());
                    report.deleted += 1;
                }
                Err(e) => {
                    report.failed += 1;
                    run.set(&c.id, State::Failed, Some(e.to_string()));
                }
            }
        }
        rec.forget_all(&gone)?;
    }
    report.prune_blocked = guard;
    if p.scope.prunes() && report.prune_blocked.is_none() {
        rec.forget_all(&p.plan.forgotten)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{growing_chunks, BATCH, BATCH_MAX};

    #[test]
    fn batches_double_up_to_the_cap_and_cover_everything_in_order() {
        let todo: Vec<usize> = (0..20_000).collect();
        let sizes: Vec<usize> = growing_chunks(&todo).map(<[usize]>::len).collect();
        assert_eq!(
            &sizes[..5],
            &[BATCH, 2 * BATCH, 4 * BATCH, 8 * BATCH, BATCH_MAX]
        );
        assert!(sizes.iter().all(|&n| n <= BATCH_MAX));
        let joined: Vec<usize> = growing_chunks(&todo).flatten().copied().collect();
        assert_eq!(joined, todo);
        assert_eq!(growing_chunks(&todo[..10]).count(), 1);
        assert_eq!(growing_chunks::<usize>(&[]).count(), 0);
    }
}

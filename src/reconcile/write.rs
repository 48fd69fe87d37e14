//! Writing what the pass decided: batches through the targets, with the
//! intents for a whole batch in one transaction before any write and the
//! audit lines in one append after; each written resource observed again;
//! deletes, and the inventory following them.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::control::Control;
use super::decide::{holds_secret, spec_digest};
use super::decide::{Deletes, Todo};
use super::outcome::Outcome;
use super::pass::PassReport;
use super::prepare::Prepared;
use super::record::claim_fields;
use super::record::{clear_temp_swept, Recorder};
use super::run::{Run, STOPPING};
use crate::diff::{self, Comparison};
use crate::ledger::{AuditEntry, IntentKind, InventoryEntry, LedgerError, State};
use crate::model::{Action, Backup, Change, Desired, ResourceId};
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

/// Failed writes logged one by one in a pass; the rest are counted.
const FAILURES_LOGGED: usize = 20;

/// Writes the corrections decided on, in growing batches, and observes
/// each written resource again; a stop asked for leaves the rest Drifted.
pub(super) fn corrections(
    run: &mut Run,
    rec: &mut Recorder,
    p: &Prepared,
    todo: &[Todo],
    ctl: &Control,
    report: &mut PassReport,
) -> Result<(), LedgerError> {
    let mut applied: Vec<(ResourceId, Vec<SystemTime>)> = Vec::new();
    for chunk in growing_chunks(todo) {
        ctl.beat();
        if ctl.cancelled() {
            report.cancelled = true;
            break;
        }
        let changes: Vec<&Change> = chunk.iter().map(|t| t.change).collect();
        for (t, result) in chunk.iter().zip(write_batch(run, rec, &changes)?) {
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
    verify(run, rec, p, applied)?;
    if report.cancelled {
        // Not written: the last look found it differing, and its record
        // must say so rather than keep an older InSync.
        for t in todo {
            if !run.outcomes.contains_key(&t.change.id) {
                run.set(&t.change.id, State::Drifted, Some(STOPPING.into()));
            }
        }
    }
    Ok(())
}

/// Takes over `adopted` (see [`super::decide::adopted`]): their identities
/// join the inventory, before any write.
pub(super) fn adopt(rec: &mut Recorder, adopted: &[&Desired]) -> Result<(), LedgerError> {
    if adopted.is_empty() {
        return Ok(());
    }
    tracing::info!(
        resources = adopted.len(),
        "adopting objects tend did not create"
    );
    rec.ledger.transaction(|tx| {
        for d in adopted {
            tx.inventory_add(&InventoryEntry {
                id: d.id.to_string(),
                target: d.target().to_string(),
                path: d.path_str().to_string(),
            })?;
        }
        Ok(())
    })
}

/// Writes one batch: intents (inventory for creates, pending hooks) in one
/// transaction before any write, then the writes, then one audit append.
/// Writes `changes` through their targets; what is replaced is backed up,
/// but where a secret is on either side: a change that writes a decrypted
/// secret, or one that replaces or removes what tend last applied as one
/// (its applied digest says so). A backup would keep a secret in clear, so
/// none is kept and the audit line says so. This is the one place that
/// rule is kept, for every target.
fn write_batch(
    run: &Run,
    rec: &mut Recorder,
    changes: &[&Change],
) -> Result<Vec<Result<u64, TargetError>>, LedgerError> {
    // With `ha`, leadership lost during the pass stops its writes here:
    // nothing more is written, and the next pass is a follower's.
    if let Err(why) = run.ctx.fence.token() {
        return Ok(changes
            .iter()
            .map(|c| Err(TargetError::Transient(format!("{}: {why}", c.id))))
            .collect());
    }
    let mut withheld = Vec::new();
    {
        let applied = rec.applied_digests(changes.len())?;
        for c in changes {
            let writes_secret = c.desired.as_ref().is_some_and(|d| d.decrypted);
            let replaces_secret =
                c.action != Action::Create && applied.get(&c.id)?.is_some_and(|d| holds_secret(&d));
            if writes_secret || replaces_secret {
                withheld.push(c.id.clone());
            }
        }
    }
    let withheld = &withheld[..];
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
            if let Some(hook) = c.desired.as_ref().and_then(|d| d.on_change()) {
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
        let backups = Withheld {
            inner: rec.backups(),
            withheld,
        };
        for (i, result) in
            idxs.into_iter()
                .zip(target.apply_batch(&batch, &run.rev.content, &backups))
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
                // A pruned secret's hash is keyed too.
                let sensitive = c.desired.as_ref().is_some_and(|d| d.sensitive)
                    || withheld.contains(&c.id);
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
            .map(|d| (&d.id, d.target(), d.path(), Some(&d.spec))),
    );
    let mut digests = Vec::new();
    for ((d, (_, corrections)), obs) in verify.into_iter().zip(applied).zip(again) {
        let before = p.managed.get(&d.id);
        let mut outcome =
            match diff::compare(d, &obs, before.map(Vec::as_slice).unwrap_or_default()) {
                Comparison::InSync => {
                    digests.push((d.id.clone(), spec_digest(d, rec.hash_key())));
                    claim_fields(rec, d, before)?;
                    Outcome::new(State::InSync, None)
                }
                Comparison::Unknown(r) => Outcome::new(State::Unknown, Some(r)),
                Comparison::Differs { .. } => {
                    // The write itself succeeded: what differs now is another
                    // writer's change, so it counts as drift of an applied
                    // declaration (self_heal: false leaves it alone).
                    digests.push((d.id.clone(), spec_digest(d, rec.hash_key())));
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

/// Deletes `todo` in batches (their identities leave the inventory once
/// gone); a stop asked for leaves the rest Drifted. Then, when pruning was
/// not held, the records of identities no longer covered are dropped.
pub(super) fn deletes(
    run: &mut Run,
    rec: &mut Recorder,
    p: &Prepared,
    deletes: Deletes,
    ctl: &Control,
    report: &mut PassReport,
) -> Result<(), LedgerError> {
    let (todo, guard) = match deletes {
        Deletes::Release(released) if released.is_empty() => return Ok(()),
        Deletes::Release(released) => {
            tracing::info!(
                resources = released.len(),
                "no longer declared: released, not deleted (policy.prune is false)"
            );
            rec.forget_all(&released)?;
            rec.forget_all(&p.plan.forgotten)?;
            return Ok(());
        }
        Deletes::Delete { todo, held } => (todo, held),
    };
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

/// The backups of a batch, less those of secrets (see [`write_batch`]).
struct Withheld<'a> {
    inner: &'a dyn Backup,
    withheld: &'a [ResourceId],
}

/// What the audit log says instead of a backup reference.
const NOT_KEPT: &str = "not kept: it held a decrypted secret";

impl Backup for Withheld<'_> {
    fn save(&self, id: &ResourceId, bytes: &[u8]) -> std::io::Result<String> {
        if self.withheld.contains(id) {
            return Ok(NOT_KEPT.into());
        }
        self.inner.save(id, bytes)
    }
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

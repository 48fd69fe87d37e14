//! One pass: compare the desired state of a revision (all of it, or the keys
//! an event named) with fresh observations, correct what differs (creates
//! and updates before deletes), observe again, run hooks, and record every
//! outcome in the ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use git2::Oid;

use super::context::{Context, PassContent};
use super::control::Control;
use super::prepare::{claim_fields, prune_guard, spec_digest, Prepared};
use super::record::{Outcome, Recorder};
use crate::declare::{Declared, Problem};
use crate::diff::{self, Comparison};
use crate::ledger::{AuditEntry, ResourceRecord, State};
use crate::model::{Action, Change, Desired, Observed, ResourceId};
use crate::target::TargetError;

#[derive(Debug, Clone, Copy, Default)]
pub struct PassOptions {
    pub allow_mass_prune: bool,
    /// Observe and record, never write.
    pub dry_run: bool,
}

/// Which resources a pass looks at.
#[derive(Debug, Clone)]
pub enum Scope {
    /// The whole desired state and the whole inventory; only these prune.
    All,
    /// The named identities (events, retries).
    Keys(BTreeSet<ResourceId>),
}

/// What a pass did, for exit codes, logs, metrics and requeueing.
#[derive(Debug, Default)]
pub struct PassReport {
    pub revision: Option<Oid>,
    pub applied: usize,
    pub deleted: usize,
    pub failed: usize,
    pub writes: u64,
    pub problems: Vec<Problem>,
    pub prune_blocked: Option<String>,
    pub outcomes: BTreeMap<ResourceId, Outcome>,
    /// Every resource in scope is InSync and nothing is blocked.
    pub converged: bool,
    /// The pass stopped early because shutdown was asked for.
    pub cancelled: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
}

/// A revision's desired state, read once and reused by every pass over it.
pub struct Revision {
    pub id: Oid,
    pub declared: Declared,
    pub content: PassContent,
}

pub fn load(ctx: &Context, id: Oid) -> Result<Revision, PassError> {
    let snapshot = ctx.mirror.snapshot(id)?;
    let declared = ctx.declare(&snapshot)?;
    let content = PassContent {
        inline: declared.inline.clone(),
        blobs: snapshot.content_source()?,
    };
    Ok(Revision {
        id,
        declared,
        content,
    })
}

/// State shared by the steps of one apply.
struct Run<'a> {
    ctx: &'a Context,
    rev: &'a Revision,
    previous: BTreeMap<String, ResourceRecord>,
    outcomes: BTreeMap<ResourceId, Outcome>,
    hooks: BTreeMap<String, Vec<ResourceId>>,
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
        let prev = self
            .previous
            .get(id.as_str())
            .map(|r| r.corrections.clone())
            .unwrap_or_default();
        prev.into_iter()
            .filter(|t| {
                self.now
                    .duration_since(*t)
                    .map(|d| d < window)
                    .unwrap_or(true)
            })
            .collect()
    }
}

/// Applies a prepared plan and records the outcome of every resource in scope.
pub fn apply(
    ctx: &Context,
    rec: &mut Recorder,
    rev: &Revision,
    p: &Prepared,
    opts: PassOptions,
    ctl: &Control,
) -> Result<PassReport, PassError> {
    let previous = rec
        .ledger
        .resources()?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    let mut run = Run {
        ctx,
        rev,
        previous,
        outcomes: BTreeMap::new(),
        hooks: BTreeMap::new(),
        now: SystemTime::now(),
    };
    let mut report = PassReport {
        revision: Some(rev.id),
        problems: rev.declared.problems.clone(),
        ..Default::default()
    };
    let paused = rec.paused()?;
    let policy = &ctx.settings.policy;
    let full = matches!(p.scope, Scope::All);

    for id in &p.plan.in_sync {
        run.set(id, State::InSync, None);
        if let Some(d) = rev.declared.resources.get(id) {
            claim_fields(rec, d, p.managed.get(id))?;
        }
    }
    for (id, reason) in &p.plan.unknown {
        run.set(id, State::Unknown, Some(reason.clone()));
    }
    for (id, reason) in &rev.declared.blocked {
        if full || matches!(&p.scope, Scope::Keys(k) if k.contains(id)) {
            run.set(id, State::Blocked, Some(reason.clone()));
        }
    }

    let mut applied_ids = Vec::new();
    for change in &p.plan.applies {
        ctl.beat();
        if ctl.cancelled() {
            report.cancelled = true;
            break;
        }
        let d = change
            .desired
            .as_ref()
            .expect("applies carry their desired state");
        let digest = spec_digest(d);
        let heal = d.self_heal.unwrap_or(policy.self_heal);
        let drift_of_applied = rec.applied_digest(&change.id)? == Some(digest.clone());
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
        if rec.blocked_digest(&change.id)?.as_deref() == Some(digest.as_str()) {
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
                    "contested: another writer overruled tend {} times in the last {}; backing off",
                    corrections.len(),
                    humantime::format_duration(policy.contested_window)
                );
                let mut o = Outcome::new(State::Contested, Some(reason));
                o.corrections = Some(corrections);
                run.outcomes.insert(change.id.clone(), o);
                continue;
            }
            corrections.push(run.now);
        }
        match apply_one(&mut run, rec, change) {
            Ok(writes) => {
                report.writes += writes;
                applied_ids.push((change.id.clone(), corrections));
                report.applied += 1;
            }
            Err(e) => {
                report.failed += 1;
                let state = match e {
                    TargetError::Transient(_) => State::Failed,
                    TargetError::Terminal(_) => {
                        rec.set_blocked_digest(&change.id, &digest)?;
                        State::Blocked
                    }
                };
                run.set(&change.id, state, Some(e.to_string()));
            }
        }
    }

    // Observe again: an apply is only done when live state says so.
    let verify: Vec<&Desired> = applied_ids
        .iter()
        .filter_map(|(id, _)| rev.declared.resources.get(id))
        .collect();
    let again = ctx.observe(
        verify
            .iter()
            .map(|d| (&d.id, d.target.as_str(), &d.path, Some(&d.spec))),
    );
    for (d, (_, corrections)) in verify.into_iter().zip(applied_ids) {
        let obs = again
            .get(&d.id)
            .cloned()
            .unwrap_or(Observed::Unknown("not observed".into()));
        let before = p.managed.get(&d.id);
        let mut outcome =
            match diff::compare(d, &obs, before.map(Vec::as_slice).unwrap_or_default()) {
                Comparison::InSync => {
                    rec.set_applied_digest(&d.id, &spec_digest(d))?;
                    claim_fields(rec, d, before)?;
                    Outcome::new(State::InSync, None)
                }
                Comparison::Unknown(r) => Outcome::new(State::Unknown, Some(r)),
                Comparison::Differs { .. } => Outcome::new(
                    State::Failed,
                    Some(
                        "still differs right after apply: another writer may be changing it".into(),
                    ),
                ),
            };
        outcome.applied = true;
        if !corrections.is_empty() {
            outcome.corrections = Some(corrections);
        }
        run.outcomes.insert(d.id.clone(), outcome);
    }

    let guard = prune_guard(ctx, rev, p, opts);
    for change in &p.plan.deletes {
        ctl.beat();
        if ctl.cancelled() {
            report.cancelled = true;
            break;
        }
        if let Some(reason) = &guard {
            run.set(
                &change.id,
                State::Blocked,
                Some(format!("prune held: {reason}")),
            );
            continue;
        }
        if paused.is(&change.id) {
            run.set(
                &change.id,
                State::Paused,
                Some("paused; no longer declared".into()),
            );
            continue;
        }
        if opts.dry_run {
            run.set(
                &change.id,
                State::Drifted,
                Some("dry run; no longer declared".into()),
            );
            continue;
        }
        match apply_one(&mut run, rec, change) {
            Ok(writes) => {
                report.writes += writes;
                rec.forget(&change.id)?;
                report.deleted += 1;
            }
            Err(e) => {
                report.failed += 1;
                run.set(&change.id, State::Failed, Some(e.to_string()));
            }
        }
    }
    report.prune_blocked = guard;
    if full && report.prune_blocked.is_none() {
        for id in &p.plan.forgotten {
            rec.forget(id)?;
        }
    }

    for (hook, ids) in std::mem::take(&mut run.hooks) {
        if let Err(reason) = rec.run_hook(ctx, &hook) {
            for id in ids {
                run.set(&id, State::Failed, Some(reason.clone()));
            }
        }
    }

    rec.record_all(
        &run.outcomes,
        &run.previous,
        run.now,
        full && !report.cancelled,
    )?;
    report.converged =
        run.outcomes.values().all(|o| o.state == State::InSync) && report.problems.is_empty();
    report.outcomes = run.outcomes;
    for t in ctx.targets.values() {
        if let Err(e) = t.flush() {
            tracing::warn!(target = t.name(), error = %e, "cannot save the stat cache");
        }
    }
    Ok(report)
}

/// One correction, with intent recorded before the effect. Returns the
/// number of writes.
fn apply_one(run: &mut Run, rec: &mut Recorder, change: &Change) -> Result<u64, TargetError> {
    let target = run.ctx.targets.get(&change.target).ok_or_else(|| {
        TargetError::Terminal(format!("target {:?} is not configured", change.target))
    })?;
    let ledger_err = |e: crate::ledger::LedgerError| TargetError::Transient(format!("ledger: {e}"));
    if change.action == Action::Create {
        rec.adopt(change).map_err(ledger_err)?;
    }
    if let Some(hook) = change.desired.as_ref().and_then(|d| d.on_change.clone()) {
        if !run.hooks.contains_key(&hook) {
            rec.intend_hook(&hook).map_err(ledger_err)?;
        }
        run.hooks.entry(hook).or_default().push(change.id.clone());
    }
    let applied = target.apply(change, &run.rev.content, rec.backups())?;
    let sensitive = change.desired.as_ref().is_some_and(|d| d.sensitive);
    let entry = AuditEntry {
        time: SystemTime::now(),
        revision: run.rev.id.to_string(),
        id: change.id.to_string(),
        action: change.action.as_str().to_string(),
        why: if change.action == Action::Create {
            vec!["absent".into()]
        } else {
            change.fields.iter().map(|f| f.name().to_string()).collect()
        },
        before: rec.hash_observed(&change.observed, sensitive),
        after: change.desired.as_ref().map(|d| rec.hash_desired(d)),
        backup: applied.backups.first().cloned(),
    };
    rec.audit(&entry).map_err(ledger_err)?;
    tracing::info!(id = %change.id, action = change.action.as_str(), why = ?entry.why, writes = applied.writes, "applied");
    Ok(applied.writes)
}

//! One pass: compare the whole desired state of a revision with fresh
//! observations, correct what differs (creates and updates before deletes),
//! observe again, run hooks, and record every outcome in the ledger.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use git2::Oid;

use super::context::{Context, PassContent};
use super::record::Recorder;
use crate::declare::{Declared, Problem};
use crate::diff::{self, Comparison, Owned, Plan};
use crate::ledger::{AuditEntry, IntentKind, InventoryEntry, State};
use crate::model::{Action, Change, Desired, Observed, RelPath, ResourceId, Spec};
use crate::target::TargetError;

#[derive(Debug, Clone, Copy, Default)]
pub struct PassOptions {
    pub allow_mass_prune: bool,
    /// Observe and record, never write.
    pub dry_run: bool,
}

/// What a pass did, for exit codes and logs.
#[derive(Debug, Default)]
pub struct PassReport {
    pub revision: Option<Oid>,
    pub applied: usize,
    pub deleted: usize,
    pub failed: usize,
    pub problems: Vec<Problem>,
    pub prune_blocked: Option<String>,
    /// Every declared resource is InSync and nothing is blocked.
    pub converged: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
}

fn owned(inventory: &[InventoryEntry]) -> Vec<Owned> {
    inventory
        .iter()
        .filter_map(|e| {
            let path = RelPath::parse(&e.path).ok()?;
            Some(Owned { id: ResourceId::from_string(e.id.clone()), target: e.target.clone(), path })
        })
        .collect()
}

/// A short, stable digest of what a declaration asks for; lets
/// `self_heal: false` tell a new declaration from drift of an applied one.
pub fn spec_digest(d: &Desired) -> String {
    match &d.spec {
        Spec::File(f) => format!("file:{}:{:o}:{:?}:{:?}", f.blob, f.mode, f.uid, f.gid),
        Spec::Symlink { target } => format!("symlink:{target}"),
    }
}

/// Desired state, observations and the plan of one revision.
pub struct Prepared {
    pub revision: Oid,
    pub declared: Declared,
    pub inventory: Vec<Owned>,
    pub observed: HashMap<ResourceId, Observed>,
    pub plan: Plan,
    pub content: PassContent,
}

/// Reads a revision's declarations and observes everything they and the
/// inventory name.
pub fn prepare(ctx: &Context, inventory: &[InventoryEntry], revision: Oid) -> Result<Prepared, PassError> {
    let snapshot = ctx.mirror.snapshot(revision)?;
    let declared = ctx.declare(&snapshot)?;
    let inventory = owned(inventory);
    let items = declared
        .resources
        .values()
        .map(|d| (&d.id, d.target.as_str(), &d.path))
        .chain(inventory.iter().map(|o| (&o.id, o.target.as_str(), &o.path)));
    let observed = ctx.observe(items);
    let keep = |id: &ResourceId| declared.blocked.contains_key(id);
    let plan = diff::plan(&declared.resources, &keep, &inventory, &observed);
    let content = PassContent { inline: declared.inline.clone(), blobs: snapshot.content_source()? };
    Ok(Prepared { revision, declared, inventory, observed, plan, content })
}

/// Why prune is held back this pass, if it is.
fn prune_guard(ctx: &Context, p: &Prepared, opts: PassOptions) -> Option<String> {
    let policy = &ctx.settings.policy;
    if p.plan.deletes.is_empty() {
        return None;
    }
    if !policy.prune {
        return Some("policy.prune is false".into());
    }
    if !p.declared.is_complete() {
        return Some("the revision has invalid declarations; nothing is pruned until they are fixed".into());
    }
    if p.declared.resources.is_empty() && p.declared.blocked.is_empty() && !policy.allow_empty {
        return Some(format!(
            "the revision declares nothing; pruning all {} managed resources needs policy.allow_empty",
            p.inventory.len()
        ));
    }
    let allowed = policy.max_prune.allowed(p.inventory.len());
    if p.plan.deletes.len() > allowed && !opts.allow_mass_prune {
        return Some(format!(
            "the pass would prune {} of {} managed resources, over policy.max_prune ({allowed}); raise the limit or run `tend sync --allow-mass-prune`",
            p.plan.deletes.len(),
            p.inventory.len()
        ));
    }
    None
}

/// Applies a prepared plan and records the outcome of every resource.
pub fn apply(ctx: &Context, rec: &mut Recorder, p: &Prepared, opts: PassOptions) -> Result<PassReport, PassError> {
    let now = SystemTime::now();
    let revision = p.revision.to_string();
    let mut report = PassReport { revision: Some(p.revision), problems: p.declared.problems.clone(), ..Default::default() };
    let paused = rec.paused()?;
    let policy = &ctx.settings.policy;
    let mut outcomes: BTreeMap<ResourceId, (State, Option<String>)> = BTreeMap::new();
    let mut hooks: BTreeMap<String, Vec<ResourceId>> = BTreeMap::new();
    let mut applied_ids = Vec::new();

    for id in &p.plan.in_sync {
        outcomes.insert(id.clone(), (State::InSync, None));
    }
    for (id, reason) in &p.plan.unknown {
        outcomes.insert(id.clone(), (State::Unknown, Some(reason.clone())));
    }
    for (id, reason) in &p.declared.blocked {
        outcomes.insert(id.clone(), (State::Blocked, Some(reason.clone())));
    }

    for change in &p.plan.applies {
        let d = change.desired.as_ref().expect("applies carry their desired state");
        let heal = d.self_heal.unwrap_or(policy.self_heal);
        let new_declaration = rec.applied_digest(&change.id)? != Some(spec_digest(d));
        let why = change.fields.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ");
        if paused.is(&change.id) {
            outcomes.insert(change.id.clone(), (State::Paused, Some(format!("paused; differs in {why}"))));
            continue;
        }
        if opts.dry_run || (!heal && !new_declaration) {
            let reason = if opts.dry_run { "dry run" } else { "self_heal is off" };
            outcomes.insert(change.id.clone(), (State::Drifted, Some(format!("{reason}; differs in {}", if why.is_empty() { "existence" } else { &why }))));
            continue;
        }
        match apply_one(ctx, rec, p, change, &revision, &mut hooks) {
            Ok(()) => {
                applied_ids.push(change.id.clone());
                report.applied += 1;
            }
            Err(e) => {
                report.failed += 1;
                let state = match e {
                    TargetError::Transient(_) => State::Failed,
                    TargetError::Terminal(_) => State::Blocked,
                };
                outcomes.insert(change.id.clone(), (state, Some(e.to_string())));
            }
        }
    }

    // Observe again: an apply is only done when live state says so.
    let verify: Vec<&Desired> = applied_ids.iter().filter_map(|id| p.declared.resources.get(id)).collect();
    let again = ctx.observe(verify.iter().map(|d| (&d.id, d.target.as_str(), &d.path)));
    for d in verify {
        let obs = again.get(&d.id).cloned().unwrap_or(Observed::Unknown("not observed".into()));
        let outcome = match diff::compare(d, &obs) {
            Comparison::InSync => {
                rec.set_applied_digest(&d.id, &spec_digest(d))?;
                (State::InSync, None)
            }
            Comparison::Unknown(r) => (State::Unknown, Some(r)),
            Comparison::Differs { .. } => (State::Failed, Some("still differs right after apply: another writer may be changing it".into())),
        };
        outcomes.insert(d.id.clone(), outcome);
    }

    let guard = prune_guard(ctx, p, opts);
    for change in &p.plan.deletes {
        if let Some(reason) = &guard {
            outcomes.insert(change.id.clone(), (State::Blocked, Some(format!("prune held: {reason}"))));
            continue;
        }
        if paused.is(&change.id) {
            outcomes.insert(change.id.clone(), (State::Paused, Some("paused; no longer declared".into())));
            continue;
        }
        if opts.dry_run {
            outcomes.insert(change.id.clone(), (State::Drifted, Some("dry run; no longer declared".into())));
            continue;
        }
        match apply_one(ctx, rec, p, change, &revision, &mut hooks) {
            Ok(()) => {
                rec.forget(&change.id)?;
                report.deleted += 1;
            }
            Err(e) => {
                report.failed += 1;
                outcomes.insert(change.id.clone(), (State::Failed, Some(e.to_string())));
            }
        }
    }
    report.prune_blocked = guard;
    if report.prune_blocked.is_none() {
        for id in &p.plan.forgotten {
            rec.forget(id)?;
        }
    }

    for (hook, ids) in &hooks {
        if let Err(reason) = rec.run_hook(ctx, hook) {
            for id in ids {
                outcomes.insert(id.clone(), (State::Failed, Some(reason.clone())));
            }
        }
    }

    rec.record_all(&outcomes, now)?;
    report.converged = outcomes.values().all(|(s, _)| *s == State::InSync) && report.problems.is_empty();
    for t in ctx.targets.values() {
        if let Err(e) = t.flush() {
            tracing::warn!(target = t.name(), error = %e, "cannot save the stat cache");
        }
    }
    Ok(report)
}

/// One correction, with intent recorded before the effect.
fn apply_one(
    ctx: &Context,
    rec: &mut Recorder,
    p: &Prepared,
    change: &Change,
    revision: &str,
    hooks: &mut BTreeMap<String, Vec<ResourceId>>,
) -> Result<(), TargetError> {
    let target = ctx
        .targets
        .get(&change.target)
        .ok_or_else(|| TargetError::Terminal(format!("target {:?} is not configured", change.target)))?;
    let ledger_err = |e: crate::ledger::LedgerError| TargetError::Transient(format!("ledger: {e}"));
    if change.action == Action::Create {
        rec.adopt(change).map_err(ledger_err)?;
    }
    if let Some(hook) = change.desired.as_ref().and_then(|d| d.on_change.clone()) {
        if !hooks.contains_key(&hook) {
            rec.intend_hook(&hook).map_err(ledger_err)?;
        }
        hooks.entry(hook).or_default().push(change.id.clone());
    }
    let backups = rec.backups();
    let applied = target.apply(change, &p.content, backups)?;
    let sensitive = change.desired.as_ref().is_some_and(|d| d.sensitive);
    let entry = AuditEntry {
        time: SystemTime::now(),
        revision: revision.to_string(),
        id: change.id.to_string(),
        action: change.action.as_str().to_string(),
        why: if change.action == Action::Create {
            vec!["absent".into()]
        } else {
            change.fields.iter().map(|f| f.name().to_string()).collect()
        },
        before: rec.hash_observed(&change.observed, sensitive, &p.content),
        after: change.desired.as_ref().map(|d| rec.hash_desired(d, &p.content)),
        backup: applied.backups.first().cloned(),
    };
    rec.audit(&entry).map_err(ledger_err)?;
    tracing::info!(id = %change.id, action = change.action.as_str(), why = ?entry.why, writes = applied.writes, "applied");
    Ok(())
}

/// Identities named by the revision (declared or blocked).
pub fn declared_ids(d: &Declared) -> BTreeSet<&ResourceId> {
    d.resources.keys().chain(d.blocked.keys()).collect()
}

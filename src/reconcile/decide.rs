//! Deciding, per resource in scope, what the pass does: the policy checks
//! of each create and update (paused, dry run, `self_heal`, adoption,
//! blocked, contested), the guards and pauses on deletes, and what is taken
//! over. Outcomes of what is not written are set here; nothing is written.

use std::time::SystemTime;

use super::context::Context;
use super::outcome::Outcome;
use super::pass::PassOptions;
use super::pass::Revision;
use super::pause::Paused;
use super::prepare::Prepared;
use super::record::Recorder;
use super::run::Run;
use crate::ledger::{HashKey, LedgerError, State};
use crate::model::{Change, Desired, ResourceId, Spec};

/// A correction that passed every policy check.
pub(super) struct Todo<'a> {
    pub change: &'a Change,
    pub digest: String,
    pub corrections: Vec<SystemTime>,
}

/// The policy checks of each create and update (paused, dry run,
/// `self_heal`, adoption, blocked, contested): what is left is to be written.
pub(super) fn corrections<'a>(
    run: &mut Run,
    rec: &Recorder,
    p: &'a Prepared,
    paused: &Paused,
    opts: PassOptions,
) -> Result<Vec<Todo<'a>>, LedgerError> {
    let policy = &run.ctx.settings.policy;
    let unowned: std::collections::HashSet<&ResourceId> = p.plan.unowned.updates.iter().collect();
    let applied = rec.applied_digests(p.plan.applies.len())?;
    let blocked = rec.blocked_digests(p.plan.applies.len())?;
    let mut todo = Vec::new();
    for change in &p.plan.applies {
        let d = change
            .desired
            .as_ref()
            .expect("applies carry their desired state");
        let digest = spec_digest(d, rec.hash_key());
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
        let heal = d.self_heal().unwrap_or(policy.self_heal);
        if opts.dry_run || (!heal && drift_of_applied) {
            let reason = if opts.follower {
                "not the leader"
            } else if opts.dry_run {
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

/// The objects tend did not create that this pass finds in sync or will
/// update: taken over, they join the inventory (before any write), so they
/// are pruned once no longer declared, as created ones are.
pub(super) fn adopted<'a>(
    run: &Run<'a>,
    p: &Prepared,
    opts: PassOptions,
    todo: &[Todo],
) -> Vec<&'a Desired> {
    let unowned = &p.plan.unowned;
    let none = unowned.in_sync.is_empty() && unowned.updates.is_empty();
    if none || !run.ctx.settings.policy.adopt || opts.dry_run {
        return Vec::new();
    }
    // Updates a policy check held back (paused, self_heal off) are not
    // taken over: only those about to be written.
    let updates: std::collections::HashSet<&ResourceId> = unowned.updates.iter().collect();
    let written = todo
        .iter()
        .map(|t| &t.change.id)
        .filter(|id| updates.contains(id));
    unowned
        .in_sync
        .iter()
        .chain(written)
        .filter_map(|id| run.rev.declared.resources.get(id))
        .collect()
}

/// What a pass does with the inventory members no longer declared.
pub(super) enum Deletes<'a> {
    /// `policy.prune: false`: released, not deleted: out of the inventory
    /// (tend no longer manages them) and left where they are.
    Release(Vec<ResourceId>),
    /// Deleted, those in `todo`; the others' outcomes are set. `held`:
    /// why pruning is held back this pass, when it is.
    Delete {
        todo: Vec<&'a Change>,
        held: Option<String>,
    },
}

/// Decides on the deletes of inventory members no longer declared,
/// within the guards (`Pruning`), pauses and dry runs.
pub(super) fn deletes<'a>(
    run: &mut Run,
    p: &'a Prepared,
    paused: &Paused,
    opts: PassOptions,
) -> Deletes<'a> {
    let guard = match pruning(run.ctx, run.rev, p, opts) {
        Pruning::Delete => None,
        Pruning::Held(reason) => Some(reason),
        // Released, not deleted: out of the inventory (tend no longer
        // manages them) and left where they are; the pass can converge.
        Pruning::Release if opts.dry_run => return Deletes::Release(Vec::new()),
        Pruning::Release => {
            let released = p.plan.deletes.iter().map(|c| c.id.clone()).collect();
            return Deletes::Release(released);
        }
    };
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
    Deletes::Delete { todo, held: guard }
}

/// What the digest of a declaration holding a decrypted secret starts with.
const SECRET: &str = "secret-";

/// Whether a resource last applied from a declaration of digest `digest`
/// held a decrypted secret: what is there now is not backed up when it is
/// pruned, since a backup would keep the plaintext in the state dir.
pub fn holds_secret(digest: &str) -> bool {
    digest.starts_with(SECRET)
}

/// A short, stable digest of what a declaration asks for; tells a new
/// declaration from drift of an applied one. The ledger keeps it, so what
/// holds a decrypted secret is hashed keyed (`key`, the state dir's).
pub fn spec_digest(d: &Desired, key: &HashKey) -> String {
    match &d.spec {
        Spec::File(f) if f.secret => format!(
            "{SECRET}file:{}:{:o}:{:?}:{:?}",
            key.hash(f.blob.as_bytes()),
            f.mode,
            f.uid,
            f.gid
        ),
        Spec::File(f) => format!("file:{}:{:o}:{:?}:{:?}", f.blob, f.mode, f.uid, f.gid),
        Spec::Symlink { target } => format!("symlink:{target}"),
        Spec::Structured(s) => {
            use sha2::Digest;
            let text = serde_json::json!([s.kind, s.name, s.spec, s.ignore]).to_string();
            if d.decrypted {
                return format!("{SECRET}object:{}", key.hash(text.as_bytes()));
            }
            format!(
                "object:{}",
                hex::encode(sha2::Sha256::digest(text.as_bytes()))
            )
        }
    }
}

/// What a pass does with the inventory members its revision no longer
/// declares.
#[derive(Debug, PartialEq, Eq)]
pub enum Pruning {
    /// Deletes them (there may be none).
    Delete,
    /// Keeps them, `Blocked`, for this reason.
    Held(String),
    /// `policy.prune: false`: releases them, left in place and no longer
    /// managed.
    Release,
}

/// The [`Pruning`] of this pass.
pub fn pruning(ctx: &Context, rev: &Revision, p: &Prepared, opts: PassOptions) -> Pruning {
    match prune_guard(ctx, rev, p, opts) {
        Some(reason) => Pruning::Held(reason),
        None if !ctx.settings.policy.prune && !p.plan.deletes.is_empty() => Pruning::Release,
        None => Pruning::Delete,
    }
}

/// Why a keyed pass holds back a delete it does not retry.
pub const ONLY_FULL_PASSES: &str = "only full passes prune";

/// Why prune is held back this pass, if it is (releasing too, except for
/// the share `max_prune` limits, since a release deletes nothing).
fn prune_guard(ctx: &Context, rev: &Revision, p: &Prepared, opts: PassOptions) -> Option<String> {
    let policy = &ctx.settings.policy;
    if p.plan.deletes.is_empty() {
        return None;
    }
    // A keyed pass (an event, a retry) prunes only what a pruning pass
    // decided to and failed at: a transient failure is retried with
    // backoff, not held until the next full pass. The revision's guards
    // below still hold; the share max_prune allows was checked by that pass.
    if !p.scope.prunes() && p.deletes_retried.is_empty() {
        return Some(ONLY_FULL_PASSES.into());
    }
    if !rev.declared.is_complete() {
        return Some(
            "the revision has invalid declarations; nothing is pruned until they are fixed".into(),
        );
    }
    // Releasing (`policy.prune: false`) deletes nothing: only an empty
    // revision, most likely a mistake, holds it back.
    if rev.declared.resources.is_empty() && rev.declared.blocked.is_empty() && !policy.allow_empty {
        return Some(format!(
            "the revision declares nothing; pruning all {} managed resources needs policy.allow_empty",
            p.managed_count
        ));
    }
    let allowed = policy.max_prune.allowed(p.managed_count);
    let limited = policy.prune && p.scope.prunes() && !opts.allow_mass_prune;
    if limited && p.plan.deletes.len() > allowed {
        return Some(format!(
            "the pass would prune {} of {} managed resources, over policy.max_prune ({allowed}); raise the limit or run `tend sync --allow-mass-prune`",
            p.plan.deletes.len(),
            p.managed_count
        ));
    }
    None
}

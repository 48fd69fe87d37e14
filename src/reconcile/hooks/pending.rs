//! Pending hooks (ledger intents, recorded before the writes that call for
//! them): run at the end of a pass, at least once, their intents cleared on
//! success. A failing hook backs off on its own clock (1 s doubling to
//! 5 min, jittered), whatever passes run meanwhile, and every resource it
//! is for is retried together at that time, so one failing endpoint is
//! called once per try, not once per changed file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use super::Delivery;
use crate::backoff::retry_at;
use crate::ledger::{Intent, IntentKind, Ledger, LedgerError};
use crate::model::ResourceId;
use crate::reconcile::context::Context;

/// Each failing hook: its failures in a row, when it is tried next, and
/// why it failed last. Kept by the process: a restart tries at once.
#[derive(Debug, Default)]
pub struct Retries(HashMap<String, Retry>);

#[derive(Debug, Clone)]
struct Retry {
    failures: u32,
    next: SystemTime,
    reason: String,
}

/// What became of one pending hook at the end of a pass.
#[derive(Debug)]
pub struct HookRun {
    pub name: String,
    /// The identities it is for.
    pub ids: Vec<ResourceId>,
    pub outcome: HookOutcome,
}

#[derive(Debug, PartialEq)]
pub enum HookOutcome {
    /// Ran and succeeded: delivered.
    Delivered,
    /// Ran and failed; stays pending until `retry_at`.
    Failed {
        reason: String,
        retry_at: SystemTime,
    },
    /// Not run: it failed before and its next try is at `retry_at`.
    Waiting {
        reason: String,
        retry_at: SystemTime,
    },
}

/// Runs each pending hook whose backoff allows, once, telling it
/// `revision` and how many resources changed for it. Once `stop` says tend
/// is stopping no hook starts, and a command running is ended: they stay
/// pending, and run after the restart.
pub fn run_pending(
    ctx: &Context,
    ledger: &mut Ledger,
    retries: &mut Retries,
    revision: &str,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<HookRun>, LedgerError> {
    let mut pending: BTreeMap<String, Vec<Intent>> = BTreeMap::new();
    for intent in ledger.intents(IntentKind::Hook)? {
        pending.entry(intent.id.clone()).or_default().push(intent);
    }
    // Backoffs of hooks no longer pending are done with.
    retries.0.retain(|name, _| pending.contains_key(name));
    let now = ctx.clock.now();
    let mut out = Vec::new();
    for (name, intents) in pending {
        if stop() {
            break;
        }
        // One resource may have asked twice (its declaration and
        // `source.on_change` naming the same hook).
        let ids: Vec<ResourceId> = intents
            .iter()
            .map(|i| i.detail.as_str())
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .map(|id| ResourceId::from_string(id.to_string()))
            .collect();
        if let Some(r) = retries.0.get(&name).filter(|r| r.next > now) {
            let outcome = HookOutcome::Waiting {
                reason: r.reason.clone(),
                retry_at: r.next,
            };
            out.push(HookRun { name, ids, outcome });
            continue;
        }
        let delivery = Delivery {
            revision,
            changed: ids.len(),
        };
        let result = match ctx.settings.hooks.get(&name) {
            None => Err(super::HookError::Undefined(name.clone())),
            Some(h) => super::run(&name, h, &delivery, stop),
        };
        let outcome = match result {
            Ok(()) => {
                ledger.transaction(|tx| {
                    for i in &intents {
                        tx.clear_intent(i.seq)?;
                    }
                    Ok(())
                })?;
                retries.0.remove(&name);
                HookOutcome::Delivered
            }
            Err(e) => {
                let reason = e.to_string();
                let failures = retries.0.get(&name).map_or(0, |r| r.failures) + 1;
                let retry_at = retry_at(failures, ctx.clock.now());
                tracing::warn!(hook = %name, error = %reason, failures, "hook failed; it stays pending");
                let retry = Retry {
                    failures,
                    next: retry_at,
                    reason: reason.clone(),
                };
                retries.0.insert(name.clone(), retry);
                HookOutcome::Failed { reason, retry_at }
            }
        };
        out.push(HookRun { name, ids, outcome });
    }
    Ok(out)
}

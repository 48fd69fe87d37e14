//! The rollout's rule, pure: from what etcd holds and what this host knows
//! of its own passes, whether it may apply the revision it has, and what
//! it writes. Every host decides from the same keys, so any of them may
//! write a halt or a promotion (each written once, by a transaction).

use std::collections::BTreeMap;

use super::keys::{Alive, Halt, Health, Report, RevState, Snapshot};
use crate::config::RolloutSettings;
use crate::model::host::Host;

/// What this host knows of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Local {
    /// The newest revision it admitted (fetched and verified).
    pub wanted: Option<String>,
    /// The revision it applies.
    pub applied: Option<String>,
    /// How its passes over `wanted` went, once it applies it.
    pub report: Option<Report>,
}

/// Why a host keeps the revision it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// No alive host is picked by `fleet.rollout.canary`.
    NoCanary,
    /// The canaries have not stayed converged for the soak yet.
    Soaking,
    Halted(Halt),
    /// etcd did not answer: nothing new is applied.
    Unreachable(String),
}

/// Whether the wanted revision may be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Apply,
    Hold(Held),
}

/// A write the decision asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// The revision's canaries, unless another host chose them first.
    Canaries { rev: String, hosts: Vec<String> },
    /// This canary's report, under its lease.
    Report { rev: String, report: Report },
    /// The revision halts, unless it was promoted or halted first.
    Halt(Halt),
    /// The revision is promoted, unless it was halted or promoted first.
    Promote { rev: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    /// This host is one of the wanted revision's canaries, trying it
    /// before it is promoted.
    pub canary: bool,
    /// The revision is halted (a canary keeps applying it all the same).
    pub halt: Option<Halt>,
    pub writes: Vec<Write>,
}

impl Decision {
    fn hold(held: Held, canary: bool, applying: bool, writes: Vec<Write>) -> Decision {
        // A canary keeps applying what it applies: it is where the
        // revision is being tried, halted or not.
        let halt = match &held {
            Held::Halted(h) => Some(h.clone()),
            _ => None,
        };
        let verdict = match canary && applying {
            true => Verdict::Apply,
            false => Verdict::Hold(held),
        };
        Decision {
            verdict,
            canary,
            halt,
            writes,
        }
    }
}

/// The canaries among the hosts `alive`: those the selector picks, the
/// first `count` by name.
pub fn pick_canaries(alive: &BTreeMap<String, Alive>, settings: &RolloutSettings) -> Vec<String> {
    alive
        .iter()
        .filter(|(name, a)| {
            settings.canary.picks(&Host {
                name: name.to_string(),
                labels: a.labels.clone(),
            })
        })
        .map(|(name, _)| name.clone())
        .take(settings.count as usize)
        .collect()
}

/// The decision of `me` about `local.wanted`.
pub fn decide(snap: &Snapshot, me: &Host, settings: &RolloutSettings, local: &Local) -> Decision {
    let Some(rev) = local.wanted.clone() else {
        return Decision {
            verdict: Verdict::Apply,
            canary: false,
            halt: None,
            writes: Vec::new(),
        };
    };
    let applying = local.applied.as_deref() == Some(rev.as_str());
    let state: RevState = snap.rev(&rev);
    let mut writes = Vec::new();
    let canaries = match state.canaries.clone() {
        // An empty list (written by hand) names no canary: nothing soaks,
        // so nothing is promoted by it.
        Some(c) if c.is_empty() => return Decision::hold(Held::NoCanary, false, applying, writes),
        Some(c) => c,
        None => {
            let picked = pick_canaries(&snap.alive, settings);
            if picked.is_empty() {
                return Decision::hold(Held::NoCanary, false, applying, writes);
            }
            writes.push(Write::Canaries {
                rev: rev.clone(),
                hosts: picked.clone(),
            });
            picked
        }
    };
    let canary = canaries.contains(&me.name);
    if let Some(h) = state.halted {
        return Decision::hold(Held::Halted(h), canary, applying, writes);
    }
    if state.promoted {
        // Promoted, a canary is a host like the others.
        return Decision {
            verdict: Verdict::Apply,
            canary: false,
            halt: None,
            writes,
        };
    }
    let mut reports = state.reports.clone();
    if canary {
        if let Some(mine) = local.report.clone().filter(|_| applying) {
            if reports.get(&me.name) != Some(&mine) {
                writes.push(Write::Report {
                    rev: rev.clone(),
                    report: mine.clone(),
                });
            }
            reports.insert(me.name.clone(), mine);
        }
    }
    // A canary halts the revision by failing, or by going silent: its
    // alive key expired with its lease.
    let failed = canaries.iter().find_map(|c| {
        let report = reports.get(c);
        if let Some(r) = report.filter(|r| r.state == Health::Failed) {
            return Some(Halt {
                revision: rev.clone(),
                reason: r.reason.clone().unwrap_or_else(|| "failed".into()),
                host: c.clone(),
            });
        }
        (!snap.alive.contains_key(c)).then(|| Halt {
            revision: rev.clone(),
            reason: format!("canary {c} went silent (its lease expired)"),
            host: c.clone(),
        })
    });
    if let Some(h) = failed {
        writes.push(Write::Halt(h.clone()));
        return Decision::hold(Held::Halted(h), canary, applying, writes);
    }
    let soaked = canaries.iter().all(|c| {
        reports
            .get(c)
            .is_some_and(|r| r.state == Health::Converged && r.soaked)
    });
    if soaked {
        writes.push(Write::Promote { rev });
        return Decision {
            verdict: Verdict::Apply,
            canary,
            halt: None,
            writes,
        };
    }
    match canary {
        true => Decision {
            verdict: Verdict::Apply,
            canary,
            halt: None,
            writes,
        },
        false => Decision::hold(Held::Soaking, canary, applying, writes),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;

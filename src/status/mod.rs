//! The status document (SPEC §6): one model printed by `tend status` and
//! served by the HTTP API, built only from the ledger (`build.rs`) and
//! printed as text by `text.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ledger::State;

mod build;
mod text;

pub use build::{build, resource, summary};
pub use text::text;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SourceStatus {
    pub repo: String,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub fetched_revision: Option<String>,
    pub applied_revision: Option<String>,
    pub last_fetch: Option<String>,
    pub last_fetch_error: Option<String>,
    pub last_successful_fetch: Option<String>,
    pub seconds_since_last_successful_fetch: Option<u64>,
    pub drift_since: Option<String>,
    pub drift_age_seconds: Option<u64>,
    /// What the applied revision holds that is left out (submodules), as
    /// `path: message`; nothing is blocked by it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The last time the mirror was found damaged and repaired, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repaired: Option<String>,
    /// Who signed the applied revision, when signatures are checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_signer: Option<String>,
    /// The last fetched revision, when it was not applied, and why.
    pub refused: Option<RefusedStatus>,
    /// The operator's pin (`tend pin`), while it holds.
    pub pinned: Option<PinnedStatus>,
    /// Bytes the Git mirrors under the state dir take.
    pub mirror_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RefusedStatus {
    pub revision: String,
    /// unsigned, untrusted, bad_signature, expired, revoked or rewind.
    pub reason: String,
    pub detail: String,
    pub since: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PinnedStatus {
    pub revision: String,
    pub until: Option<String>,
    pub since: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ResourceStatus {
    pub id: String,
    pub state: State,
    pub drift_since: Option<String>,
    pub drift_age_seconds: Option<u64>,
    pub attempts: u32,
    pub reason: Option<String>,
    pub next_retry: Option<String>,
    pub last_applied: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusDoc {
    pub generated_at: String,
    pub source: Option<SourceStatus>,
    /// What the daemon's file-system watcher covers, or why it fell back to
    /// the resync timer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watcher: Option<String>,
    /// With `ha`: this replica's role and whom it follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha: Option<HaStatus>,
    /// With `fleet.rollout`: where the staged rollout of the newest
    /// revision stands for this host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    pub counts: BTreeMap<String, usize>,
    /// What is wrong with the declarations of the revision last worked on
    /// (`file:line: message`); while there are any, nothing is pruned.
    pub problems: Vec<String>,
    /// What is wrong with the ledger itself, when anything is: while it is
    /// damaged or cannot be written, its records may not say what is true.
    #[serde(skip_serializing_if = "LedgerHealth::is_sound")]
    pub ledger: LedgerHealth,
    pub resources: Vec<ResourceStatus>,
}

/// A replica's part among replicas with `ha` (SPEC §11).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HaStatus {
    /// `leader` (it writes) or `follower` (it observes, writes nothing).
    pub role: String,
    /// The leader's name, when known (its own when it leads).
    pub leader: Option<String>,
}

/// A host's part in a staged rollout (SPEC §12).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RolloutStatus {
    /// `canary` (this host tries the revision first), `pending` (held
    /// until the canaries soaked), `halted` (a canary failed with it),
    /// `waiting` (etcd did not answer) or `promoted` (applied by all).
    pub state: String,
    /// The revision the rollout is about.
    pub revision: Option<String>,
    /// Why it is held or halted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The canary that halted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

impl RolloutStatus {
    /// The line `tend status` prints after `rollout: `.
    pub fn line(&self) -> String {
        let rev = self
            .revision
            .as_deref()
            .map_or("-".to_string(), |r| r[..r.len().min(12)].to_string());
        let reason = self.reason.as_deref().unwrap_or("");
        match self.state.as_str() {
            "halted" => match &self.host {
                Some(h) => format!("halted at {rev}: {reason} (canary {h})"),
                None => format!("halted at {rev}: {reason}"),
            },
            "pending" => format!("pending {rev} ({reason})"),
            "waiting" => format!("waiting: {reason}"),
            "canary" => format!("canary for {rev} ({reason})"),
            "promoted" => format!("{rev} promoted"),
            other => format!("{other} {rev}"),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LedgerHealth {
    /// The database is damaged (a page that cannot be read back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// The daemon could not write its last outcomes (a full disk): the
    /// records shown are older than what it knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_failed: Option<String>,
}

impl LedgerHealth {
    pub fn is_sound(&self) -> bool {
        self.damaged.is_none() && self.write_failed.is_none()
    }

    /// One line per problem, for text output.
    pub fn lines(&self) -> Vec<String> {
        let damaged = self.damaged.iter().map(|d| format!("ledger damaged: {d}"));
        let failed = self
            .write_failed
            .iter()
            .map(|f| format!("ledger write failed: {f}"));
        damaged.chain(failed).collect()
    }
}

/// What the daemon knows beyond its ledger, for its status API: applied to
/// the document the ledger gives.
pub type Overlay = std::sync::Arc<dyn Fn(&mut StatusDoc) + Send + Sync>;

impl StatusDoc {
    pub fn all_in_sync(&self) -> bool {
        self.resources.iter().all(|r| r.state == State::InSync)
            && self.source.as_ref().is_none_or(|s| s.drift_since.is_none())
            && self.problems.is_empty()
            && self.ledger.is_sound()
    }
}

/// A state's name as status, metrics and the page write it (its name in
/// the ledger and in JSON alike).
pub fn state_name(s: State) -> String {
    s.as_str().to_string()
}

/// Resources per state from `(state, how many)`, every state named: one
/// with none reads 0.
pub fn counts(per_state: impl IntoIterator<Item = (State, usize)>) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> =
        State::ALL.iter().map(|s| (state_name(*s), 0)).collect();
    for (state, n) in per_state {
        *counts.entry(state_name(state)).or_default() += n;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Status, metrics and the page write a state as JSON names it.
    #[test]
    fn every_state_is_named_as_json_names_it() {
        for s in State::ALL {
            let json = serde_json::to_value(s).unwrap();
            assert_eq!(json, serde_json::Value::String(state_name(s)), "{s:?}");
        }
    }
}

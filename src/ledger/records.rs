//! The records the ledger stores, and the drift rule that decides when a
//! divergence began.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

/// A resource's reconciliation state. Stored and serialized by these names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum State {
    InSync,
    Drifted,
    Progressing,
    /// Transient failure: retried with backoff.
    Failed,
    /// Terminal failure: waits for a new declaration or config.
    Blocked,
    /// Another writer keeps undoing tend's corrections.
    Contested,
    Paused,
    /// Could not be observed.
    Unknown,
}

impl State {
    pub const ALL: [State; 8] = [
        State::InSync,
        State::Drifted,
        State::Progressing,
        State::Failed,
        State::Blocked,
        State::Contested,
        State::Paused,
        State::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::InSync => "InSync",
            State::Drifted => "Drifted",
            State::Progressing => "Progressing",
            State::Failed => "Failed",
            State::Blocked => "Blocked",
            State::Contested => "Contested",
            State::Paused => "Paused",
            State::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown resource state {s:?}"))
    }
}

/// One resource's line in the drift ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRecord {
    pub id: String,
    pub state: State,
    /// When the current divergence was first observed; `None` while InSync.
    pub drift_since: Option<SystemTime>,
    pub attempts: u32,
    pub reason: Option<String>,
    pub next_retry: Option<SystemTime>,
    pub last_applied: Option<SystemTime>,
    /// Times of recent corrections, oldest first, for Contested detection.
    pub corrections: Vec<SystemTime>,
}

impl ResourceRecord {
    pub fn new(id: impl Into<String>, state: State) -> Self {
        ResourceRecord {
            id: id.into(),
            state,
            drift_since: None,
            attempts: 0,
            reason: None,
            next_retry: None,
            last_applied: None,
            corrections: Vec::new(),
        }
    }

    /// The contested rule's input: this resource's drift corrections less
    /// than `window` before `now` (a correction exactly `window` old is
    /// forgotten; one dated after `now`, from a clock that stepped back,
    /// still counts).
    pub fn corrections_within(&self, now: SystemTime, window: Duration) -> Vec<SystemTime> {
        self.corrections
            .iter()
            .copied()
            .filter(|t| now.duration_since(*t).map(|d| d < window).unwrap_or(true))
            .collect()
    }
}

/// The drift rule: the `drift_since` a resource has after being observed in
/// `state` at `now`. A divergence keeps its first-seen time for as long as the
/// resource stays out of sync, whichever non-InSync states it passes through,
/// so its age means "how long live state has been wrong".
pub fn next_drift_since(
    prev: Option<&ResourceRecord>,
    state: State,
    now: SystemTime,
) -> Option<SystemTime> {
    if state == State::InSync {
        return None;
    }
    prev.and_then(|p| p.drift_since).or(Some(now))
}

/// A stop on corrections: one resource, or all (`id: None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseRecord {
    pub id: Option<String>,
    /// `None` lasts until resumed.
    pub until: Option<SystemTime>,
    /// Not a pause: `id` was resumed while the global pause lasts, and is
    /// corrected meanwhile.
    pub excepted: bool,
}

/// The source's fetch and apply state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceRecord {
    pub repo: String,
    pub reference: Option<String>,
    pub fetched_revision: Option<String>,
    pub applied_revision: Option<String>,
    pub last_fetch_at: Option<SystemTime>,
    pub last_fetch_error: Option<String>,
    pub last_success_at: Option<SystemTime>,
    /// When a fetched revision was first seen not yet applied.
    pub drift_since: Option<SystemTime>,
}

/// A fetched revision that was not applied, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusalRecord {
    pub revision: String,
    /// One of the reasons of `tend_source_refused_total`.
    pub reason: String,
    pub detail: String,
    pub at: SystemTime,
}

/// The operator's hold of the source at one revision (`tend pin`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinRecord {
    pub revision: String,
    /// `None` lasts until `tend unpin`.
    pub until: Option<SystemTime>,
    pub pinned_at: SystemTime,
}

/// An identity tend created or adopted; only these are ever pruned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryEntry {
    pub id: String,
    pub target: String,
    pub path: String,
}

/// What an intent promises to finish or undo after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntentKind {
    /// An object about to be created.
    Create,
    /// A hook owed because of a write about to happen.
    Hook,
}

impl IntentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IntentKind::Create => "create",
            IntentKind::Hook => "hook",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "create" => Some(IntentKind::Create),
            "hook" => Some(IntentKind::Hook),
            _ => None,
        }
    }
}

/// A recorded intent, cleared once its effect is complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub seq: i64,
    pub kind: IntentKind,
    pub id: String,
    pub detail: String,
}

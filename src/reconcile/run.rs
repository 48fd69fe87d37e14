//! One pass's working state, shared by its steps (decide, write): what
//! it holds of the ledger, its time, and the outcomes so far.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::outcome::Outcome;
use super::outcomes::Outcomes;
use super::pass::Revision;
use crate::ledger::{ResourceRecord, State};
use crate::model::ResourceId;

/// Why a correction a pass decided on was not made.
pub(super) const STOPPING: &str = "not corrected: tend was stopping";

/// One pass's working state: what it holds and the outcomes so far.
pub(super) struct Run<'a> {
    pub ctx: &'a super::Context,
    /// Failed writes this pass, for the log's limit.
    pub failures: std::cell::Cell<usize>,
    pub rev: &'a Revision,
    /// The records the pass holds (see the pass in `apply.rs`).
    pub previous: BTreeMap<String, ResourceRecord>,
    pub outcomes: Outcomes,
    pub now: SystemTime,
}

impl Run<'_> {
    pub(super) fn set(&mut self, id: &ResourceId, state: State, reason: Option<String>) {
        self.outcomes
            .insert(id.clone(), Outcome::new(state, reason));
    }

    /// Corrections of this resource's drift inside the contested window.
    pub(super) fn recent_corrections(&self, id: &ResourceId) -> Vec<SystemTime> {
        let window = self.ctx.settings.policy.contested_window;
        self.previous
            .get(id.as_str())
            .map(|r| r.corrections_within(self.now, window))
            .unwrap_or_default()
    }
}

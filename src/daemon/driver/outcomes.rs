//! What a pass leaves to do: its outcomes requeued by the error policy, a
//! failed pass tried again with backoff, and outcomes the ledger could not
//! take kept in memory and written once it takes writes again.

use std::collections::HashMap;

use tokio::time::Instant;

use super::Loop;
use crate::daemon::unrecorded;
use crate::ledger::ResourceRecord;
use crate::model::ResourceId;
use crate::reconcile::{self, next_step, Outcome, PassReport};

impl Loop {
    /// A pass failed before it had outcomes: its keys, or the pass over
    /// everything, are tried again with backoff, and the failure is kept
    /// for status (the ledger's records are older than it).
    pub(super) async fn pass_failed(&mut self, keys: &[ResourceId], e: &reconcile::PassError) {
        if let Some(err) = e.ledger() {
            crate::ledger::note_damage(&self.settings.state_dir, err);
        }
        let (why, now) = (e.to_string(), self.clock.now());
        if keys.is_empty() {
            let wait = self
                .shared
                .unrecorded
                .lock()
                .expect("unrecorded outcomes")
                .full_failed(&why, now);
            tracing::warn!(error = %e, retry_in = ?wait, "pass failed; it is run again with backoff");
            self.full_due = Some(Instant::now() + wait);
        } else {
            let records = self
                .shared
                .unrecorded
                .lock()
                .expect("unrecorded outcomes")
                .keys_failed(keys, &why, now);
            tracing::warn!(error = %e, keys = keys.len(), "pass failed; its resources are tried again with backoff");
            self.requeue_records(records);
        }
        self.note_unrecorded();
        self.publish(true).await;
    }

    /// A pass's outcomes could not be recorded: they are kept in memory and
    /// those the error policy retries are requeued from there. A pass over
    /// everything (its revision's records too) is run again with backoff.
    pub(super) async fn unrecorded(
        &mut self,
        report: &PassReport,
        error: &crate::ledger::LedgerError,
        whole: bool,
    ) {
        crate::ledger::note_damage(&self.settings.state_dir, error);
        let ids: Vec<String> = report
            .outcomes
            .iter()
            .filter(|(_, o)| unrecorded::worth_keeping(o))
            .map(|(id, _)| id.to_string())
            .collect();
        // Read where they can be (a full disk still reads): attempts and
        // drift ages go on from the ledger's records.
        let ledger: HashMap<String, ResourceRecord> = self
            .blocking(move |_, rec| rec.ledger.resources_of(ids.iter().map(String::as_str)))
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        let (why, now) = (error.to_string(), self.clock.now());
        let mut kept = self.shared.unrecorded.lock().expect("unrecorded outcomes");
        let records = kept.outcomes(&report.outcomes, &ledger, &why, now);
        let again = whole.then(|| kept.full_failed(&why, now));
        drop(kept);
        tracing::warn!(%error, kept = records.len(), "cannot record the pass's outcomes; they are kept in memory and tried again with backoff");
        if let Some(wait) = again {
            self.full_due = Some(Instant::now() + wait);
        }
        self.requeue_records(records);
        self.note_unrecorded();
    }

    /// A pass recorded its outcomes: what was kept of them is dropped, and
    /// the rest of what the ledger could not take before is written now.
    pub(super) async fn recorded(&mut self, report: &PassReport, full: bool) {
        let left = {
            let mut kept = self.shared.unrecorded.lock().expect("unrecorded outcomes");
            if kept.failure().is_none() && kept.records().next().is_none() {
                return;
            }
            kept.recorded(report.outcomes.keys(), full)
        };
        let written = self
            .blocking(move |_, rec| {
                if left.is_empty() {
                    return Ok(());
                }
                rec.ledger
                    .transaction(|tx| left.iter().try_for_each(|r| tx.put_resource(r)))
            })
            .await;
        match written {
            Ok(()) => {
                self.shared
                    .unrecorded
                    .lock()
                    .expect("unrecorded outcomes")
                    .written();
                crate::ledger::clear_write_failure(&self.settings.state_dir);
                tracing::info!(
                    "the ledger takes writes again: every outcome kept in memory is recorded"
                );
            }
            Err(e) => tracing::warn!(error = %e, "cannot record the outcomes kept in memory yet"),
        }
    }

    /// Schedules what the error policy calls for after a pass: each
    /// outcome carries the retry time its record was given.
    pub(super) fn requeue(&mut self, report: &PassReport) {
        let now = self.clock.now();
        for (id, o) in &report.outcomes {
            let step = next_step(o, &self.settings.policy, now);
            self.queue.after(id.clone(), step);
        }
    }

    /// Schedules the retries of records kept in memory, by the same rule.
    fn requeue_records(&mut self, records: Vec<ResourceRecord>) {
        let now = self.clock.now();
        for r in records {
            let step = next_step(&Outcome::of_record(&r), &self.settings.policy, now);
            self.queue.after(ResourceId::from_string(r.id), step);
        }
    }

    /// Leaves a note beside the ledger for `tend status`, when the state
    /// dir can take one: the ledger's own records are older than what the
    /// daemon knows.
    fn note_unrecorded(&self) {
        let failure = self
            .shared
            .unrecorded
            .lock()
            .expect("unrecorded outcomes")
            .failure()
            .map(String::from);
        if let Some(why) = failure {
            let _ = crate::ledger::note_write_failure(&self.settings.state_dir, &why);
        }
    }
}

//! The status document built from the ledger at a given time, and the
//! daemon's records laid over it while the ledger cannot take them.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::{
    counts, HaStatus, LedgerHealth, PinnedStatus, RefusedStatus, ResourceStatus, SourceStatus,
    StatusDoc,
};
use crate::duration::rfc3339;
use crate::ledger::{Ledger, LedgerError, ResourceRecord, SourceRecord};

fn age(now: SystemTime, t: SystemTime) -> u64 {
    now.duration_since(t).unwrap_or(Duration::ZERO).as_secs()
}

impl StatusDoc {
    /// Puts records the ledger does not hold yet (the daemon's, kept in
    /// memory while the ledger cannot take them) in place of its older
    /// ones, and says why they are not recorded.
    pub fn overlay<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a ResourceRecord>,
        write_failed: Option<&str>,
        now: SystemTime,
    ) {
        let mut newer: BTreeMap<&str, &ResourceRecord> =
            records.into_iter().map(|r| (r.id.as_str(), r)).collect();
        if newer.is_empty() && write_failed.is_none() {
            return;
        }
        for r in &mut self.resources {
            if let Some(n) = newer.remove(r.id.as_str()) {
                *r = resource_status(n.clone(), now);
            }
        }
        self.resources
            .extend(newer.into_values().map(|r| resource_status(r.clone(), now)));
        // Oldest drift first, as built; RFC 3339 times of one form sort
        // as text.
        self.resources
            .sort_by(|a, b| match (&a.drift_since, &b.drift_since) {
                (Some(x), Some(y)) => x.cmp(y).then_with(|| a.id.cmp(&b.id)),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.id.cmp(&b.id),
            });
        self.counts = counts(self.resources.iter().map(|r| (r.state, 1)));
        if let Some(why) = write_failed {
            self.ledger.write_failed = Some(why.to_string());
        }
    }
}

fn source_status(
    ledger: &Ledger,
    s: SourceRecord,
    now: SystemTime,
) -> Result<SourceStatus, LedgerError> {
    let applied_signer = match &s.applied_revision {
        Some(r) => ledger.signer_of(r)?,
        None => None,
    };
    let refused = ledger.refusal()?.map(|r| RefusedStatus {
        revision: r.revision,
        reason: r.reason,
        detail: r.detail,
        since: rfc3339(r.at),
    });
    let pinned = ledger.pin()?.map(|p| PinnedStatus {
        revision: p.revision,
        until: p.until.map(rfc3339),
        since: rfc3339(p.pinned_at),
    });
    Ok(SourceStatus {
        repo: crate::source::redact_url(&s.repo),
        reference: s.reference,
        fetched_revision: s.fetched_revision,
        applied_revision: s.applied_revision,
        last_fetch: s.last_fetch_at.map(rfc3339),
        last_fetch_error: s.last_fetch_error,
        last_successful_fetch: s.last_success_at.map(rfc3339),
        seconds_since_last_successful_fetch: s.last_success_at.map(|t| age(now, t)),
        drift_since: s.drift_since.map(rfc3339),
        drift_age_seconds: s.drift_since.map(|t| age(now, t)),
        applied_signer,
        refused,
        pinned,
        warnings: ledger.source_warnings()?,
        repaired: ledger.mirror_repaired()?.filter(|r| !r.is_empty()),
        mirror_bytes: crate::source::mirrors_bytes(ledger.state_dir()),
    })
}

fn resource_status(r: ResourceRecord, now: SystemTime) -> ResourceStatus {
    ResourceStatus {
        id: r.id,
        state: r.state,
        drift_since: r.drift_since.map(rfc3339),
        drift_age_seconds: r.drift_since.map(|t| age(now, t)),
        attempts: r.attempts,
        reason: r.reason,
        next_retry: r.next_retry.map(rfc3339),
        last_applied: r.last_applied.map(rfc3339),
    }
}

/// Builds the document at `now`; resources sorted oldest drift first.
pub fn build(ledger: &Ledger, now: SystemTime) -> Result<StatusDoc, LedgerError> {
    let mut records = ledger.resources()?;
    records.sort_by(|a, b| match (a.drift_since, b.drift_since) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.id.cmp(&b.id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.id.cmp(&b.id),
    });
    let counts = counts(records.iter().map(|r| (r.state, 1)));
    document(ledger, now, counts, records)
}

/// The document with every count but at most `rows` resources: those not
/// in sync, the longest drifting first. What the status page shows, read
/// without loading every record.
pub fn summary(ledger: &Ledger, now: SystemTime, rows: usize) -> Result<StatusDoc, LedgerError> {
    let counts = counts(ledger.state_counts()?);
    let records = ledger.resources_not_in_sync_oldest(rows)?;
    document(ledger, now, counts, records)
}

fn document(
    ledger: &Ledger,
    now: SystemTime,
    counts: BTreeMap<String, usize>,
    records: Vec<ResourceRecord>,
) -> Result<StatusDoc, LedgerError> {
    Ok(StatusDoc {
        generated_at: rfc3339(now),
        source: ledger
            .source()?
            .map(|s| source_status(ledger, s, now))
            .transpose()?,
        watcher: ledger.watcher()?.filter(|w| !w.is_empty()),
        ha: ledger
            .ha_role()?
            .map(|(role, leader)| HaStatus { role, leader }),
        rollout: ledger
            .rollout()?
            .and_then(|text| serde_json::from_str(&text).ok()),
        counts,
        problems: ledger.declaration_problems()?,
        ledger: LedgerHealth {
            damaged: crate::ledger::noted_damage(ledger.state_dir()),
            write_failed: crate::ledger::noted_write_failure(ledger.state_dir()),
        },
        resources: records
            .into_iter()
            .map(|r| resource_status(r, now))
            .collect(),
    })
}

/// The status entry of one resource, looked up alone.
pub fn resource(
    ledger: &Ledger,
    id: &str,
    now: SystemTime,
) -> Result<Option<ResourceStatus>, LedgerError> {
    Ok(ledger.resource(id)?.map(|r| resource_status(r, now)))
}

//! The status document (SPEC §6): one model printed by `tend status` and
//! served by the HTTP API, built only from the ledger.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::duration::short;
use crate::ledger::{Ledger, LedgerError, ResourceRecord, SourceRecord, State};

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A size as `df -h` would show it, in binary units.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

fn age(now: SystemTime, t: SystemTime) -> u64 {
    now.duration_since(t).unwrap_or(Duration::ZERO).as_secs()
}

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
        self.counts = count(self.resources.iter().map(|r| r.state));
        if let Some(why) = write_failed {
            self.ledger.write_failed = Some(why.to_string());
        }
    }

    pub fn all_in_sync(&self) -> bool {
        self.resources.iter().all(|r| r.state == State::InSync)
            && self.source.as_ref().is_none_or(|s| s.drift_since.is_none())
            && self.problems.is_empty()
            && self.ledger.is_sound()
    }
}

const STATES: [State; 8] = [
    State::InSync,
    State::Drifted,
    State::Progressing,
    State::Failed,
    State::Blocked,
    State::Contested,
    State::Paused,
    State::Unknown,
];

pub fn state_name(s: State) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
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

/// Resources per state, every state named.
fn count(states: impl Iterator<Item = State>) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = STATES.iter().map(|s| (state_name(*s), 0)).collect();
    for state in states {
        *counts.entry(state_name(state)).or_default() += 1;
    }
    counts
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
    let counts = count(records.iter().map(|r| r.state));
    document(ledger, now, counts, records)
}

/// The document with every count but at most `rows` resources: those not
/// in sync, the longest drifting first. What the status page shows, read
/// without loading every record.
pub fn summary(ledger: &Ledger, now: SystemTime, rows: usize) -> Result<StatusDoc, LedgerError> {
    let mut counts: BTreeMap<String, usize> = STATES.iter().map(|s| (state_name(*s), 0)).collect();
    for (state, n) in ledger.state_counts()? {
        *counts.entry(state_name(state)).or_default() += n;
    }
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

/// The text table of `tend status`. Identities are quoted as names are, and
/// what messages hold (a path in a reason) has its control bytes escaped.
pub fn text(doc: &StatusDoc, all: bool) -> String {
    use crate::render::quote::{escape_controls as said, name};
    let mut out = String::new();
    if let Some(s) = &doc.source {
        let rev = |r: &Option<String>| {
            r.as_deref()
                .map(|r| r[..r.len().min(12)].to_string())
                .unwrap_or("-".into())
        };
        out.push_str(&format!(
            "source   {} {}\nfetched  {}   applied {}\n",
            s.repo,
            s.reference.as_deref().unwrap_or("HEAD"),
            rev(&s.fetched_revision),
            rev(&s.applied_revision)
        ));
        if let Some(secs) = s.seconds_since_last_successful_fetch {
            out.push_str(&format!(
                "last successful fetch {} ago\n",
                short(Duration::from_secs(secs))
            ));
        }
        if let Some(e) = &s.last_fetch_error {
            out.push_str(&format!("last fetch error: {}\n", said(e)));
        }
        if let Some(r) = &s.repaired {
            out.push_str(&format!("mirror repaired: {}\n", said(r)));
        }
        if let Some(bytes) = s.mirror_bytes {
            out.push_str(&format!("mirror   {}\n", size(bytes)));
        }
        for w in &s.warnings {
            out.push_str(&format!("warning  {}\n", said(w)));
        }
        if let Some(signer) = &s.applied_signer {
            out.push_str(&format!("signed by {signer}\n"));
        }
        if let Some(p) = &s.pinned {
            out.push_str(&format!(
                "pinned   {} {}; new commits are fetched, not applied (`tend unpin`)\n",
                rev(&Some(p.revision.clone())),
                match &p.until {
                    Some(u) => format!("until {u}"),
                    None => "until `tend unpin`".to_string(),
                }
            ));
        }
        if let Some(r) = &s.refused {
            out.push_str(&format!(
                "refused  {} ({}): {}\n",
                rev(&Some(r.revision.clone())),
                r.reason,
                said(&r.detail)
            ));
        }
    }
    for line in doc.ledger.lines() {
        out.push_str(&format!("{line}\n"));
    }
    if let Some(w) = &doc.watcher {
        out.push_str(&format!("watcher  {w}\n"));
    }
    if let Some(ha) = &doc.ha {
        let leader = ha.leader.as_deref().unwrap_or("unknown");
        out.push_str(&format!(
            "role     {} (leader: {})\n",
            ha.role,
            said(leader)
        ));
    }
    if let Some(r) = &doc.rollout {
        out.push_str(&format!("rollout: {}\n", said(&r.line())));
    }
    let counts: Vec<String> = doc
        .counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    out.push_str(&format!(
        "resources: {}\n",
        if counts.is_empty() {
            "none".into()
        } else {
            counts.join(", ")
        }
    ));
    if !doc.problems.is_empty() {
        out.push_str(&format!(
            "declaration problems: {} (nothing is pruned until they are fixed)\n",
            doc.problems.len()
        ));
        for p in &doc.problems {
            out.push_str(&format!("  {}\n", said(p)));
        }
    }
    let rows: Vec<&ResourceStatus> = doc
        .resources
        .iter()
        .filter(|r| all || r.state != State::InSync)
        .collect();
    if rows.is_empty() {
        return out;
    }
    out.push('\n');
    let head = ["ID", "STATE", "AGE", "ATTEMPTS", "REASON", "NEXT RETRY"];
    let table: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                name(&r.id).into_owned(),
                state_name(r.state),
                r.drift_age_seconds
                    .map(|s| short(Duration::from_secs(s)))
                    .unwrap_or("-".into()),
                r.attempts.to_string(),
                r.reason
                    .as_deref()
                    .map_or("-".into(), |r| said(r).into_owned()),
                r.next_retry.clone().unwrap_or("-".into()),
            ]
        })
        .collect();
    let mut widths = head.map(|h| h.len());
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count()).min(60);
        }
    }
    let line = |cells: [&str; 6]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 5 {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(head));
    for row in &table {
        out.push_str(&line([
            &row[0], &row[1], &row[2], &row[3], &row[4], &row[5],
        ]));
    }
    out
}

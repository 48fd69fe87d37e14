//! Where a resource comes from and what happened to it since (SPEC §9,
//! `tend explain`): one model, built from the declaration at the applied
//! revision, its commit and signer, the ledger and the end of the audit
//! log; printed by `tend explain` and shown on the resource's page. It
//! never holds content: for a sensitive resource not even its hashes.

use serde::Serialize;

use crate::duration::rfc3339;
use crate::ledger::{audit_tail, Ledger, LedgerError, State};
use crate::model::Desired;
use crate::source::CommitInfo;

/// Audit entries of one resource kept in an explanation, newest first.
pub const EVENTS_KEPT: usize = 50;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CommitView {
    pub id: String,
    pub author: String,
    pub committer: String,
    pub committed_at: String,
    pub summary: String,
}

/// One applied change of the resource, from the audit log.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Event {
    pub time: String,
    /// create, update or delete.
    pub action: String,
    /// The fields that differed.
    pub why: Vec<String>,
    pub revision: String,
    /// The backup of the content the change replaced.
    pub backup: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Explanation {
    pub id: String,
    /// The path under its target's root.
    pub path: Option<String>,
    /// `file:line` of its declaration at the applied revision; `None` when
    /// that revision does not declare it.
    pub declared_at: Option<String>,
    pub revision: Option<String>,
    pub commit: Option<CommitView>,
    /// Who signed the revision (kind and key fingerprint), when checked.
    pub signer: Option<String>,
    /// The revision is held by `tend pin`.
    pub pinned: bool,
    pub sensitive: bool,
    pub state: Option<State>,
    pub drift_since: Option<String>,
    pub reason: Option<String>,
    pub last_applied: Option<String>,
    /// Corrections within the contested window, oldest first.
    pub recent_corrections: Vec<String>,
    /// Applied changes, newest first (at most [`EVENTS_KEPT`]).
    pub events: Vec<Event>,
    /// The read of the audit log stopped before its start: older events
    /// may exist.
    pub events_cut: bool,
    /// Backups of content the changes replaced, newest first.
    pub backups: Vec<String>,
}

/// What the revision says of the resource.
pub struct Origin<'a> {
    pub revision: git2::Oid,
    pub desired: Option<&'a Desired>,
    pub commit: Option<CommitInfo>,
    pub pinned: bool,
}

/// Builds the explanation of `id` from `origin` (the applied revision),
/// the ledger and the end of the audit log.
pub fn build(
    ledger: &Ledger,
    id: &str,
    origin: Option<Origin<'_>>,
) -> Result<Explanation, LedgerError> {
    let record = ledger.resource(id)?;
    let (events, cut) = audit_tail(ledger.state_dir(), EVENTS_KEPT, |v| v["id"] == id)?;
    let sensitive = origin
        .as_ref()
        .and_then(|o| o.desired)
        .is_some_and(|d| d.sensitive)
        || events.iter().any(|e| e["sensitive"] == true);
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    let events: Vec<Event> = events
        .iter()
        .map(|e| Event {
            time: text(e, "time"),
            action: text(e, "action"),
            why: e["why"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|w| w.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            revision: text(e, "revision"),
            backup: e["backup"].as_str().map(String::from),
        })
        .collect();
    let mut backups: Vec<String> = Vec::new();
    for b in events.iter().filter_map(|e| e.backup.clone()) {
        if !backups.contains(&b) {
            backups.push(b);
        }
    }
    let revision = origin.as_ref().map(|o| o.revision.to_string());
    let signer = match &revision {
        Some(r) => ledger.signer_of(r)?,
        None => None,
    };
    Ok(Explanation {
        id: id.to_string(),
        path: origin
            .as_ref()
            .and_then(|o| o.desired)
            .map(|d| d.path_str().to_string()),
        declared_at: origin
            .as_ref()
            .and_then(|o| o.desired)
            .map(|d| d.origin().to_string()),
        commit: origin.as_ref().and_then(|o| {
            o.commit.as_ref().map(|c| CommitView {
                id: o.revision.to_string(),
                author: c.author.clone(),
                committer: c.committer.clone(),
                committed_at: rfc3339(c.committed_at),
                summary: c.summary.clone(),
            })
        }),
        pinned: origin.as_ref().is_some_and(|o| o.pinned),
        revision,
        signer,
        sensitive,
        state: record.as_ref().map(|r| r.state),
        drift_since: record.as_ref().and_then(|r| r.drift_since).map(rfc3339),
        reason: record.as_ref().and_then(|r| r.reason.clone()),
        last_applied: record.as_ref().and_then(|r| r.last_applied).map(rfc3339),
        recent_corrections: record
            .as_ref()
            .map(|r| r.corrections.iter().map(|t| rfc3339(*t)).collect())
            .unwrap_or_default(),
        events,
        events_cut: cut,
        backups,
    })
}

/// The text `tend explain` prints.
pub fn text(x: &Explanation) -> String {
    use crate::render::quote;
    let mut out = format!("{}\n", quote::name(&x.id));
    // Values come from the repository and the ledger (a committer's name,
    // a reason naming a path): their control bytes are escaped.
    let mut line = |label: &str, value: &str| {
        out.push_str(&format!(
            "  {label:<10} {}\n",
            quote::escape_controls(value)
        ))
    };
    if let Some(p) = &x.path {
        line("path", &quote::name(p));
    }
    match (&x.declared_at, &x.revision) {
        (Some(at), Some(rev)) => line("declared", &format!("{at} at revision {}", &rev[..12])),
        (None, Some(rev)) => line(
            "declared",
            &format!("not by the applied revision {}", &rev[..12]),
        ),
        _ => line("declared", "no revision applied yet"),
    }
    if let Some(c) = &x.commit {
        line("commit", &format!("{} {:?}", &c.id[..12], c.summary));
        line("author", &c.author);
        if c.committer != c.author {
            line("committer", &c.committer);
        }
        line("committed", &c.committed_at);
    }
    line(
        "signer",
        x.signer
            .as_deref()
            .unwrap_or("not checked (no source.verify configured)"),
    );
    if x.pinned {
        line(
            "pinned",
            "yes: `tend unpin` returns to the ref's newest revision",
        );
    }
    if x.sensitive {
        line("sensitive", "yes: its content is never shown");
    }
    if let Some(s) = x.state {
        let since = x
            .drift_since
            .as_deref()
            .map(|d| format!(" since {d}"))
            .unwrap_or_default();
        line("state", &format!("{s}{since}"));
    }
    if let Some(r) = &x.reason {
        line("reason", r);
    }
    line(
        "applied",
        x.last_applied.as_deref().unwrap_or("never written by tend"),
    );
    if !x.recent_corrections.is_empty() {
        line(
            "corrected",
            &format!(
                "{} time(s) within the contested window: {}",
                x.recent_corrections.len(),
                x.recent_corrections.join(", ")
            ),
        );
    }
    if x.events.is_empty() {
        out.push_str("history: no change applied by tend in the audit log\n");
    } else {
        out.push_str("history (newest first):\n");
        for e in &x.events {
            let backup = e
                .backup
                .as_deref()
                .map(|b| format!(" backup {b}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {}  {:<6} {} at {}{backup}\n",
                e.time,
                e.action,
                e.why.join(","),
                &e.revision[..e.revision.len().min(12)]
            ));
        }
        if x.events_cut {
            out.push_str("  (older entries were not read: the audit log is long)\n");
        }
    }
    if !x.backups.is_empty() {
        out.push_str("backups of replaced content (`tend backup cat REF`");
        out.push_str(if x.sensitive { " --sensitive" } else { "" });
        out.push_str("):\n");
        for b in &x.backups {
            out.push_str(&format!("  {b}\n"));
        }
    }
    out
}

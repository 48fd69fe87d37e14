//! The front page (`GET /`): the status document as HTML, with the day's
//! overview, the fleet's table and the recent changes. Every text that
//! reaches the page is escaped.

use std::fmt::Write;
use std::time::SystemTime;

use serde_json::Value;

use super::html::{
    abbreviated, age, audit_time, document, escape, parse_time, resource_link, revision,
    state_badge, time_ago, Table,
};
use super::ReadError;
use crate::ledger::{AuditTail as Tail, State as ResourceState};
use crate::status::{state_name, ResourceStatus, SourceStatus, StatusDoc};

/// How many audit entries the page shows.
pub const RECENT_AUDIT: usize = 20;
/// Rows of the not-in-sync table; the API has the rest.
pub const MAX_ROWS: usize = 500;
/// How often a page reloads itself.
pub const REFRESH_SECS: u32 = 10;

fn source_section(out: &mut String, s: &SourceStatus, now: SystemTime) {
    out.push_str("<h2>Source</h2><dl>");
    let _ = write!(
        out,
        "<dt>Repository</dt><dd><code>{}</code></dd>",
        escape(&s.repo)
    );
    let reference = s.reference.as_deref().unwrap_or("HEAD");
    let _ = write!(
        out,
        "<dt>Ref</dt><dd><code>{}</code></dd>",
        escape(reference)
    );
    let _ = write!(
        out,
        "<dt>Applied</dt><dd>{}</dd>",
        revision(s.applied_revision.as_deref())
    );
    let pending = s.fetched_revision.is_some() && s.fetched_revision != s.applied_revision;
    let note = match (pending, s.drift_age_seconds) {
        (true, Some(a)) => format!(
            " <span class=\"s-Drifted\">not applied yet, for {}</span>",
            age(a)
        ),
        (true, None) => " <span class=\"s-Drifted\">not applied yet</span>".into(),
        _ => String::new(),
    };
    let _ = write!(
        out,
        "<dt>Fetched</dt><dd>{}{note}</dd>",
        revision(s.fetched_revision.as_deref())
    );
    let last = s
        .last_fetch
        .as_deref()
        .and_then(parse_time)
        .map(|t| time_ago(t, now));
    let _ = write!(
        out,
        "<dt>Last fetch</dt><dd>{}</dd>",
        last.unwrap_or_else(|| "never".into())
    );
    let ok = s
        .seconds_since_last_successful_fetch
        .map(|a| format!("{} ago", age(a)));
    let _ = write!(
        out,
        "<dt>Last success</dt><dd>{}</dd>",
        ok.unwrap_or_else(|| "never".into())
    );
    if let Some(e) = &s.last_fetch_error {
        let _ = write!(
            out,
            "<dt>Fetch error</dt><dd class=\"s-Failed\">{}</dd>",
            escape(e)
        );
    }
    if let Some(signer) = &s.applied_signer {
        let _ = write!(
            out,
            "<dt>Signed by</dt><dd><code>{}</code></dd>",
            escape(signer)
        );
    }
    if let Some(p) = &s.pinned {
        let until = p
            .until
            .as_deref()
            .map(|u| format!("until {}", escape(u)))
            .unwrap_or_else(|| "until <code>tend unpin</code>".into());
        let _ = write!(
            out,
            "<dt>Pinned</dt><dd class=\"s-Paused\">{} {until}; new commits are fetched, not applied</dd>",
            revision(Some(&p.revision))
        );
    }
    if let Some(r) = &s.refused {
        let _ = write!(
            out,
            "<dt>Refused</dt><dd class=\"s-Failed\">{} <strong>{}</strong>: {}</dd>",
            revision(Some(&r.revision)),
            escape(&r.reason),
            escape(&r.detail)
        );
    }
    if let Some(r) = &s.repaired {
        let _ = write!(out, "<dt>Mirror repaired</dt><dd>{}</dd>", escape(r));
    }
    for w in &s.warnings {
        let _ = write!(
            out,
            "<dt>Left out</dt><dd class=\"s-Drifted\">{}</dd>",
            escape(w)
        );
    }
    out.push_str("</dl>");
}

fn counts_section(out: &mut String, doc: &StatusDoc) {
    let total: usize = doc.counts.values().sum();
    let _ = write!(
        out,
        "<h2>Resources</h2><ul class=\"counts\"><li>total <b>{total}</b></li>"
    );
    for (state, n) in doc.counts.iter().filter(|(_, n)| **n > 0) {
        let s = escape(state);
        let _ = write!(
            out,
            "<li><span class=\"state s-{s}\">{s}</span> <b>{n}</b></li>"
        );
    }
    out.push_str("</ul>");
}

/// The ledger itself damaged or refusing writes: the records below may
/// be older than what is true, which the reader must know first.
fn ledger_section(out: &mut String, doc: &StatusDoc) {
    if doc.ledger.is_sound() {
        return;
    }
    out.push_str("<h2>Ledger</h2><p class=\"muted\">While this lasts, the records below may be older than what is true.</p><ul class=\"problems\">");
    for line in doc.ledger.lines() {
        let _ = write!(out, "<li class=\"bad\">{}</li>", escape(&line));
    }
    out.push_str("</ul>");
}

/// With `ha`: whether this replica writes, and who does.
fn role_section(out: &mut String, doc: &StatusDoc) {
    let Some(ha) = &doc.ha else {
        return;
    };
    let (class, says) = match ha.role.as_str() {
        "leader" => ("ok", "writes"),
        _ => ("muted", "observes and records drift, writes nothing"),
    };
    let _ = write!(
        out,
        "<h2>Role</h2><p class=\"{class}\"><b>{}</b>: {says} (leader: {})</p>",
        escape(&ha.role),
        escape(ha.leader.as_deref().unwrap_or("unknown"))
    );
}

/// With `fleet.rollout`: where the staged rollout stands for this host.
fn rollout_section(out: &mut String, doc: &StatusDoc) {
    let Some(r) = &doc.rollout else {
        return;
    };
    let class = match r.state.as_str() {
        "halted" => "bad",
        "waiting" | "pending" => "warn",
        _ => "ok",
    };
    let _ = write!(
        out,
        "<h2>Rollout</h2><p class=\"banner {class}\">{}</p>",
        escape(&r.line())
    );
}

/// What is wrong with the declarations, when anything is.
fn problems_section(out: &mut String, doc: &StatusDoc) {
    if doc.problems.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h2>Declaration problems ({})</h2><p class=\"muted\">Nothing is pruned until they are fixed.</p><ul class=\"problems\">",
        doc.problems.len()
    );
    for p in &doc.problems {
        let _ = write!(out, "<li><code>{}</code></li>", escape(p));
    }
    out.push_str("</ul>");
}

/// How many resources are not in sync, from the counts: the document may
/// carry only the first [`MAX_ROWS`] of them.
fn not_in_sync(doc: &StatusDoc) -> usize {
    let in_sync = state_name(ResourceState::InSync);
    doc.counts
        .iter()
        .filter(|(state, _)| **state != in_sync)
        .map(|(_, n)| n)
        .sum()
}

/// Resources not in sync, the longest drifting first.
fn drift_table(out: &mut String, doc: &StatusDoc) {
    let mut rows: Vec<&ResourceStatus> = doc
        .resources
        .iter()
        .filter(|r| r.state != ResourceState::InSync)
        .collect();
    rows.sort_by(|a, b| {
        b.drift_age_seconds
            .cmp(&a.drift_age_seconds)
            .then_with(|| a.id.cmp(&b.id))
    });
    let total = not_in_sync(doc).max(rows.len());
    let _ = write!(out, "<h2>Not in sync ({total})</h2>");
    if rows.is_empty() {
        out.push_str("<p class=\"muted\">Every resource matches its declaration.</p>");
        return;
    }
    let mut table = Table::new(&[
        "Resource",
        "State",
        "For",
        "Attempts",
        "Reason",
        "Next retry",
    ]);
    for r in rows.iter().take(MAX_ROWS) {
        table.row([
            resource_link(&r.id),
            state_badge(r.state),
            r.drift_age_seconds.map(age).unwrap_or_else(|| "-".into()),
            r.attempts.to_string(),
            escape(r.reason.as_deref().unwrap_or("-")),
            escape(r.next_retry.as_deref().unwrap_or("-")),
        ]);
    }
    out.push_str(&table.finish());
    let shown = rows.len().min(MAX_ROWS);
    if total > shown {
        let _ = write!(
            out,
            "<p class=\"muted\">{} more in <a href=\"/api/v1/status\">/api/v1/status</a>.</p>",
            total - shown
        );
    }
}

fn text_of(entry: &Value, key: &str) -> String {
    match entry.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| i.to_string())
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn audit_section(out: &mut String, audit: Result<&Tail, &ReadError>, now: SystemTime) {
    out.push_str("<h2>Recent changes</h2>");
    let tail = match audit {
        Ok(t) => t,
        Err(e) => {
            let _ = write!(
                out,
                "<p class=\"banner warn\">The audit log cannot be read: {}</p>",
                escape(&e.reason())
            );
            return;
        }
    };
    if tail.skipped > 0 {
        let _ = write!(
            out,
            "<p class=\"banner warn\">{} damaged line(s) of the audit log are not shown.</p>",
            tail.skipped
        );
    }
    let entries = &tail.entries[..tail.entries.len().min(RECENT_AUDIT)];
    if entries.is_empty() {
        if tail.capped {
            out.push_str("<p class=\"muted\">No readable entry near the end of the audit log.</p>");
        } else {
            out.push_str("<p class=\"muted\">tend has changed nothing yet.</p>");
        }
        return;
    }
    let mut table = Table::new(&["When", "Action", "Resource", "Why", "Revision", "Backup"]);
    for e in entries {
        let when = e
            .get("time")
            .and_then(audit_time)
            .map(|t| time_ago(t, now))
            .unwrap_or_else(|| "-".into());
        let rev = text_of(e, "revision");
        let backup = text_of(e, "backup");
        table.row([
            when,
            escape(&text_of(e, "action")),
            resource_link(&text_of(e, "id")),
            escape(&text_of(e, "why")),
            revision(Some(rev.as_str()).filter(|r| !r.is_empty())),
            match backup.as_str() {
                "" => "-".into(),
                b => abbreviated(b, 19),
            },
        ]);
    }
    out.push_str(&table.finish());
}

/// The whole status page from what could be loaded.
/// With `fleet:`, the fleet's table too.
pub fn render_index(
    doc: Result<&StatusDoc, &ReadError>,
    audit: Result<&Tail, &ReadError>,
    fleet: Option<Result<&crate::fleet::status::Fleet, &ReadError>>,
) -> String {
    let doc = match doc {
        Ok(d) => d,
        Err(e) => {
            let body = format!(
                "<header><h1>tend</h1></header><p class=\"banner warn\">No status yet: {}</p>\
                 <p class=\"muted\">This page reloads itself.</p>",
                escape(&e.reason())
            );
            return document("tend: no status yet", Some(REFRESH_SECS), &body);
        }
    };
    let now = parse_time(&doc.generated_at).unwrap_or_else(SystemTime::now);
    let behind = not_in_sync(doc);
    let (class, summary) = match (behind, doc.problems.len(), doc.all_in_sync()) {
        _ if !doc.ledger.is_sound() => ("bad", "The ledger is not sound".to_string()),
        (0, 0, true) => ("ok", "All in sync".to_string()),
        (0, 0, false) => ("warn", "A fetched revision is not applied yet".to_string()),
        (0, n, _) => ("bad", format!("{n} declaration problems")),
        (n, _, _) => ("bad", format!("{n} not in sync")),
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "<header><h1>tend</h1><p class=\"banner {class}\"><b>{}</b></p>\
         <p class=\"muted\">Generated {} · reloads every {REFRESH_SECS}s · \
         <a href=\"/api/v1/status\">JSON</a> · <a href=\"/metrics\">metrics</a></p></header>",
        escape(&summary),
        escape(&doc.generated_at)
    );
    match &doc.source {
        Some(s) => source_section(&mut out, s, now),
        None => out.push_str("<h2>Source</h2><p class=\"muted\">Never fetched.</p>"),
    }
    ledger_section(&mut out, doc);
    role_section(&mut out, doc);
    rollout_section(&mut out, doc);
    counts_section(&mut out, doc);
    problems_section(&mut out, doc);
    if let Ok(tail) = audit {
        super::overview::section(&mut out, doc, &tail.entries, tail.capped);
    }
    drift_table(&mut out, doc);
    super::fleet::section(&mut out, fleet, now);
    audit_section(&mut out, audit, now);
    document(&format!("tend: {summary}"), Some(REFRESH_SECS), &out)
}

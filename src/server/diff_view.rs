//! The diff view of one resource (`GET /resources/{id}`): its state, the
//! difference between its declaration and its live state, and its history.
//! Every text that reaches the page is escaped.

use std::fmt::Write;
use std::time::SystemTime;

use super::front::REFRESH_SECS;
use super::html::{age, document, escape, state_badge};
use super::ReadError;
use crate::status::ResourceStatus;

fn diff_lines(diff: &str) -> String {
    let mut out = String::new();
    for line in diff.lines() {
        let class = match line {
            l if l.starts_with("+++") || l.starts_with("---") => "hdr",
            l if l.starts_with('+') => "add",
            l if l.starts_with('-') => "del",
            l if l.starts_with("@@") => "hunk",
            _ => "",
        };
        let _ = writeln!(out, "<span class=\"{class}\">{}</span>", escape(line));
    }
    out
}

/// The diff view of one resource.
pub fn render_resource(
    id: &str,
    entry: Option<&ResourceStatus>,
    diff: Option<&str>,
    history: Option<&crate::explain::Explanation>,
) -> String {
    let mut out = format!(
        "<p><a href=\"/\">&larr; status</a></p><h1>{}</h1>",
        escape(id)
    );
    match entry {
        Some(r) => {
            let _ = write!(out, "<dl><dt>State</dt><dd>{}</dd>", state_badge(r.state));
            if let (Some(since), Some(a)) = (&r.drift_since, r.drift_age_seconds) {
                let _ = write!(
                    out,
                    "<dt>Drifting</dt><dd>for {} (since {})</dd>",
                    age(a),
                    escape(since)
                );
            }
            for (label, value) in [
                ("Reason", &r.reason),
                ("Next retry", &r.next_retry),
                ("Last applied", &r.last_applied),
            ] {
                if let Some(v) = value {
                    let _ = write!(out, "<dt>{label}</dt><dd>{}</dd>", escape(v));
                }
            }
            if r.attempts > 0 {
                let _ = write!(out, "<dt>Attempts</dt><dd>{}</dd>", r.attempts);
            }
            out.push_str("</dl>");
        }
        None => out.push_str("<p class=\"muted\">Not in the drift ledger.</p>"),
    }
    out.push_str("<h2>Diff</h2>");
    match diff.filter(|d| !d.trim().is_empty()) {
        Some(d) => {
            let _ = write!(out, "<pre class=\"diff\">{}</pre>", diff_lines(d));
        }
        None => out.push_str(
            "<p class=\"muted\">No difference between the declaration and the live state.</p>",
        ),
    }
    if let Some(x) = history {
        super::history::section(&mut out, x, SystemTime::now());
    }
    document(&format!("tend: {id}"), None, &out)
}

/// The page of a resource whose status could not be read: it reloads
/// itself while the daemon has recorded nothing yet.
pub fn render_unread(id: &str, e: &ReadError) -> String {
    let body = format!(
        "<header><h1>tend</h1></header><p class=\"banner warn\">{}</p>",
        escape(&e.to_string())
    );
    let refresh = e.not_yet().then_some(REFRESH_SECS);
    document(&format!("tend: {id}"), refresh, &body)
}

//! The resource page's history section: where the resource comes from
//! (declaration, commit, signer) and what happened to it, with a drift
//! timeline of the last 24 hours drawn as inline SVG (no script). Built
//! from the same [`Explanation`] `tend explain` prints.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::html::{escape, parse_time, revision};
use crate::explain::Explanation;

const WINDOW: Duration = Duration::from_secs(24 * 3600);
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 34.0;
const BAR_Y: f64 = 8.0;
const BAR_H: f64 = 14.0;

/// Where `t` falls on the timeline ending at `now`, clamped to it.
fn x_of(t: SystemTime, now: SystemTime) -> f64 {
    let start = now.checked_sub(WINDOW).unwrap_or(now);
    let since = t.duration_since(start).unwrap_or(Duration::ZERO);
    (since.as_secs_f64() / WINDOW.as_secs_f64()).min(1.0) * WIDTH
}

/// The last 24 hours: the span the resource has been drifting (red), and a
/// tick at each change tend applied (its corrections).
pub fn timeline_svg(x: &Explanation, now: SystemTime) -> String {
    let start = now.checked_sub(WINDOW).unwrap_or(now);
    let mut svg = format!(
        "<svg class=\"timeline\" role=\"img\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title>Drift and corrections of the last 24 hours</title>\
         <rect x=\"0\" y=\"{BAR_Y}\" width=\"{WIDTH}\" height=\"{BAR_H}\" fill=\"none\" stroke=\"currentColor\" stroke-opacity=\".3\"/>"
    );
    if let Some(since) = x.drift_since.as_deref().and_then(parse_time) {
        let from = x_of(since.max(start), now);
        let _ = write!(
            svg,
            "<rect class=\"drift\" x=\"{from:.1}\" y=\"{BAR_Y}\" width=\"{:.1}\" height=\"{BAR_H}\" fill=\"#cf222e\" fill-opacity=\".6\"><title>drifting since {}</title></rect>",
            (WIDTH - from).max(1.0),
            escape(x.drift_since.as_deref().unwrap_or_default())
        );
    }
    for e in &x.events {
        let Some(t) = parse_time(&e.time).filter(|t| *t >= start) else {
            continue;
        };
        let _ = write!(
            svg,
            "<line class=\"change\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"4\" y2=\"26\" stroke=\"#0969da\" stroke-width=\"2\"><title>{1} {2} ({3})</title></line>",
            x_of(t, now),
            escape(&e.time),
            escape(&e.action),
            escape(&e.why.join(", "))
        );
    }
    svg.push_str(
        "<text x=\"0\" y=\"33\" font-size=\"8\" fill=\"currentColor\">24 h ago</text>\
         <text x=\"600\" y=\"33\" font-size=\"8\" fill=\"currentColor\" text-anchor=\"end\">now</text></svg>",
    );
    svg
}

/// The section itself.
pub fn section(out: &mut String, x: &Explanation, now: SystemTime) {
    out.push_str("<h2>Where it comes from</h2><dl>");
    let mut row = |label: &str, html: String| {
        let _ = write!(out, "<dt>{label}</dt><dd>{html}</dd>");
    };
    match (&x.declared_at, &x.revision) {
        (Some(at), Some(rev)) => row(
            "Declared",
            format!(
                "<code>{}</code> at {}",
                escape(at),
                revision(Some(rev.as_str()))
            ),
        ),
        (None, Some(rev)) => row(
            "Declared",
            format!(
                "not by the applied revision {}",
                revision(Some(rev.as_str()))
            ),
        ),
        _ => row("Declared", "no revision applied yet".into()),
    }
    if let Some(c) = &x.commit {
        row("Commit", escape(&c.summary));
        row("Author", escape(&c.author));
        row("Committed", escape(&c.committed_at));
    }
    row(
        "Signer",
        match &x.signer {
            Some(s) => format!("<code>{}</code>", escape(s)),
            None => "<span class=\"muted\">not checked</span>".into(),
        },
    );
    if x.pinned {
        row("Pinned", "yes (<code>tend unpin</code>)".into());
    }
    if x.sensitive {
        row("Sensitive", "yes: its content is never shown".into());
    }
    out.push_str("</dl><h2>Last 24 hours</h2>");
    out.push_str(&timeline_svg(x, now));
    out.push_str("<h2>History</h2>");
    if x.events.is_empty() {
        out.push_str("<p class=\"muted\">No change applied by tend in the audit log.</p>");
        return;
    }
    out.push_str("<table><thead><tr><th>Time</th><th>Action</th><th>Why</th><th>Revision</th><th>Backup</th></tr></thead><tbody>");
    for e in &x.events {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.time),
            escape(&e.action),
            escape(&e.why.join(", ")),
            revision(Some(e.revision.as_str())),
            e.backup
                .as_deref()
                .map(|b| format!("<code>{}</code>", escape(b)))
                .unwrap_or_default()
        );
    }
    out.push_str("</tbody></table>");
    if x.events_cut {
        out.push_str("<p class=\"muted\">Older entries were not read: the audit log is long.</p>");
    }
}

//! HTML building blocks of the status page: escaping, resource links, state
//! badges, times, and the one self-contained document shell (inline CSS, no
//! scripts, no external assets, so the page works on an air-gapped host).

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use crate::ledger::State;
use crate::status::state_name;

/// Text safe inside elements and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The path of a resource's diff view. Every byte outside the unreserved
/// set (and `/`, which ids are made of) is percent-encoded, so an id cannot
/// leave the path or the attribute.
pub fn resource_href(id: &str) -> String {
    let mut out = String::from("/resources/");
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

pub fn resource_link(id: &str) -> String {
    format!(
        "<a href=\"{}\">{}</a>",
        escape(&resource_href(id)),
        escape(id)
    )
}

/// A resource's state, coloured by the page's style.
pub fn state_badge(s: State) -> String {
    let name = escape(&state_name(s));
    format!("<span class=\"state s-{name}\">{name}</span>")
}

/// A revision shortened for reading, the full id in the tooltip.
pub fn revision(rev: Option<&str>) -> String {
    match rev {
        Some(r) => abbreviated(r, 12),
        None => "<span class=\"muted\">none</span>".into(),
    }
}

/// The first `n` characters of a long identifier, all of it in the tooltip.
pub fn abbreviated(text: &str, n: usize) -> String {
    let short: String = text.chars().take(n).collect();
    let more = if short.len() < text.len() { "…" } else { "" };
    format!(
        "<code title=\"{}\">{}{more}</code>",
        escape(text),
        escape(&short)
    )
}

pub fn age(secs: u64) -> String {
    crate::duration::short(Duration::from_secs(secs))
}

pub use crate::duration::rfc3339;

pub fn parse_time(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

/// A time as the audit log may hold it.
pub use crate::ledger::day::entry_time as audit_time;

/// `2024-05-01T10:00:00Z (5m ago)` relative to `now`.
pub fn time_ago(t: SystemTime, now: SystemTime) -> String {
    let secs = now.duration_since(t).unwrap_or(Duration::ZERO).as_secs();
    format!(
        "<time datetime=\"{0}\">{0}</time> <span class=\"muted\">({1} ago)</span>",
        rfc3339(t),
        age(secs)
    )
}

/// A table that turns into labelled cards on a narrow screen, so a phone
/// shows every column without scrolling sideways. Cells are HTML already.
pub struct Table {
    head: &'static [&'static str],
    html: String,
}

impl Table {
    pub fn new(head: &'static [&'static str]) -> Table {
        let mut html = String::from("<table class=\"cards\"><thead><tr>");
        for h in head {
            let _ = write!(html, "<th>{h}</th>");
        }
        html.push_str("</tr></thead><tbody>");
        Table { head, html }
    }

    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.html.push_str("<tr>");
        for (label, cell) in self.head.iter().zip(cells) {
            let class = if *label == "Resource" {
                " class=\"id\""
            } else {
                ""
            };
            let _ = write!(self.html, "<td data-label=\"{label}\"{class}>{cell}</td>");
        }
        self.html.push_str("</tr>");
    }

    pub fn finish(mut self) -> String {
        self.html.push_str("</tbody></table>");
        self.html
    }
}

const STYLE: &str = "
:root{color-scheme:light dark;--fg:#1b1f23;--bg:#fff;--mute:#6a737d;--line:#d8dee4;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--info:#0969da}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--mute:#8b949e;--line:#30363d;--ok:#3fb950;--warn:#d29922;--bad:#f85149;--info:#58a6ff}}
*{box-sizing:border-box}
body{margin:0 auto;padding:1rem;max-width:72rem;font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg)}
h1{font-size:1.4rem;margin:.2rem 0}h2{font-size:1.1rem;margin:1.5rem 0 .5rem;border-bottom:1px solid var(--line)}
a{color:var(--info)}code,pre{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.muted{color:var(--mute)}.banner{padding:.6rem .8rem;border-radius:6px;border:1px solid var(--line);margin:.5rem 0}
.banner.ok{border-color:var(--ok)}.banner.bad{border-color:var(--bad)}.banner.warn{border-color:var(--warn)}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}dt{color:var(--mute)}dd{margin:0;overflow-wrap:anywhere}
.counts{display:flex;flex-wrap:wrap;gap:.4rem;padding:0;list-style:none}.counts li{border:1px solid var(--line);border-radius:999px;padding:.1rem .7rem}
table{border-collapse:collapse;width:100%}th,td{text-align:left;vertical-align:top;padding:.3rem .5rem;border-bottom:1px solid var(--line)}
th{color:var(--mute);font-weight:600;white-space:nowrap}td.id{overflow-wrap:anywhere;min-width:12rem}
.state{font-weight:600;white-space:nowrap}.s-InSync{color:var(--ok)}.s-Failed,.s-Blocked,.s-Contested,.s-Unknown{color:var(--bad)}.s-Drifted,.s-Progressing,.s-Paused{color:var(--warn)}
pre.diff{border:1px solid var(--line);border-radius:6px;padding:.5rem;overflow-x:auto}
.diff .add{color:var(--ok)}.diff .del{color:var(--bad)}.diff .hunk{color:var(--info)}.diff .hdr{color:var(--mute)}
@media (max-width:44rem){.cards thead{display:none}.cards tr{display:block;padding:.4rem 0;border-bottom:1px solid var(--line)}
.cards td{display:block;position:relative;border:0;padding:.1rem 0 .1rem 7rem;overflow-wrap:anywhere}
.cards td::before{content:attr(data-label);color:var(--mute);position:absolute;left:0;width:6.5rem}}
";

/// A complete page. `refresh_secs` adds a meta refresh so a page left open
/// stays current without scripts.
pub fn document(title: &str, refresh_secs: Option<u32>, body: &str) -> String {
    let refresh = refresh_secs
        .map(|s| format!("<meta http-equiv=\"refresh\" content=\"{s}\">"))
        .unwrap_or_default();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{refresh}\
         <link rel=\"icon\" href=\"data:,\"><title>{}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n",
        escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        let hostile = "<script>alert('x')</script>\"&";
        let e = escape(hostile);
        assert!(
            !e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''),
            "{e}"
        );
        assert_eq!(
            e,
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;"
        );
    }

    #[test]
    fn links_keep_ids_inside_the_path() {
        assert_eq!(
            resource_href("files/file/etc/a b.conf"),
            "/resources/files/file/etc/a%20b.conf"
        );
        let link = resource_link("files/file/x\"><script>?#%");
        assert!(
            link.contains("href=\"/resources/files/file/x%22%3E%3Cscript%3E%3F%23%25\""),
            "{link}"
        );
        assert!(!link.contains("<script>"), "{link}");
    }
}

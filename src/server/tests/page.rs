//! The status page and the diff view, rendered from a populated state dir.

use std::sync::Arc;

use axum::http::StatusCode;

use super::{call, fixture, get, populate};

/// Position of `needle` in `page`, failing the test when it is absent.
fn at(page: &str, needle: &str) -> usize {
    page.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not on the page"))
}

/// Position of an age written `secs` seconds after the state dir was
/// populated, or up to ten seconds later: the page reads the clock when it
/// is rendered, which on a loaded machine is not the same second.
fn at_age(page: &str, secs: u64, shown: impl Fn(u64) -> String) -> usize {
    (secs..=secs + 10)
        .find_map(|s| page.find(&shown(s)))
        .unwrap_or_else(|| panic!("{:?} or up to 10 s later is not on the page", shown(secs)))
}

#[tokio::test]
async fn the_page_is_self_contained_and_refreshes_itself() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let (status, headers, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(page.starts_with("<!DOCTYPE html>"));
    at(&page, "<meta http-equiv=\"refresh\"");
    at(
        &page,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
    );
    for active in ["<script", "@import", "url(", " src="] {
        assert!(!page.contains(active), "the page uses {active:?}");
    }
    // Every reference stays on this server: an air-gapped host has no other.
    for link in page.split("href=\"").skip(1) {
        assert!(
            link.starts_with('/') || link.starts_with("data:"),
            "external reference: {}",
            &link[..40]
        );
    }
    // The only <link> is the inline icon, which keeps browsers from asking
    // for /favicon.ico (a 404 in the console).
    assert_eq!(page.matches("<link ").count(), 1);
    at(&page, "<link rel=\"icon\" href=\"data:,\">");
}

#[tokio::test]
async fn the_page_shows_source_counts_drift_and_recent_changes() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let (_, _, page) = call(f.app(), get("/")).await;
    at(&page, "3 not in sync");
    at(&page, "https://git.example.com/ops/hosts.git");
    at(
        &page,
        &format!("<code title=\"{}\">aaaaaaaaaaaa…</code>", "a".repeat(40)),
    );
    at(
        &page,
        ">bbbbbbbbbbbb…</code> <span class=\"s-Drifted\">not applied yet",
    );
    at(&page, "<dt>Last fetch</dt>");
    at_age(&page, 30, |s| format!("({s}s ago)"));
    at(
        &page,
        "<span class=\"state s-Failed\">Failed</span> <b>1</b>",
    );
    // Longest drift first, each with its age, reason and next retry.
    let nginx = at(&page, ">files/file/etc/nginx/nginx.conf</a>");
    let hosts = at(&page, ">files/file/etc/hosts</a>");
    let blocked = at(&page, ">files/file/srv/a b&lt;c&gt;.txt</a>");
    assert!(nginx < hosts && hosts < blocked, "not sorted by drift age");
    at_age(&page, 7300, |s| {
        format!(
            "<td data-label=\"For\">{}h{}m</td><td data-label=\"Attempts\">3</td>",
            s / 3600,
            s / 60 % 60
        )
    });
    at_age(&page, 300, |s| {
        format!("<td data-label=\"For\">5m{}s</td>", s - 300)
    });
    assert!(
        !page.contains(">files/file/etc/motd<"),
        "an in-sync resource is listed as drifting"
    );
    // The twenty newest audit entries, newest first.
    let newest = at(&page, ">files/file/etc/app/conf24</a>");
    let oldest = at(&page, ">files/file/etc/app/conf5</a>");
    assert!(newest < oldest);
    assert!(
        !page.contains(">files/file/etc/app/conf4</a>"),
        "more than 20 audit entries"
    );
    at(&page, "<td data-label=\"Why\">content, mode</td>");
    // The day in one picture: the 25 changes of the last hour, each of
    // their resources out of sync then, beside the three still drifting
    // (one of them for two hours).
    let day = at(&page, "<h2>Last 24 hours</h2><svg class=\"day\"");
    assert!(day < nginx, "the picture comes before the table");
    at(
        &page,
        "Resources out of sync (peak 28 in an hour, 30 in all)",
    );
    at(&page, "Changes applied (peak 25 in an hour, 25 in all)");
}

#[tokio::test]
async fn everything_from_the_ledger_is_escaped() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let (_, _, page) = call(f.app(), get("/")).await;
    at(
        &page,
        "write failed: &lt;disk full&gt; &amp; &quot;more&quot;",
    );
    assert!(
        !page.contains("<disk full>") && !page.contains("a b<c>"),
        "raw markup from the ledger"
    );
    at(&page, "href=\"/resources/files/file/srv/a%20b%3Cc%3E.txt\"");
}

#[tokio::test]
async fn a_state_dir_without_a_ledger_still_gives_a_page() {
    let f = fixture(&[], None);
    let (status, _, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    at(&page, "No status yet");
    at(&page, "<meta http-equiv=\"refresh\"");
}

#[tokio::test]
async fn the_diff_view_shows_the_escaped_diff_of_one_resource() {
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    f.state.resource_diff = Arc::new(|id: &str| {
        (id == "files/file/srv/a b<c>.txt").then(|| {
            "--- live/x\n+++ desired/x\n@@ -1 +1 @@\n-old <b>bold</b>\n+new & improved\n"
                .to_string()
        })
    });
    let (status, _, page) = call(f.app(), get("/resources/files/file/srv/a%20b%3Cc%3E.txt")).await;
    assert_eq!(status, StatusCode::OK);
    at(&page, "<h1>files/file/srv/a b&lt;c&gt;.txt</h1>");
    at(&page, "<span class=\"state s-Blocked\">Blocked</span>");
    at(&page, "path outside root");
    at(
        &page,
        "<span class=\"del\">-old &lt;b&gt;bold&lt;/b&gt;</span>",
    );
    at(&page, "<span class=\"add\">+new &amp; improved</span>");
    at(&page, "<span class=\"hunk\">@@ -1 +1 @@</span>");
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "the diff view reloads under the reader"
    );
    let (status, _, page) = call(f.app(), get("/resources/files/file/etc/hosts")).await;
    assert_eq!(status, StatusCode::OK);
    at(
        &page,
        "No difference between the declaration and the live state",
    );
    let (status, _, _) = call(f.app(), get("/resources/files/file/unknown")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A damaged line in the middle of the audit log (issue 13: a torn append
/// followed by more lines) hides nothing else: the page says how many lines
/// it skipped and shows the rest.
#[tokio::test]
async fn a_damaged_audit_line_is_skipped_and_the_rest_shown() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let audit = f.dir.path().join("audit.jsonl");
    let text = std::fs::read_to_string(&audit).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    // A batch cut short, and the next one appended after the fragment.
    let glued = format!(
        "{{\"time\":\"2024-01-01T00:00:00Z\",\"id\":\"files/fi{}",
        lines[20]
    );
    lines[20] = &glued;
    std::fs::write(&audit, lines.join("\n") + "\n").unwrap();
    let (status, _, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("cannot be read"), "the log was refused");
    at(&page, "1 damaged line(s) of the audit log are not shown");
    at(&page, ">files/file/etc/app/conf24</a>");
    at(&page, ">files/file/etc/app/conf4</a>");
    assert!(
        !page.contains(">files/file/etc/app/conf3</a>"),
        "more than 20 entries"
    );
}

/// The page reads beside a running daemon: a line the daemon is still
/// writing stays as it is, and a state dir that does not exist yet is not
/// created by a reader.
#[tokio::test]
async fn reading_the_page_writes_nothing_to_the_state_dir() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let audit = f.dir.path().join("audit.jsonl");
    let mut bytes = std::fs::read(&audit).unwrap();
    bytes.extend_from_slice(b"{\"time\":\"2024-01-01T00:00:00Z\",\"id\":\"files/file/half");
    std::fs::write(&audit, &bytes).unwrap();
    let (status, _, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    at(&page, ">files/file/etc/app/conf24</a>");
    assert!(
        !page.contains("files/file/half"),
        "a half-written line was shown"
    );
    assert_eq!(
        std::fs::read(&audit).unwrap(),
        bytes,
        "the reader cut the daemon's line in progress"
    );

    let mut missing = fixture(&[], None);
    let nowhere = missing.dir.path().join("not-yet");
    missing.state.state_dir = nowhere.clone();
    let (status, _, _) = call(missing.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!nowhere.exists(), "a reader created the state dir");
}

#[tokio::test]
async fn declaration_problems_are_listed_escaped_and_in_the_banner() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let ledger = crate::ledger::Ledger::open(f.dir.path()).unwrap();
    ledger
        .set_declaration_problems(&["a.tend.yaml:3: mode \"<9>\" & more".to_string()])
        .unwrap();
    let (_, _, page) = call(f.app(), get("/")).await;
    at(&page, "Declaration problems (1)");
    at(
        &page,
        "a.tend.yaml:3: mode &quot;&lt;9&gt;&quot; &amp; more",
    );
    assert!(!page.contains("<9>"), "raw markup from the ledger");
    let (_, _, json) = call(f.app(), get("/api/v1/status")).await;
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["problems"][0], "a.tend.yaml:3: mode \"<9>\" & more");
}

#[tokio::test]
async fn the_resource_page_shows_where_it_comes_from_and_a_drift_timeline_without_script() {
    use crate::explain::{Event, Explanation};
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    let now = std::time::SystemTime::now();
    let time = |secs: u64| {
        humantime::format_rfc3339_seconds(now - std::time::Duration::from_secs(secs)).to_string()
    };
    let (drift, changed, old) = (time(3600), time(7200), time(3 * 86400));
    f.state.resource_explain = Arc::new(move |id: &str| {
        Some(Explanation {
            id: id.to_string(),
            path: Some("etc/hosts".into()),
            declared_at: Some("hosts<1>.tend.yaml:7".into()),
            revision: Some("a".repeat(40)),
            commit: None,
            signer: Some("ssh SHA256:abc (alice)".into()),
            pinned: false,
            sensitive: false,
            state: Some(crate::ledger::State::Drifted),
            drift_since: Some(drift.clone()),
            reason: None,
            last_applied: None,
            recent_corrections: vec![],
            events: vec![
                Event {
                    time: changed.clone(),
                    action: "update".into(),
                    why: vec!["content".into()],
                    revision: "a".repeat(40),
                    backup: Some("hmac-sha256:00".into()),
                },
                Event {
                    time: old.clone(),
                    action: "create".into(),
                    why: vec!["absent".into()],
                    revision: "b".repeat(40),
                    backup: None,
                },
            ],
            events_cut: false,
            backups: vec!["hmac-sha256:00".into()],
        })
    });
    let (status, _, page) = call(f.app(), get("/resources/files/file/etc/hosts")).await;
    assert_eq!(status, StatusCode::OK);
    at(&page, "<code>hosts&lt;1&gt;.tend.yaml:7</code>");
    at(&page, "ssh SHA256:abc (alice)");
    at(&page, "hmac-sha256:00");
    let svg_at = at(&page, "<svg class=\"timeline\"");
    let svg = &page[svg_at..page[svg_at..].find("</svg>").unwrap() + svg_at];
    assert!(svg.contains("class=\"drift\""), "{svg}");
    // One tick: the update within the day; the create three days ago is
    // outside the picture (but in the history table).
    assert_eq!(svg.matches("class=\"change\"").count(), 1, "{svg}");
    at(&page, "absent");
    assert!(!page.contains("<script"), "no script");
}

#[tokio::test]
async fn a_ledger_that_cannot_be_written_is_said_first_on_the_page() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let (_, _, page) = call(f.app(), get("/")).await;
    assert!(
        !page.contains("<h2>Ledger</h2>"),
        "a sound ledger shown as a problem"
    );
    crate::ledger::note_write_failure(f.dir.path(), "No space left on device <disk>").unwrap();
    let (_, _, page) = call(f.app(), get("/")).await;
    let banner = at(&page, "The ledger is not sound");
    let line = at(
        &page,
        "ledger write failed: No space left on device &lt;disk&gt;",
    );
    assert!(
        banner < line && line < at(&page, "<h2>Resources</h2>"),
        "{page}"
    );
    let (_, _, json) = call(f.app(), get("/api/v1/status")).await;
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        doc["ledger"]["write_failed"]
            .as_str()
            .unwrap()
            .contains("No space left"),
        "{doc}"
    );
}

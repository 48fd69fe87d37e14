//! The front page's picture of the last 24 hours, drawn as inline SVG (no
//! script): per hour, how many resources were out of sync and how many
//! changes tend applied, from the status document and the audit log.

use std::fmt::Write;
use std::time::SystemTime;

use serde_json::Value;

use super::html::{escape, parse_time};
use crate::ledger::day::{self as day_counts, Day};
use crate::ledger::State as ResourceState;
use crate::status::StatusDoc;

const HOURS: usize = day_counts::HOURS;
const WIDTH: f64 = 600.0;
const ROW_H: f64 = 40.0;
const TOP: f64 = 14.0;

/// The day ending at `now` from `doc` and the audit entries `audit`
/// (newest first, as the log's tail reads them); `capped` when the read
/// stopped at its byte cap, so the day may begin before what was read.
pub fn day(doc: &StatusDoc, audit: &[Value], capped: bool, now: SystemTime) -> Day {
    let drifting = doc
        .resources
        .iter()
        .filter(|r| r.state != ResourceState::InSync)
        .filter_map(|r| Some((r.id.as_str(), parse_time(r.drift_since.as_deref()?)?)));
    Day::of(drifting, audit, capped, now)
}

/// One row of bars scaled to its own peak, with a label and the peak.
fn row(svg: &mut String, y: f64, label: &str, class: &str, colour: &str, values: &[usize]) {
    let peak = values.iter().copied().max().unwrap_or(0);
    let total: usize = values.iter().sum();
    let _ = write!(
        svg,
        "<text x=\"0\" y=\"{:.1}\" font-size=\"10\" fill=\"currentColor\">{} (peak {peak} in an hour, {total} in all)</text>",
        y - 3.0,
        escape(label)
    );
    let slot = WIDTH / HOURS as f64;
    let height = ROW_H - TOP;
    for (h, v) in values.iter().enumerate() {
        if *v == 0 {
            continue;
        }
        let bar = (*v as f64 / peak as f64 * height).max(1.0);
        let ago = HOURS - h;
        let _ = write!(
            svg,
            "<rect class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bar:.1}\" fill=\"{colour}\"><title>{v} ({}-{} h ago)</title></rect>",
            h as f64 * slot + 1.0,
            y + height - bar,
            slot - 2.0,
            ago,
            ago - 1
        );
    }
    let _ = write!(
        svg,
        "<line x1=\"0\" x2=\"{WIDTH}\" y1=\"{0:.1}\" y2=\"{0:.1}\" stroke=\"currentColor\" stroke-opacity=\".3\"/>",
        y + height
    );
}

/// The picture: out of sync above, changes applied below.
pub fn svg(d: &Day) -> String {
    let height = TOP + 2.0 * (ROW_H + TOP) + 4.0;
    let mut svg = format!(
        "<svg class=\"day\" role=\"img\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title>Resources out of sync and changes applied, per hour of the last 24 hours</title>"
    );
    row(
        &mut svg,
        TOP,
        "Resources out of sync",
        "out-of-sync",
        "#cf222e",
        &d.out_of_sync,
    );
    row(
        &mut svg,
        TOP + ROW_H + TOP,
        "Changes applied",
        "applied",
        "#0969da",
        &d.applied,
    );
    let _ = write!(
        svg,
        "<text x=\"0\" y=\"{0:.1}\" font-size=\"8\" fill=\"currentColor\">24 h ago</text>\
         <text x=\"{WIDTH}\" y=\"{0:.1}\" font-size=\"8\" fill=\"currentColor\" text-anchor=\"end\">now</text></svg>",
        height - 1.0
    );
    svg
}

/// The section of the front page.
pub fn section(out: &mut String, doc: &StatusDoc, audit: &[Value], capped: bool) {
    let now = parse_time(&doc.generated_at).unwrap_or_else(SystemTime::now);
    let d = day(doc, audit, capped, now);
    out.push_str("<h2>Last 24 hours</h2>");
    out.push_str(&svg(&d));
    if d.partial {
        out.push_str(
            "<p class=\"muted\">Only the newest part of the audit log was read: older hours may show fewer changes.</p>",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::ResourceStatus;
    use serde_json::json;
    use std::time::Duration;

    fn at(now: SystemTime, hours_ago: f64) -> String {
        humantime::format_rfc3339_seconds(now - Duration::from_secs_f64(hours_ago * 3600.0))
            .to_string()
    }

    fn doc(now: SystemTime, drifting: &[(&str, f64)]) -> StatusDoc {
        StatusDoc {
            generated_at: humantime::format_rfc3339_seconds(now).to_string(),
            source: None,
            watcher: None,
            ha: None,
            rollout: None,
            counts: Default::default(),
            problems: Vec::new(),
            ledger: Default::default(),
            resources: drifting
                .iter()
                .map(|(id, ago)| ResourceStatus {
                    id: id.to_string(),
                    state: ResourceState::Drifted,
                    drift_since: Some(at(now, *ago)),
                    drift_age_seconds: None,
                    attempts: 0,
                    reason: None,
                    next_retry: None,
                    last_applied: None,
                })
                .collect(),
        }
    }

    #[test]
    fn hours_count_drift_and_changes() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        // Newest first; the last is older than the day and ends the read.
        let audit = vec![
            json!({"time": at(now, 0.5), "id": "files/file/a", "action": "update"}),
            json!({"time": at(now, 0.6), "id": "files/file/a", "action": "update"}),
            json!({"time": at(now, 0.7), "id": "files/file/b", "action": "create"}),
            json!({"time": at(now, 5.5), "id": "files/file/c", "action": "delete"}),
            json!({"time": at(now, 30.0), "id": "files/file/old", "action": "update"}),
        ];
        let d = day(&doc(now, &[("files/file/d", 2.5)]), &audit, false, now);
        // The newest hour is the last.
        assert_eq!(d.applied[23], 3);
        assert_eq!(d.applied[18], 1);
        assert_eq!(d.applied.iter().sum::<usize>(), 4);
        assert!(
            !day(&doc(now, &[]), &audit, true, now).partial,
            "read past the day"
        );
        assert!(day(&doc(now, &[]), &audit[..3], true, now).partial);
        // a and b changed in the last hour, d drifting since 2.5 h ago.
        assert_eq!(d.out_of_sync[23], 3);
        assert_eq!(&d.out_of_sync[21..23], &[1, 1]);
        assert_eq!(d.out_of_sync[20], 0);
        assert_eq!(d.out_of_sync[18], 1);
        // A drift older than the day fills every hour.
        let d = day(&doc(now, &[("files/file/e", 40.0)]), &[], false, now);
        assert_eq!(d.out_of_sync, [1; HOURS]);
        assert_eq!(d.applied, [0; HOURS]);
    }

    #[test]
    fn the_picture_has_a_bar_per_busy_hour_and_escapes_nothing_raw() {
        let mut d = Day {
            out_of_sync: [0; HOURS],
            applied: [0; HOURS],
            partial: false,
        };
        d.out_of_sync[3] = 2;
        d.applied[3] = 5;
        d.applied[20] = 1;
        let s = svg(&d);
        assert_eq!(s.matches("class=\"out-of-sync\"").count(), 1);
        assert_eq!(s.matches("class=\"applied\"").count(), 2);
        assert!(s.contains("peak 5 in an hour, 6 in all"), "{s}");
        assert!(!s.contains("<script"), "{s}");
    }
}

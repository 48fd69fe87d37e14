//! The text of `tend status`: the source, the ledger's health, the role
//! and rollout, counts, problems and the table of resources.

use std::time::Duration;

use super::{state_name, ResourceStatus, StatusDoc};
use crate::duration::short;
use crate::ledger::State;

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

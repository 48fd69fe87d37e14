//! The fleet's status (SPEC §12): the document each host keeps under
//! `tend/fleet/<host>`, read back for `tend fleet status` and the page,
//! and the table they print.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::PREFIX;
use crate::ledger::day::{self, Day};
use crate::ledger::{AuditLog, Ledger, LedgerError};
use crate::status::state_name;
use crate::target::etcd::{Connection, Unreachable};

/// What one host says of itself. Times are RFC 3339, so the reader works
/// out their age and an unchanged host writes the same bytes again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    pub host: String,
    /// The revision applied.
    pub revision: Option<String>,
    /// Resources per state (`InSync`, `Drifted`, `Failed`, ...).
    pub counts: BTreeMap<String, usize>,
    /// Since when the resource out of sync the longest has been.
    pub oldest_drift: Option<String>,
    /// With `ha`: `leader` or `follower`.
    pub role: Option<String>,
    /// Whether this host polls the source for the fleet.
    #[serde(default)]
    pub poller: bool,
    /// When its last pass ended.
    pub last_pass: Option<String>,
    /// Its last 24 hours, for the fleet's picture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<HostDay>,
}

/// A host's last 24 hours, ending with the hour it was counted in (an
/// hour's end, so the fleet's days add up hour by hour).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDay {
    pub ends: String,
    #[serde(flatten)]
    pub counts: Day,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl HostStatus {
    /// This host's status from its ledger: counts and oldest drift read
    /// from the records not in sync only, as the metrics are.
    pub fn read(
        host: &str,
        ledger: &Ledger,
        role: Option<String>,
        poller: bool,
        last_pass: Option<SystemTime>,
    ) -> Result<HostStatus, LedgerError> {
        let mut counts = BTreeMap::new();
        for (state, n) in ledger.state_counts()? {
            *counts.entry(state_name(state)).or_default() += n;
        }
        let oldest = ledger
            .resources_not_in_sync()?
            .into_iter()
            .filter_map(|r| r.drift_since)
            .min();
        let revision = ledger.source()?.and_then(|s| s.applied_revision);
        Ok(HostStatus {
            host: host.to_string(),
            revision,
            counts,
            oldest_drift: oldest.map(rfc3339),
            role,
            poller,
            last_pass: last_pass.map(rfc3339),
            day: None,
        })
    }

    /// With its last 24 hours up to the end of the hour of `now`, from the
    /// ledger's records not in sync and the audit log of `state_dir`.
    pub fn with_day(
        mut self,
        ledger: &Ledger,
        state_dir: &Path,
        now: SystemTime,
    ) -> Result<HostStatus, LedgerError> {
        let drifting = ledger.resources_not_in_sync()?;
        let tail = AuditLog::tail(state_dir, day::AUDIT_ENTRIES, day::AUDIT_BYTES)?;
        let end = day::hour_end(now);
        let counts = Day::of(
            drifting
                .iter()
                .filter_map(|r| Some((r.id.as_str(), r.drift_since?))),
            &tail.entries,
            tail.capped,
            end,
        );
        self.day = Some(HostDay {
            ends: rfc3339(end),
            counts,
        });
        Ok(self)
    }

    /// Resources not in sync.
    pub fn not_in_sync(&self) -> usize {
        self.counts
            .iter()
            .filter(|(s, _)| s.as_str() != "InSync")
            .map(|(_, n)| n)
            .sum()
    }

    fn count(&self, state: &str) -> usize {
        self.counts.get(state).copied().unwrap_or(0)
    }
}

/// A key under the prefix that is not a host's: the poller's revision,
/// and whatever other part of tend keeps below (`rollout/...`).
fn is_host_key(rest: &str) -> bool {
    !rest.is_empty() && !rest.contains('/') && format!("{PREFIX}{rest}") != super::REVISION_KEY
}

impl Fleet {
    /// The fleet's last 24 hours: every host's that says, added up hour by
    /// hour to the newest end among them; `None` when no host says.
    pub fn day(&self) -> Option<Day> {
        let days: Vec<(SystemTime, &Day)> = self
            .hosts
            .iter()
            .filter_map(|h| h.day.as_ref())
            .filter_map(|d| Some((humantime::parse_rfc3339(&d.ends).ok()?, &d.counts)))
            .collect();
        let end = days.iter().map(|(t, _)| *t).max()?;
        let mut sum = Day::default();
        for (t, d) in days {
            sum.add(d, day::hours_between(t, end));
        }
        Some(sum)
    }
}

/// What was read: each host's status sorted by host, and the keys that
/// did not read as one (key: why).
#[derive(Debug, Default)]
pub struct Fleet {
    pub hosts: Vec<HostStatus>,
    pub unreadable: Vec<String>,
}

/// Every host's status, in one range read of the prefix.
pub fn read_all(conn: &Connection) -> Result<Fleet, Unreachable> {
    let kvs = conn.call(|mut c| async move {
        let r = c
            .get(PREFIX, Some(etcd_client::GetOptions::new().with_prefix()))
            .await?;
        Ok(r.kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
            .collect::<Vec<_>>())
    })?;
    Ok(parse(kvs))
}

fn parse(kvs: Vec<(Vec<u8>, Vec<u8>)>) -> Fleet {
    let mut fleet = Fleet::default();
    for (key, value) in kvs {
        let key = String::from_utf8_lossy(&key).into_owned();
        let Some(rest) = key.strip_prefix(PREFIX).filter(|r| is_host_key(r)) else {
            continue;
        };
        match serde_json::from_slice::<HostStatus>(&value) {
            Ok(s) if s.host == rest => fleet.hosts.push(s),
            Ok(s) => fleet
                .unreadable
                .push(format!("{key}: names host {:?}, not {rest:?}", s.host)),
            Err(e) => fleet
                .unreadable
                .push(format!("{key}: not a host's status: {e}")),
        }
    }
    fleet.hosts.sort_by(|a, b| a.host.cmp(&b.host));
    fleet
}

/// How long ago `t` (RFC 3339) was, in whole seconds.
pub fn age(t: Option<&str>, now: SystemTime) -> Option<u64> {
    let t = humantime::parse_rfc3339(t?).ok()?;
    Some(now.duration_since(t).unwrap_or(Duration::ZERO).as_secs())
}

/// One row of the table, as text cells.
pub fn row(h: &HostStatus, now: SystemTime) -> [String; 9] {
    let short = |r: &Option<String>| {
        r.as_deref()
            .map_or("-".to_string(), |r| r.chars().take(12).collect())
    };
    let ago = |t: &Option<String>| {
        age(t.as_deref(), now).map_or("-".to_string(), |s| {
            crate::duration::short(Duration::from_secs(s))
        })
    };
    let others = h.not_in_sync() - h.count("Drifted") - h.count("Failed");
    let role = match (&h.role, h.poller) {
        (Some(r), true) => format!("{r}, poller"),
        (Some(r), false) => r.clone(),
        (None, true) => "poller".to_string(),
        (None, false) => "-".to_string(),
    };
    [
        h.host.clone(),
        short(&h.revision),
        h.count("InSync").to_string(),
        h.count("Drifted").to_string(),
        h.count("Failed").to_string(),
        others.to_string(),
        ago(&h.oldest_drift),
        role,
        ago(&h.last_pass),
    ]
}

pub const HEADER: [&str; 9] = [
    "HOST",
    "REVISION",
    "IN SYNC",
    "DRIFTED",
    "FAILED",
    "OTHER",
    "OLDEST DRIFT",
    "ROLE",
    "LAST PASS",
];

/// The table `tend fleet status` prints, columns aligned.
pub fn text(fleet: &Fleet, now: SystemTime) -> String {
    let rows: Vec<[String; 9]> = fleet.hosts.iter().map(|h| row(h, now)).collect();
    let mut widths = HEADER.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(HEADER.to_vec());
    for r in &rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    if rows.is_empty() {
        out.push_str("(no host has published its status)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(host: &str) -> Vec<u8> {
        serde_json::to_vec(&HostStatus {
            host: host.into(),
            revision: Some("0123456789abcdef".into()),
            counts: [("InSync".to_string(), 3), ("Drifted".to_string(), 1)].into(),
            oldest_drift: Some("2026-01-01T00:00:00Z".into()),
            role: None,
            poller: true,
            last_pass: Some("2026-01-01T00:01:00Z".into()),
            day: None,
        })
        .unwrap()
    }

    #[test]
    fn the_fleets_day_adds_every_hosts_hour_by_hour() {
        let with_day = |host: &str, ends: &str, newest: usize| {
            let mut counts = Day::default();
            counts.applied[23] = newest;
            counts.out_of_sync[23] = 1;
            let s = HostStatus {
                host: host.into(),
                day: Some(HostDay {
                    ends: ends.into(),
                    counts,
                }),
                ..HostStatus::default()
            };
            (
                format!("tend/fleet/{host}").into_bytes(),
                serde_json::to_vec(&s).unwrap(),
            )
        };
        let fleet = parse(vec![
            with_day("a", "2026-12-02T06:00:00Z", 2),
            with_day("b", "2026-12-02T06:00:00Z", 3),
            // Counted an hour before the others: its newest hour is theirs
            // before last.
            with_day("c", "2026-12-02T05:00:00Z", 7),
            (b"tend/fleet/d".to_vec(), doc("d")),
        ]);
        let day = fleet.day().unwrap();
        assert_eq!((day.applied[23], day.applied[22]), (5, 7));
        assert_eq!((day.out_of_sync[23], day.out_of_sync[22]), (2, 1));
        assert_eq!(
            parse(vec![(b"tend/fleet/d".to_vec(), doc("d"))]).day(),
            None
        );
    }

    #[test]
    fn hosts_sorted_and_other_keys_left_out() {
        let kvs = vec![
            (b"tend/fleet/web-2".to_vec(), doc("web-2")),
            (b"tend/fleet/revision".to_vec(), b"abc".to_vec()),
            (b"tend/fleet/rollout/state".to_vec(), b"{}".to_vec()),
            (b"tend/fleet/web-1".to_vec(), doc("web-1")),
            (b"tend/fleet/web-3".to_vec(), b"not json".to_vec()),
            (b"tend/fleet/web-4".to_vec(), doc("web-9")),
        ];
        let fleet = parse(kvs);
        let names: Vec<&str> = fleet.hosts.iter().map(|h| h.host.as_str()).collect();
        assert_eq!(names, ["web-1", "web-2"]);
        assert_eq!(fleet.unreadable.len(), 2, "{:?}", fleet.unreadable);
        assert!(fleet.unreadable[0].starts_with("tend/fleet/web-3: "));
    }

    #[test]
    fn a_host_reads_its_counts_oldest_drift_and_revision_from_its_ledger() {
        use crate::ledger::{ResourceRecord, SourceRecord, State};
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open_in_memory(dir.path()).unwrap();
        let t = |s: &str| humantime::parse_rfc3339(s).unwrap();
        let mut newer = ResourceRecord::new("files/file/etc/a", State::Drifted);
        newer.drift_since = Some(t("2026-01-01T00:05:00Z"));
        let mut older = ResourceRecord::new("files/file/etc/b", State::Failed);
        older.drift_since = Some(t("2026-01-01T00:01:00Z"));
        for r in [
            newer,
            older,
            ResourceRecord::new("files/file/etc/c", State::InSync),
        ] {
            ledger.put_resource(&r).unwrap();
        }
        ledger
            .put_source(&SourceRecord {
                repo: "r".into(),
                reference: None,
                fetched_revision: Some("f".repeat(40)),
                applied_revision: Some("a".repeat(40)),
                last_fetch_at: None,
                last_fetch_error: None,
                last_success_at: None,
                drift_since: None,
            })
            .unwrap();
        let last = t("2026-01-01T00:06:00Z");
        let s =
            HostStatus::read("web-1", &ledger, Some("leader".into()), false, Some(last)).unwrap();
        assert_eq!(s.revision, Some("a".repeat(40)));
        assert_eq!(
            (s.count("InSync"), s.count("Drifted"), s.count("Failed")),
            (1, 1, 1)
        );
        assert_eq!(s.not_in_sync(), 2);
        assert_eq!(s.oldest_drift.as_deref(), Some("2026-01-01T00:01:00Z"));
        assert_eq!(s.last_pass.as_deref(), Some("2026-01-01T00:06:00Z"));
        assert_eq!(s.role.as_deref(), Some("leader"));
    }

    #[test]
    fn the_table_shows_ages_and_counts() {
        let fleet = parse(vec![(b"tend/fleet/web-1".to_vec(), doc("web-1"))]);
        let now = humantime::parse_rfc3339("2026-01-01T00:02:00Z").unwrap();
        let text = text(&fleet, now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("HOST"), "{text}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "web-1",
                "0123456789ab",
                "3",
                "1",
                "0",
                "0",
                "2m0s",
                "poller",
                "1m0s"
            ],
            "{text}"
        );
    }
}

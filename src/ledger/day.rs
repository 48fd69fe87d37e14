//! The last 24 hours in numbers, per hour: how many resources were out of
//! sync and how many changes tend applied, from the records not in sync
//! and the audit log. The status page draws a host's; each host of a
//! fleet publishes its own, hour-aligned, and the page sums the fleet's.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const HOURS: usize = 24;
/// How many audit entries a day is counted from, at most.
pub const AUDIT_ENTRIES: usize = 20_000;
/// Bytes of the audit log's end read at most to find them.
pub const AUDIT_BYTES: u64 = 1 << 20;
const HOUR: Duration = Duration::from_secs(3600);

/// The last 24 hours, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Day {
    /// Resources out of sync at some time in each hour: those still
    /// drifting whose drift had begun by the hour's end, and those tend
    /// changed in it (each was out of sync until then).
    pub out_of_sync: [usize; HOURS],
    /// Changes tend applied in each hour (the audit log's entries).
    pub applied: [usize; HOURS],
    /// Whether the audit log was read only in part, so older hours may
    /// count fewer changes than were made.
    #[serde(default)]
    pub partial: bool,
}

/// A time as the audit log may hold it: RFC 3339 text, Unix seconds, or
/// serde's `{secs_since_epoch, nanos_since_epoch}`.
pub fn entry_time(v: &Value) -> Option<SystemTime> {
    match v {
        Value::String(s) => humantime::parse_rfc3339_weak(s).ok(),
        Value::Number(n) => n
            .as_f64()
            .filter(|s| *s >= 0.0)
            .map(|s| UNIX_EPOCH + Duration::from_secs_f64(s)),
        Value::Object(o) => o
            .get("secs_since_epoch")?
            .as_u64()
            .map(|s| UNIX_EPOCH + Duration::from_secs(s)),
        _ => None,
    }
}

/// The end of the hour `t` falls in: where a fleet's days all end, so
/// hosts that published at different moments add up hour by hour.
pub fn hour_end(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    UNIX_EPOCH + Duration::from_secs((secs / HOUR.as_secs() + 1) * HOUR.as_secs())
}

/// The hour of the last 24 ending at `start + 24 h` that `t` falls in.
fn hour_of(t: SystemTime, start: SystemTime) -> Option<usize> {
    let since = t.duration_since(start).ok()?;
    let h = (since.as_secs() / HOUR.as_secs()) as usize;
    Some(h.min(HOURS - 1))
}

impl Day {
    /// The day ending at `end` from the resources out of sync now with
    /// since when (`drifting`) and the audit entries `audit` (newest
    /// first, as the log's tail reads them); `capped` when the read stopped
    /// at its byte cap, so the day may begin before what was read.
    pub fn of<'a>(
        drifting: impl Iterator<Item = (&'a str, SystemTime)>,
        audit: &'a [Value],
        capped: bool,
        end: SystemTime,
    ) -> Day {
        let start = end.checked_sub(HOUR * HOURS as u32).unwrap_or(UNIX_EPOCH);
        let mut ids: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); HOURS];
        let mut applied = [0; HOURS];
        let mut reached_older = false;
        for e in audit {
            let Some(t) = e.get("time").and_then(entry_time) else {
                continue;
            };
            let Some(h) = hour_of(t, start) else {
                // Newest first: everything after this is older still.
                reached_older = true;
                break;
            };
            applied[h] += 1;
            if let Some(id) = e.get("id").and_then(Value::as_str) {
                ids[h].insert(id);
            }
        }
        for (id, since) in drifting {
            let first = hour_of(since, start).unwrap_or(0);
            for set in &mut ids[first..] {
                set.insert(id);
            }
        }
        let mut out_of_sync = [0; HOURS];
        for (n, set) in out_of_sync.iter_mut().zip(&ids) {
            *n = set.len();
        }
        Day {
            out_of_sync,
            applied,
            partial: capped && !reached_older,
        }
    }

    /// Adds `other`, a day that ended `behind` whole hours before this
    /// one's end: its hours move left, the oldest falling off.
    pub fn add(&mut self, other: &Day, behind: usize) {
        for h in behind..HOURS {
            self.out_of_sync[h - behind] += other.out_of_sync[h];
            self.applied[h - behind] += other.applied[h];
        }
        self.partial |= other.partial;
    }
}

/// The whole hours from `earlier` to `later`, both hour ends.
pub fn hours_between(earlier: SystemTime, later: SystemTime) -> usize {
    later
        .duration_since(earlier)
        .map_or(0, |d| (d.as_secs() / HOUR.as_secs()) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_that_ended_hours_apart_add_up_hour_by_hour() {
        let mut a = Day::default();
        a.applied[23] = 2;
        a.out_of_sync[10] = 1;
        let mut b = Day::default();
        b.applied[23] = 5;
        b.applied[0] = 9;
        b.out_of_sync[11] = 3;
        let mut sum = a.clone();
        sum.add(&b, 0);
        assert_eq!((sum.applied[23], sum.applied[0]), (7, 9));
        // b ended an hour earlier: its newest hour is the one before last,
        // its oldest hour is out of the day.
        let mut sum = a.clone();
        sum.add(&b, 1);
        assert_eq!((sum.applied[23], sum.applied[22]), (2, 5));
        assert_eq!(sum.applied.iter().sum::<usize>(), 7);
        assert_eq!((sum.out_of_sync[10], sum.out_of_sync[11]), (4, 0));
        let mut sum = a.clone();
        sum.add(&b, 30);
        assert_eq!(sum, a, "a day older than a day adds nothing");
    }

    #[test]
    fn an_hour_ends_on_the_hour() {
        let t = UNIX_EPOCH + Duration::from_secs(3600 * 10 + 59);
        assert_eq!(hour_end(t), UNIX_EPOCH + Duration::from_secs(3600 * 11));
        let later = hour_end(t + Duration::from_secs(7200));
        assert_eq!(hours_between(hour_end(t), later), 2);
        assert_eq!(hours_between(later, hour_end(t)), 0);
    }

    #[test]
    fn audit_times_read_in_every_form_the_log_has_held() {
        let t = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for v in [
            serde_json::json!("2027-01-15T08:00:00Z"),
            serde_json::json!(1_800_000_000),
            serde_json::json!({"secs_since_epoch": 1_800_000_000u64, "nanos_since_epoch": 0}),
        ] {
            assert!(entry_time(&v).is_some(), "{v}");
        }
        assert_eq!(entry_time(&serde_json::json!(1_800_000_000)), Some(t));
        assert_eq!(entry_time(&serde_json::json!(-1)), None);
        assert_eq!(entry_time(&serde_json::json!("yesterday")), None);
    }
}

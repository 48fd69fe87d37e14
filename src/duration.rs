//! Durations as operators write them: `30s`, `5m`, `1h`, `7d`; and moments
//! as tend writes them.

use std::time::{Duration, SystemTime};

/// A duration parsed from `30s`/`5m`/`1h`/`7d` (and combinations such as `1h30m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl std::str::FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.is_empty() {
            return Err("empty duration".into());
        }
        humantime::parse_duration(t)
            .map(Dur)
            .map_err(|_| format!("invalid duration {s:?}: use forms like 30s, 5m, 1h, 7d"))
    }
}

impl<'de> serde::Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A moment as status, explanations and the page write it: RFC 3339 in UTC,
/// to the second (`2024-05-01T10:00:00Z`).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Renders a duration compactly for tables (`3d4h`, `5m12s`, `0s`).
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, mins, secs) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    match () {
        _ if days > 0 => format!("{days}d{hours}h"),
        _ if hours > 0 => format!("{hours}h{mins}m"),
        _ if mins > 0 => format!("{mins}m{secs}s"),
        _ => format!("{secs}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_operator_forms() {
        assert_eq!("30s".parse::<Dur>().unwrap().0, Duration::from_secs(30));
        assert_eq!("5m".parse::<Dur>().unwrap().0, Duration::from_secs(300));
        assert_eq!(
            "7d".parse::<Dur>().unwrap().0,
            Duration::from_secs(7 * 86400)
        );
        assert!("soon".parse::<Dur>().is_err());
        assert_eq!(short(Duration::from_secs(90061)), "1d1h");
    }
}

//! Where a staged rollout lives in etcd, and what its values hold. Every
//! key is under `tend/rollout/`:
//! - `alive/<host>`: `{"labels": {...}}`, under the host's lease: a host
//!   silent past its lease drops out.
//! - `rev/<rev>/canaries`: `["web-1"]`, the canaries of revision `<rev>`,
//!   chosen once by the first host that has the revision.
//! - `rev/<rev>/report/<host>`: a canary's outcome after each pass,
//!   `{"state": "converged"|"failed"|"pending", "reason", "soaked"}`, under
//!   its lease.
//! - `rev/<rev>/promoted`: present once the revision may be applied by all.
//! - `rev/<rev>/halted`: `{"revision", "reason", "host"}`, present once a
//!   canary failed with it.
//!
//! Everything is per revision: a newer commit has none of these keys, so
//! it starts again from the canaries, and a halt stops only its revision.
//! A host reads only `alive/` and its wanted revision's keys; the keys of
//! revisions older than the [`KEPT`] newest are deleted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const PREFIX: &str = "tend/rollout/";

pub fn alive(host: &str) -> String {
    format!("{PREFIX}alive/{host}")
}

pub fn canaries(rev: &str) -> String {
    format!("{}canaries", rev_prefix(rev))
}

pub fn report(rev: &str, host: &str) -> String {
    format!("{}report/{host}", rev_prefix(rev))
}

pub fn promoted(rev: &str) -> String {
    format!("{}promoted", rev_prefix(rev))
}

pub fn halted(rev: &str) -> String {
    format!("{}halted", rev_prefix(rev))
}

/// Where every key of one revision lives.
pub fn rev_prefix(rev: &str) -> String {
    format!("{}{rev}/", revs_prefix())
}

/// Where the keys of every revision live.
pub fn revs_prefix() -> String {
    format!("{PREFIX}rev/")
}

/// The alive key of every host.
pub fn alive_prefix() -> String {
    format!("{PREFIX}alive/")
}

/// How many revisions keep their keys besides the one a host wants: the
/// newest, by when their first key was made. A host still on an older one
/// is far behind; it finds no keys and starts that revision's rollout
/// again from the canaries, which is safe.
pub const KEPT: usize = 8;

/// The revisions whose keys may go, given each key under [`revs_prefix`]
/// with its create revision: all but the [`KEPT`] newest and `wanted`.
pub fn superseded<'a>(
    created: impl IntoIterator<Item = (&'a str, i64)>,
    wanted: Option<&str>,
) -> Vec<String> {
    let revs = revs_prefix();
    let mut first: BTreeMap<&str, i64> = BTreeMap::new();
    for (key, at) in created {
        let Some(rev) = key
            .strip_prefix(revs.as_str())
            .and_then(|k| k.split('/').next())
            .filter(|r| !r.is_empty())
        else {
            continue;
        };
        let e = first.entry(rev).or_insert(at);
        *e = (*e).min(at);
    }
    let mut by_age: Vec<(&str, i64)> = first.into_iter().collect();
    by_age.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by_age
        .into_iter()
        .skip(KEPT)
        .filter(|(rev, _)| Some(*rev) != wanted)
        .map(|(rev, _)| rev.to_string())
        .collect()
}

/// The value of an `alive/<host>` key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alive {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// How a canary's passes over a revision went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Every resource in sync, no hook failed.
    Converged,
    /// A resource Failed or Blocked, a hook failed, or the declarations
    /// have problems: the rollout halts.
    Failed,
    /// Neither yet (not applied, or some resource still on its way).
    Pending,
}

/// The value of a `rev/<rev>/report/<host>` key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub state: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Converged without a break for the soak time, by the canary's clock.
    #[serde(default)]
    pub soaked: bool,
}

/// The value of a `rev/<rev>/halted` key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Halt {
    pub revision: String,
    pub reason: String,
    pub host: String,
}

/// What etcd holds of one revision's rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevState {
    pub canaries: Option<Vec<String>>,
    pub reports: BTreeMap<String, Report>,
    pub promoted: bool,
    pub halted: Option<Halt>,
}

/// Everything under the prefix, read at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub alive: BTreeMap<String, Alive>,
    pub revs: BTreeMap<String, RevState>,
}

impl Snapshot {
    /// The snapshot of `kvs` (keys with the prefix, and their values); a
    /// value that does not parse is left out, with a warning.
    pub fn from_kvs<'a>(kvs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Snapshot {
        let mut s = Snapshot::default();
        for (key, value) in kvs {
            let Some(rest) = key.strip_prefix(PREFIX) else {
                continue;
            };
            let parts: Vec<&str> = rest.split('/').collect();
            let ok = match parts.as_slice() {
                ["alive", host] => parse(value).map(|a| {
                    s.alive.insert(host.to_string(), a);
                }),
                ["rev", rev, "canaries"] => parse(value).map(|c| {
                    s.revs.entry(rev.to_string()).or_default().canaries = Some(c);
                }),
                ["rev", rev, "report", host] => parse(value).map(|r| {
                    let e = s.revs.entry(rev.to_string()).or_default();
                    e.reports.insert(host.to_string(), r);
                }),
                ["rev", rev, "promoted"] => {
                    s.revs.entry(rev.to_string()).or_default().promoted = true;
                    Ok(())
                }
                ["rev", rev, "halted"] => {
                    // A halt that does not read is a halt all the same:
                    // failing open would apply what someone stopped.
                    let read = parse(value);
                    let h = read.as_ref().ok().cloned().unwrap_or_else(|| Halt {
                        revision: rev.to_string(),
                        reason: "the halt key does not read as one (see `tend rollout resume`)"
                            .into(),
                        host: String::new(),
                    });
                    s.revs.entry(rev.to_string()).or_default().halted = Some(h);
                    read.map(drop)
                }
                _ => Ok(()),
            };
            if let Err(e) = ok {
                tracing::warn!(key, error = %e, "rollout: a value that does not parse is left out");
            }
        }
        s
    }

    pub fn rev(&self, rev: &str) -> RevState {
        self.revs.get(rev).cloned().unwrap_or_default()
    }
}

fn parse<T: serde::de::DeserializeOwned>(value: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_but_the_newest_revisions_and_the_wanted_one_are_superseded() {
        let keys: Vec<(String, i64)> = (0..12)
            .flat_map(|i| {
                [
                    (canaries(&format!("r{i:02}")), 100 + 10 * i),
                    (report(&format!("r{i:02}"), "web-1"), 105 + 10 * i),
                ]
            })
            .chain([(alive("web-1"), 1), (format!("{PREFIX}rev/"), 2)])
            .collect();
        let all = keys.iter().map(|(k, at)| (k.as_str(), *at));
        // Twelve revisions, r11 the newest: r00..r03 go, but r01 is wanted.
        assert_eq!(superseded(all.clone(), Some("r01")), ["r03", "r02", "r00"]);
        assert_eq!(superseded(all, None).len(), 12 - KEPT);
        let few = keys.iter().take(2 * KEPT).map(|(k, at)| (k.as_str(), *at));
        assert!(superseded(few, None).is_empty());
    }

    #[test]
    fn a_snapshot_reads_each_key_and_leaves_out_what_does_not_parse() {
        let halt = serde_json::to_vec(&Halt {
            revision: "r1".into(),
            reason: "hook failed".into(),
            host: "a".into(),
        })
        .unwrap();
        let kvs: Vec<(String, Vec<u8>)> = vec![
            (alive("a"), br#"{"labels":{"zone":"a"}}"#.to_vec()),
            (alive("b"), b"not json".to_vec()),
            (canaries("r1"), br#"["a"]"#.to_vec()),
            (
                report("r1", "a"),
                br#"{"state":"converged","soaked":true}"#.to_vec(),
            ),
            (halted("r1"), halt),
            (promoted("r2"), b"r2".to_vec()),
            ("tend/other".into(), b"x".to_vec()),
        ];
        let s = Snapshot::from_kvs(kvs.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        assert_eq!(s.alive.len(), 1);
        assert_eq!(s.alive["a"].labels["zone"], "a");
        let r1 = s.rev("r1");
        assert_eq!(r1.canaries, Some(vec!["a".to_string()]));
        assert!(r1.reports["a"].soaked);
        assert_eq!(r1.halted.unwrap().reason, "hook failed");
        assert!(!r1.promoted);
        assert!(s.rev("r2").promoted);
        assert_eq!(s.rev("r3"), RevState::default());
        // A halt that does not read still halts.
        let kvs = [(halted("r4"), b"{oops".to_vec())];
        let s = Snapshot::from_kvs(kvs.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        let h = s.rev("r4").halted.expect("halted");
        assert!(h.reason.contains("does not read"), "{h:?}");
    }
}

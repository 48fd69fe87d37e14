//! `ha:` (SPEC §11): replicas of one tend with the same config elect one
//! writer on an etcd cluster, `{etcd: {endpoints, auth, tls, timeout},
//! election: NAME, lease_ttl: 10s}`.

use std::time::Duration;

use serde::Deserialize;

use crate::duration::Dur;
use crate::target::etcd::ClusterConfig;

/// `ha:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaConfig {
    pub etcd: ClusterConfig,
    pub election: String,
    pub lease_ttl: Option<Dur>,
}

/// The election this replica campaigns in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaSettings {
    pub etcd: ClusterConfig,
    /// The election's name: replicas campaigning under it elect one leader.
    pub election: String,
    /// The lease the leader holds; a leader that cannot renew it stops
    /// writing after half of it, before it can expire.
    pub lease_ttl: Duration,
}

/// The shortest lease: etcd grants no less than about 1.5 s by default,
/// and renewing every third of it must stay meaningful.
const MIN_TTL: Duration = Duration::from_secs(2);

/// The settings, or each problem with the dotted key whose line it names.
pub fn resolve(file: Option<HaConfig>) -> Result<Option<HaSettings>, Vec<(String, String)>> {
    let Some(c) = file else {
        return Ok(None);
    };
    let mut problems: Vec<(String, String)> = c
        .etcd
        .validate()
        .into_iter()
        .map(|m| ("ha.etcd".to_string(), format!("ha.etcd: {m}")))
        .collect();
    if c.election.trim().is_empty() {
        problems.push(("ha.election".into(), "ha.election: is empty".into()));
    }
    let lease_ttl = c.lease_ttl.map_or(Duration::from_secs(10), |d| d.0);
    if lease_ttl < MIN_TTL || lease_ttl.subsec_nanos() != 0 {
        problems.push((
            "ha.lease_ttl".into(),
            format!(
                "ha.lease_ttl: {} must be whole seconds, at least {}s",
                humantime::format_duration(lease_ttl),
                MIN_TTL.as_secs()
            ),
        ));
    }
    match problems.is_empty() {
        true => Ok(Some(HaSettings {
            etcd: c.etcd,
            election: c.election,
            lease_ttl,
        })),
        false => Err(problems),
    }
}

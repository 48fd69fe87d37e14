//! `ha:` (SPEC §11): replicas of one tend with the same config elect one
//! writer on an etcd cluster, `{etcd: {endpoints, auth, tls, timeout},
//! election: NAME, lease_ttl: 10s}`.

use std::time::Duration;

use serde::Deserialize;

use super::problem::Problems;
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

/// A lease as `key` gives it (10 s by default): whole seconds, at least
/// [`MIN_TTL`]; otherwise a problem at `key`. The fleet's lease takes the
/// same rule.
pub(super) fn lease_ttl(key: &str, given: Option<Dur>, problems: &mut Problems) -> Duration {
    let ttl = given.map_or(Duration::from_secs(10), |d| d.0);
    if ttl < MIN_TTL || ttl.subsec_nanos() != 0 {
        problems.at(
            key,
            format!(
                "{} must be whole seconds, at least {}s",
                humantime::format_duration(ttl),
                MIN_TTL.as_secs()
            ),
        );
    }
    ttl
}

/// The settings; each problem is added to `problems` with the dotted key
/// whose line it names.
pub(super) fn resolve(file: Option<HaConfig>, problems: &mut Problems) -> Option<HaSettings> {
    let c = file?;
    let before = problems.len();
    for (key, message) in c.etcd.validate() {
        problems.at(format!("ha.etcd.{key}"), message);
    }
    if c.election.trim().is_empty() {
        problems.at("ha.election", "is empty");
    }
    let lease_ttl = lease_ttl("ha.lease_ttl", c.lease_ttl, problems);
    (problems.len() == before).then_some(HaSettings {
        etcd: c.etcd,
        election: c.election,
        lease_ttl,
    })
}

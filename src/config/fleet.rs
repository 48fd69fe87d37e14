//! `fleet:` (SPEC §12): hosts of one repository coordinate through an etcd
//! cluster, `{etcd: {endpoints, auth, tls, timeout}, lease_ttl: 10s,
//! rollout: {canary: {names, labels, count}, soak: 5m}}`.

use std::time::Duration;

use serde::Deserialize;

use super::problem::Problems;
use crate::duration::Dur;
use crate::model::host::HostSelector;
use crate::target::etcd::ClusterConfig;

/// `fleet:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    pub etcd: ClusterConfig,
    /// The lease under which a host's status (and the poller's role) is
    /// kept: a host silent this long drops out.
    pub lease_ttl: Option<Dur>,
    pub rollout: Option<RolloutConfig>,
}

/// `fleet.rollout` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutConfig {
    pub canary: CanaryConfig,
    pub soak: Option<Dur>,
}

/// `fleet.rollout.canary` as written: a host selector and how many of the
/// hosts it picks take a new revision first.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryConfig {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub count: Option<u32>,
}

/// The fleet this host belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    pub etcd: ClusterConfig,
    pub lease_ttl: Duration,
    /// `None`: every host applies a new revision as soon as it has it.
    pub rollout: Option<RolloutSettings>,
}

/// A staged rollout: the canaries apply a new revision first and stay
/// converged for `soak` before the rest of the fleet applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutSettings {
    /// Which hosts may be canaries.
    pub canary: HostSelector,
    /// How many of them are (the first by name among those alive).
    pub count: u32,
    pub soak: Duration,
}

/// The settings; each problem is added to `problems` with the dotted key
/// whose line it names.
pub(super) fn resolve(file: Option<FleetConfig>, problems: &mut Problems) -> Option<FleetSettings> {
    let c = file?;
    let before = problems.len();
    for (key, message) in c.etcd.validate() {
        problems.at(format!("fleet.etcd.{key}"), message);
    }
    let lease_ttl = super::ha::lease_ttl("fleet.lease_ttl", c.lease_ttl, problems);
    let rollout = c.rollout.map(|r| {
        let count = r.canary.count.unwrap_or(1);
        if count == 0 {
            problems.at("fleet.rollout.canary.count", "must be at least 1");
        }
        RolloutSettings {
            canary: HostSelector {
                names: r.canary.names,
                labels: r.canary.labels,
            },
            count,
            soak: r.soak.map_or(Duration::from_secs(300), |d| d.0),
        }
    });
    (problems.len() == before).then_some(FleetSettings {
        etcd: c.etcd,
        lease_ttl,
        rollout,
    })
}

//! Fleets (SPEC §12): hosts of one repository coordinate through an etcd
//! cluster. Each host publishes its status under `tend/fleet/<host>` with
//! a lease ([`report`]), `tend fleet status` reads them all ([`status`]),
//! and one elected host polls the source for the fleet, the others
//! fetching only when the revision it publishes changes ([`revision`]);
//! with `fleet.rollout`, a new revision reaches the canaries first
//! ([`rollout`]).

pub mod report;
pub mod revision;
pub mod rollout;
pub mod status;

/// Where every fleet key lives.
pub const PREFIX: &str = "tend/fleet/";

/// The newest revision id the fleet's poller fetched.
pub const REVISION_KEY: &str = "tend/fleet/revision";

/// The election of the one host that polls the source for the fleet.
pub const POLLER_ELECTION: &str = "tend/fleet-poller";

//! Fleets (SPEC §12): hosts of one repository that coordinate through an
//! etcd cluster.

pub mod rollout;

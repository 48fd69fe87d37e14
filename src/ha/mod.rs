//! High availability (SPEC §11): replicas of one tend with the same config
//! elect one writer on an etcd cluster. The elector ([`elect`]) keeps this
//! replica's role in the shared [`Fence`](crate::model::role::Fence) the
//! pass and the targets read; the daemon starts it and runs a full pass
//! when this replica becomes the leader.

mod elect;

pub use elect::{Elector, OnLead};

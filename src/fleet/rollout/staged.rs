//! The rollout's part of the daemon's loop: the coordinator, the revision
//! held back, and the status last recorded. The loop's use of it is in
//! `src/daemon/rollout.rs`.

use super::Coordinator;
use crate::config::Settings;
use crate::reconcile::trust;
use crate::status::RolloutStatus;

/// Why the rollout's coordinator did not start.
#[derive(Debug, thiserror::Error)]
#[error("fleet.rollout: {0}")]
pub struct StartError(#[source] crate::target::etcd::ClientError);

pub struct Staged {
    pub coordinator: Coordinator,
    /// The admitted revision held back, applied once the verdict allows.
    pub held: Option<trust::Admitted>,
    /// The status last recorded in the ledger.
    pub recorded: Option<RolloutStatus>,
}

impl Staged {
    /// The rollout's part, when `fleet.rollout` is set; `Err` when its
    /// coordinator cannot start (then nothing may be applied unstaged).
    pub fn start(settings: &Settings) -> Result<Option<Staged>, StartError> {
        let Some(fleet) = settings.fleet.as_ref() else {
            return Ok(None);
        };
        let Some(r) = fleet.rollout.as_ref() else {
            return Ok(None);
        };
        let coordinator = Coordinator::start(fleet, r, &settings.host).map_err(StartError)?;
        Ok(Some(Staged {
            coordinator,
            held: None,
            recorded: None,
        }))
    }
}

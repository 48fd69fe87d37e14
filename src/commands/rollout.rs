//! `tend rollout resume`: lifts a halted staged rollout (SPEC §12).

use std::process::ExitCode;

use super::{outln, Because, Cause, Failure};
use crate::config::Settings;

pub fn resume(settings: &Settings) -> Result<ExitCode, Failure> {
    let Some(fleet) = settings.fleet.as_ref().filter(|f| f.rollout.is_some()) else {
        return Err(Failure::says(
            Cause::Usage,
            "the config has no fleet.rollout: there is no rollout to resume",
        ));
    };
    let lifted = crate::fleet::rollout::resume::resume(fleet)
        .because(Cause::Fleet)
        .map_err(|f| f.context("rollout resume"))?;
    if lifted.is_empty() {
        outln!("no rollout is halted");
        return Ok(ExitCode::from(1));
    }
    for h in lifted {
        outln!(
            "resumed {}: halted by {} ({}); promoted, every host applies it",
            &h.revision[..h.revision.len().min(12)],
            h.host,
            h.reason
        );
    }
    Ok(ExitCode::SUCCESS)
}

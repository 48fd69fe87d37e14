//! `tend rollout resume`: lifts a halted staged rollout (SPEC §12).

use std::process::ExitCode;

use super::{fail, outln};
use crate::config::Settings;

pub fn resume(settings: &Settings) -> ExitCode {
    let Some(fleet) = settings.fleet.as_ref().filter(|f| f.rollout.is_some()) else {
        return fail("the config has no fleet.rollout: there is no rollout to resume");
    };
    match crate::fleet::rollout::resume::resume(fleet) {
        Ok(lifted) if lifted.is_empty() => {
            outln!("no rollout is halted");
            ExitCode::from(1)
        }
        Ok(lifted) => {
            for h in lifted {
                outln!(
                    "resumed {}: halted by {} ({}); promoted, every host applies it",
                    &h.revision[..h.revision.len().min(12)],
                    h.host,
                    h.reason
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(format!("rollout resume: {e}")),
    }
}

//! A staged rollout through etcd (SPEC §12, `fleet.rollout`): a new
//! revision is applied first by the canaries, and by the rest of the fleet
//! once the canaries stayed converged for the soak; a canary that fails or
//! goes silent halts it for everyone, until a newer commit or `tend
//! rollout resume`.
//!
//! [`keys`] is the layout in etcd, [`decide`] the rule (pure),
//! [`coordinator`] the task that reads and writes the keys beside the
//! daemon's loop, [`resume`] what `tend rollout resume` does.

pub mod coordinator;
pub mod decide;
pub mod keys;
pub mod resume;
pub mod staged;

pub use coordinator::{Coordinator, View};
pub use decide::{Held, Verdict};
pub use keys::{Halt, Health};
pub use staged::Staged;

use crate::ledger::State;
use crate::reconcile::PassReport;
use crate::status::RolloutStatus;

/// How a pass went, as a canary reports it: `Failed` when a hook failed,
/// the declarations have problems or a resource is Failed or Blocked
/// (with the first reason), `Converged` when everything in its scope is in
/// sync, `Pending` otherwise.
pub fn health(report: &PassReport) -> (Health, Option<String>) {
    let failed = |o: &&crate::reconcile::Outcome| matches!(o.state, State::Failed | State::Blocked);
    // A hook that failed marks what it was for Failed with its reason, and
    // so does one waiting for its retry (it did not run in this pass): a
    // hook is judged by whether it ran and failed here, not by those marks.
    let by_hook =
        |o: &crate::reconcile::Outcome| o.reason.as_deref().is_some_and(|r| r.starts_with("hook "));
    let bad = report
        .outcomes
        .iter()
        .find(|(_, o)| failed(o) && !by_hook(o));
    if let Some((hook, _)) = report.hooks.iter().find(|(_, ok)| !ok) {
        let why = report
            .outcomes
            .values()
            .find(|o| failed(o) && by_hook(o))
            .and_then(|o| o.reason.as_deref());
        return (
            Health::Failed,
            Some(match why {
                Some(why) => {
                    let why = why.strip_prefix(&format!("hook {hook}: ")).unwrap_or(why);
                    format!("hook {hook} failed: {why}")
                }
                None => format!("hook {hook} failed"),
            }),
        );
    }
    if let Some(p) = report.problems.first() {
        return (Health::Failed, Some(format!("invalid declaration: {p}")));
    }
    if let Some((id, o)) = bad {
        let state = crate::status::state_name(o.state);
        let why = o.reason.as_deref().unwrap_or("no reason given");
        return (Health::Failed, Some(format!("{id} {state}: {why}")));
    }
    match report.converged {
        true => (Health::Converged, None),
        false => (Health::Pending, None),
    }
}

/// The status of a host that has `view`.
pub fn status(view: &View) -> RolloutStatus {
    let held = view.wanted != view.applied;
    let at = |state: &str, reason: Option<String>| RolloutStatus {
        state: state.to_string(),
        revision: view.wanted.clone(),
        reason,
        host: None,
    };
    if let Some(h) = &view.halt {
        return RolloutStatus {
            state: "halted".into(),
            revision: Some(h.revision.clone()),
            reason: Some(h.reason.clone()),
            host: Some(h.host.clone()),
        };
    }
    match &view.verdict {
        Verdict::Hold(Held::Halted(h)) => RolloutStatus {
            state: "halted".into(),
            revision: Some(h.revision.clone()),
            reason: Some(h.reason.clone()),
            host: Some(h.host.clone()),
        },
        Verdict::Hold(Held::Unreachable(why)) => at(
            "waiting",
            Some(match held {
                true => format!("etcd unreachable: {why}; the applied revision stays"),
                false => format!("etcd unreachable: {why}"),
            }),
        ),
        Verdict::Hold(Held::NoCanary) => at("pending", Some("no canary alive".into())),
        Verdict::Hold(Held::Soaking) => at("pending", Some("canaries soaking".into())),
        Verdict::Apply if view.canary => at(
            "canary",
            Some(match view.soaked {
                true => "soaked".into(),
                false => "soaking".into(),
            }),
        ),
        Verdict::Apply => at("promoted", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(verdict: Verdict, canary: bool, halt: Option<Halt>) -> View {
        View {
            wanted: Some("b".repeat(40)),
            applied: Some("a".repeat(40)),
            verdict,
            canary,
            halt,
            soaked: false,
        }
    }

    #[test]
    fn each_verdict_has_its_status_line() {
        let line = |v: View| status(&v).line();
        assert_eq!(
            line(view(Verdict::Hold(Held::Soaking), false, None)),
            "pending bbbbbbbbbbbb (canaries soaking)"
        );
        let halt = Halt {
            revision: "b".repeat(40),
            reason: "hook check failed".into(),
            host: "web-1".into(),
        };
        // The canary keeps applying a halted revision; it says halted too.
        assert_eq!(
            line(view(Verdict::Apply, true, Some(halt))),
            "halted at bbbbbbbbbbbb: hook check failed (canary web-1)"
        );
        let down = view(
            Verdict::Hold(Held::Unreachable("no answer".into())),
            false,
            None,
        );
        assert_eq!(
            line(down),
            "waiting: etcd unreachable: no answer; the applied revision stays"
        );
        assert_eq!(
            line(view(Verdict::Apply, true, None)),
            "canary for bbbbbbbbbbbb (soaking)"
        );
        assert_eq!(
            line(view(Verdict::Apply, false, None)),
            "bbbbbbbbbbbb promoted"
        );
    }
}

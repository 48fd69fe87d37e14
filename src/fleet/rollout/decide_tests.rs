use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::model::host::HostSelector;

fn settings(count: u32) -> RolloutSettings {
    RolloutSettings {
        canary: HostSelector {
            names: Vec::new(),
            labels: BTreeMap::from([("zone".into(), "a".into())]),
        },
        count,
        soak: Duration::from_secs(3),
    }
}

fn host(name: &str) -> Host {
    Host {
        name: name.into(),
        labels: BTreeMap::new(),
    }
}

/// Hosts `c1`, `c2` in zone a (canaries), `n1`, `n2` elsewhere.
fn fleet() -> Snapshot {
    let mut s = Snapshot::default();
    for (name, zone) in [("c2", "a"), ("c1", "a"), ("n1", "b"), ("n2", "b")] {
        s.alive.insert(
            name.into(),
            Alive {
                labels: BTreeMap::from([("zone".into(), zone.into())]),
            },
        );
    }
    s
}

fn local(wanted: &str, applied: &str, report: Option<Report>) -> Local {
    Local {
        wanted: Some(wanted.into()),
        applied: Some(applied.into()),
        report,
    }
}

fn converged(soaked: bool) -> Report {
    Report {
        state: Health::Converged,
        reason: None,
        soaked,
    }
}

#[test]
fn canaries_are_the_first_picked_by_name_among_the_alive() {
    let s = fleet();
    assert_eq!(pick_canaries(&s.alive, &settings(1)), ["c1"]);
    assert_eq!(pick_canaries(&s.alive, &settings(5)), ["c1", "c2"]);
}

#[test]
fn a_new_revision_gets_its_canaries_and_is_held_elsewhere() {
    let s = fleet();
    let d = decide(&s, &host("n1"), &settings(1), &local("r2", "r1", None));
    assert_eq!(d.verdict, Verdict::Hold(Held::Soaking));
    assert_eq!(
        d.writes,
        [Write::Canaries {
            rev: "r2".into(),
            hosts: vec!["c1".into()]
        }]
    );
    let d = decide(&s, &host("c1"), &settings(1), &local("r2", "r1", None));
    assert_eq!(d.verdict, Verdict::Apply);
    assert!(d.canary);
}

#[test]
fn without_a_canary_alive_nothing_is_applied_or_written() {
    let mut s = fleet();
    s.alive.retain(|n, _| n.starts_with('n'));
    let d = decide(&s, &host("n1"), &settings(1), &local("r2", "r1", None));
    assert_eq!(d.verdict, Verdict::Hold(Held::NoCanary));
    assert!(d.writes.is_empty());
}

#[test]
fn soaked_canaries_promote_and_then_everyone_applies() {
    let mut s = fleet();
    let rs = s.revs.entry("r2".into()).or_default();
    rs.canaries = Some(vec!["c1".into()]);
    // The canary reports its soak; seeing it, it promotes at once.
    let d = decide(
        &s,
        &host("c1"),
        &settings(1),
        &local("r2", "r2", Some(converged(true))),
    );
    assert!(d.writes.contains(&Write::Report {
        rev: "r2".into(),
        report: converged(true)
    }));
    assert!(d.writes.contains(&Write::Promote { rev: "r2".into() }));
    // Not soaked yet: the others hold.
    s.revs
        .get_mut("r2")
        .unwrap()
        .reports
        .insert("c1".into(), converged(false));
    let d = decide(&s, &host("n1"), &settings(1), &local("r2", "r1", None));
    assert_eq!(d.verdict, Verdict::Hold(Held::Soaking));
    assert!(d.writes.is_empty());
    s.revs.get_mut("r2").unwrap().promoted = true;
    let d = decide(&s, &host("n1"), &settings(1), &local("r2", "r1", None));
    assert_eq!(d.verdict, Verdict::Apply);
}

#[test]
fn a_failed_or_silent_canary_halts_and_a_newer_revision_starts_again() {
    let mut s = fleet();
    let rs = s.revs.entry("r2".into()).or_default();
    rs.canaries = Some(vec!["c1".into()]);
    let failed = Report {
        state: Health::Failed,
        reason: Some("hook check failed".into()),
        soaked: false,
    };
    let d = decide(
        &s,
        &host("c1"),
        &settings(1),
        &local("r2", "r2", Some(failed)),
    );
    // The canary keeps what it applies; it writes the halt.
    assert_eq!(d.verdict, Verdict::Apply);
    let halt = Halt {
        revision: "r2".into(),
        reason: "hook check failed".into(),
        host: "c1".into(),
    };
    assert!(d.writes.contains(&Write::Halt(halt.clone())));
    // The canary gone: any host halts.
    s.alive.remove("c1");
    let d = decide(&s, &host("n1"), &settings(1), &local("r2", "r1", None));
    let Verdict::Hold(Held::Halted(h)) = &d.verdict else {
        panic!("{d:?}")
    };
    assert!(h.reason.contains("c1 went silent"), "{h:?}");
    // Halted stays halted, promoted or not, for that revision only.
    s.revs.get_mut("r2").unwrap().halted = Some(halt.clone());
    let d = decide(&s, &host("n1"), &settings(1), &local("r2", "r1", None));
    assert_eq!(d.verdict, Verdict::Hold(Held::Halted(halt)));
    assert!(d.writes.is_empty());
    let d = decide(&s, &host("n1"), &settings(1), &local("r3", "r1", None));
    assert_eq!(d.verdict, Verdict::Hold(Held::Soaking));
    assert_eq!(
        d.writes,
        [Write::Canaries {
            rev: "r3".into(),
            hosts: vec!["c2".into()]
        }]
    );
}

#[test]
fn an_empty_canary_list_promotes_nothing() {
    let mut s = fleet();
    s.revs.entry("r2".into()).or_default().canaries = Some(Vec::new());
    for me in ["c1", "n1"] {
        let d = decide(&s, &host(me), &settings(1), &local("r2", "r1", None));
        assert_eq!(d.verdict, Verdict::Hold(Held::NoCanary), "{me}");
        assert!(d.writes.is_empty(), "{me}: {:?}", d.writes);
    }
}

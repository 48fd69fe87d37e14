//! A staged rollout through a real etcd (SPEC §12, `fleet.rollout`): five
//! `tend run` hosts on this machine, each with its own root, state dir and
//! `host.name`, one of them the canary by its label. A new revision reaches
//! the canary first and the others only once it stayed converged for the
//! soak; a canary whose hook fails, or that is killed, halts the rollout for
//! everyone; with etcd stopped nobody applies the held revision; `tend
//! rollout resume` lifts a halt.

mod util;

use std::sync::Mutex;

use util::etcd::{self, Etcd};
use util::host::Host;
use util::{can_run, tend_cmd, wait_until, Run, TestRepo};

/// Five daemons each: one test at a time, so the machine keeps up.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Generous: five daemons share two cores with the build.
const WAIT: u64 = 90;

fn etcd_here() -> bool {
    can_run(
        etcd::installed(),
        "etcd and etcdctl are not installed (etcd-server, etcd-client)",
    )
}

/// One host, not started: its own dir with root, state dir, config and
/// log.
fn new_host(name: &str, zone: &str, endpoint: &str, repo: &TestRepo) -> Host {
    let host = Host::new("tend-rollout-", name);
    // The hook fails when the applied file says "bad": the canary's
    // failing hook.
    host.configure(&format!(
        "host:\n  name: {name}\n  labels: {{zone: {zone}}}\n\
         fleet:\n  etcd: {{endpoints: [\"{endpoint}\"], timeout: 2s}}\n  lease_ttl: 5s\n\
         \x20 rollout:\n    canary: {{labels: {{zone: a}}, count: 1}}\n    soak: 3s\n\
         source:\n  repo: {}\n  on_change: check\n\
         hooks:\n  check: {{run: [sh, -c, \"! grep -q bad {}/app.conf\"]}}\n",
        repo.url(),
        host.root().display()
    ));
    host
}

fn start_host(host: &mut Host, repo: &TestRepo) {
    let mut c = host.run_command();
    c.args(["--interval", "1s", "--mirror", "--path", "site", "--repo"])
        .arg(repo.url())
        .arg("--root")
        .arg(host.root());
    host.start(c);
}

/// What its root holds of the declared file.
fn app_conf(host: &Host) -> Option<String> {
    std::fs::read_to_string(host.root().join("app.conf")).ok()
}

/// The revision its ledger says it applied.
fn applied(host: &Host) -> Option<String> {
    host.status()["source"]["applied_revision"]
        .as_str()
        .map(String::from)
}

/// Its `rollout:` status line.
fn rollout_line(host: &Host) -> String {
    host.status_text()
        .lines()
        .find(|l| l.starts_with("rollout: "))
        .unwrap_or("")
        .to_string()
}

/// A repository, an etcd member and five hosts: `canary` in zone a, the
/// four others in zone b; all started, all on the first revision.
struct Fleet {
    repo: TestRepo,
    etcd: Etcd,
    hosts: Vec<Host>,
    v1: String,
}

impl Fleet {
    fn start() -> Fleet {
        let repo = TestRepo::new();
        repo.write("site/app.conf", "v1\n");
        let v1 = repo.commit("v1");
        let etcd = Etcd::start();
        let mut hosts = vec![new_host("canary", "a", &etcd.endpoint(), &repo)];
        for i in 1..=4 {
            hosts.push(new_host(&format!("host-{i}"), "b", &etcd.endpoint(), &repo));
        }
        for h in &mut hosts {
            start_host(h, &repo);
        }
        let f = Fleet {
            repo,
            etcd,
            hosts,
            v1,
        };
        // The first revision goes through its rollout too.
        f.wait_all_on(&f.v1.clone(), "v1\n");
        f
    }

    fn canary(&self) -> &Host {
        &self.hosts[0]
    }

    fn others(&self) -> &[Host] {
        &self.hosts[1..]
    }

    fn commit(&self, content: &str) -> String {
        self.repo.write("site/app.conf", content);
        self.repo.commit(content.trim())
    }

    fn wait_all_on(&self, rev: &str, content: &str) {
        for h in &self.hosts {
            assert!(
                wait_until(WAIT, || applied(h).as_deref() == Some(rev)
                    && app_conf(h).as_deref() == Some(content)),
                "{} never applied {rev}: {:?}\n{}\n{}",
                h.name,
                h.status_text(),
                h.log(),
                self.canary().log()
            );
        }
    }

    /// No host but the canary applied `content`.
    fn others_never_applied(&self, content: &str) {
        for h in self.others() {
            assert_ne!(app_conf(h).as_deref(), Some(content), "{}", h.name);
        }
    }

    fn wait_all_say(&self, what: &[&str]) {
        for h in &self.hosts {
            assert!(
                wait_until(WAIT, || {
                    let line = rollout_line(h);
                    what.iter().all(|w| line.contains(w))
                }),
                "{}: {:?} not in {:?}\n{}",
                h.name,
                what,
                rollout_line(h),
                h.log()
            );
        }
    }
}

fn short(rev: &str) -> &str {
    &rev[..12]
}

#[test]
fn a_good_commit_reaches_the_canary_first_and_the_others_after_the_soak() {
    if !etcd_here() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fleet::start();
    let v2 = f.commit("v2\n");
    let canary = f.canary();
    assert!(
        wait_until(WAIT, || applied(canary).as_deref() == Some(v2.as_str())),
        "{}",
        canary.log()
    );
    // The canary applies it; every other host holds it, still on v1, and
    // says so.
    for h in f.others() {
        assert_eq!(applied(h).as_deref(), Some(f.v1.as_str()), "{}", h.name);
        assert_eq!(app_conf(h).as_deref(), Some("v1\n"), "{}", h.name);
    }
    for h in f.others() {
        assert!(
            wait_until(WAIT, || {
                let line = rollout_line(h);
                line.contains(&format!("pending {}", short(&v2)))
                    && line.contains("canaries soaking")
                    || applied(h).as_deref() == Some(v2.as_str())
            }),
            "{}: {}",
            h.name,
            rollout_line(h)
        );
    }
    f.wait_all_on(&v2, "v2\n");
    assert!(f
        .etcd
        .get(&format!("tend/rollout/rev/{v2}/promoted"))
        .is_some());
    f.wait_all_say(&["promoted"]);
    // A non-canary applied only after the promotion: its log says it held
    // the revision first.
    for h in f.others() {
        let log = h.log();
        let line_of = |what: &str| {
            log.lines()
                .position(|l| l.contains(what) && l.contains(v2.as_str()))
        };
        let held = line_of("revision held until its canaries soaked");
        let applied = line_of("new revision");
        assert!(held.is_some() && held < applied, "{}\n{log}", h.name);
    }
}

#[test]
fn a_failing_hook_on_the_canary_halts_everyone_and_a_fix_rolls_out() {
    if !etcd_here() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fleet::start();
    let bad = f.commit("bad\n");
    f.wait_all_say(&[
        &format!("halted at {}", short(&bad)),
        "hook check failed",
        "(canary canary)",
    ]);
    assert_eq!(app_conf(f.canary()).as_deref(), Some("bad\n"));
    for h in f.others() {
        assert_eq!(applied(h).as_deref(), Some(f.v1.as_str()), "{}", h.name);
    }
    f.others_never_applied("bad\n");
    let halted = f
        .etcd
        .get(&format!("tend/rollout/rev/{bad}/halted"))
        .expect("the halt is in etcd");
    assert!(halted.contains("hook check failed"), "{halted}");
    for h in &f.hosts {
        assert_eq!(
            h.metric("tend_rollout_halted", &[]),
            Some(1.0),
            "{}",
            h.name
        );
    }
    assert_eq!(f.hosts[1].metric("tend_rollout_pending", &[]), Some(1.0));
    let v3 = f.commit("v3\n");
    f.wait_all_on(&v3, "v3\n");
    f.others_never_applied("bad\n");
    for h in &f.hosts {
        assert!(
            wait_until(WAIT, || h.metric("tend_rollout_halted", &[]) == Some(0.0)),
            "{}",
            h.name
        );
    }
}

#[test]
fn resume_lifts_a_halt_and_every_host_applies_the_revision() {
    if !etcd_here() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fleet::start();
    let bad = f.commit("bad\n");
    f.wait_all_say(&[&format!("halted at {}", short(&bad))]);
    f.others_never_applied("bad\n");
    let r = {
        let out = tend_cmd()
            .args(["rollout", "resume", "-c"])
            .arg(f.canary().config())
            .output()
            .unwrap();
        Run::from(out)
    };
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!("resumed {}", short(&bad))),
        "{r:?}"
    );
    f.wait_all_on(&bad, "bad\n");
    assert!(f
        .etcd
        .get(&format!("tend/rollout/rev/{bad}/halted"))
        .is_none());
    // Nothing left to lift: said so, exit 1.
    let out = tend_cmd()
        .args(["rollout", "resume", "-c"])
        .arg(f.canary().config())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no rollout is halted"));
}

#[test]
fn a_canary_killed_during_the_soak_halts_the_rollout() {
    if !etcd_here() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut f = Fleet::start();
    let v2 = f.commit("v2\n");
    {
        let canary = f.canary();
        assert!(
            wait_until(WAIT, || app_conf(canary).as_deref() == Some("v2\n")),
            "{}",
            canary.log()
        );
    }
    // Killed before it could soak (3 s by its own clock, from its first
    // converged pass): it never reports soaked.
    let promoted = f.etcd.get(&format!("tend/rollout/rev/{v2}/promoted"));
    f.hosts[0].kill9();
    assert!(
        promoted.is_none(),
        "promoted before the kill: the soak is too short here"
    );
    for h in f.others() {
        assert!(
            wait_until(WAIT, || {
                let line = rollout_line(h);
                line.contains(&format!("halted at {}", short(&v2)))
                    && line.contains("canary went silent")
            }),
            "{}: {}\n{}",
            h.name,
            rollout_line(h),
            h.log()
        );
    }
    // The halt is in etcd, and a halted revision is never promoted: it
    // does not proceed.
    let halted = f.etcd.get(&format!("tend/rollout/rev/{v2}/halted"));
    assert!(halted.is_some_and(|h| h.contains("went silent")));
    for h in f.others() {
        assert_eq!(applied(h).as_deref(), Some(f.v1.as_str()), "{}", h.name);
    }
    f.others_never_applied("v2\n");
    assert!(f
        .etcd
        .get(&format!("tend/rollout/rev/{v2}/promoted"))
        .is_none());
}

#[test]
fn with_etcd_stopped_no_host_applies_the_held_revision_until_it_returns() {
    if !etcd_here() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut f = Fleet::start();
    f.etcd.kill();
    let v2 = f.commit("v2\n");
    for h in &f.hosts {
        assert!(
            wait_until(WAIT, || rollout_line(h)
                .contains("waiting: etcd unreachable")),
            "{}: {}\n{}",
            h.name,
            rollout_line(h),
            h.log()
        );
    }
    // Every host fetched v2 by now (it polls each second and says it
    // waits): none applied it, the canary included.
    for h in &f.hosts {
        assert!(
            wait_until(WAIT, || {
                h.status()["source"]["fetched_revision"].as_str() == Some(v2.as_str())
            }),
            "{}",
            h.name
        );
        assert_eq!(applied(h).as_deref(), Some(f.v1.as_str()), "{}", h.name);
        assert_eq!(app_conf(h).as_deref(), Some("v1\n"), "{}", h.name);
    }
    f.etcd.resume();
    f.wait_all_on(&v2, "v2\n");
}

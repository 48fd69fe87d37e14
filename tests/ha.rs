//! High availability (SPEC §11) against a real three-member etcd cluster
//! (Debian's etcd-server) on loopback ports: two `tend run` replicas with
//! the same config elect one writer; a killed leader is replaced within
//! its lease and a pass; a paused leader that wakes up after its lease
//! writes nothing; one member down still writes, two down writes nothing.

mod util;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use util::etcd::{self, Cluster};
use util::host::Host;
use util::{can_run, tend_cmd, wait_until, TestRepo};

/// The lease: short, to keep the tests fast.
const TTL: Duration = Duration::from_secs(3);

fn etcd_here() -> bool {
    can_run(
        etcd::installed(),
        "etcd and etcdctl are not installed (etcd-server, etcd-client)",
    )
}

/// One `tend run` replica with the shared config and `host.name` its
/// own, against the shared repository.
fn replica(name: &str, repo: &TestRepo, shared: &Path) -> Host {
    let mut r = Host::new("tend-ha-", name);
    let text = std::fs::read_to_string(shared).unwrap();
    r.configure(&format!("{text}host:\n  name: {name}\n"));
    let mut c = r.run_command();
    c.args(["--interval", "1s", "--repo"]).arg(repo.url());
    r.start(c);
    r
}

/// `leader` or `follower`, as its status says.
fn role(r: &Host) -> String {
    r.status()["ha"]["role"].as_str().unwrap_or("").to_string()
}

fn leads(r: &Host) -> bool {
    role(r) == "leader"
}

/// `tend_ha_leader` as its /metrics says.
fn leader_metric(r: &Host) -> Option<f64> {
    r.metric("tend_ha_leader", &[])
}

/// The config both replicas share: an etcd target on `/app/` and `ha` on
/// the same cluster.
fn config(dir: &Path, cluster: &Cluster) -> PathBuf {
    let p = dir.join("tend.yaml");
    std::fs::write(
        &p,
        format!(
            "targets:\n  kv:\n    type: etcd\n    endpoints: {e}\n    prefix: /app/\n    timeout: 2s\nha:\n  etcd: {{endpoints: {e}, timeout: 2s}}\n  election: tend/test\n  lease_ttl: {}s\npolicy:\n  resync: 1h\n",
            TTL.as_secs(),
            e = cluster.endpoints(),
        ),
    )
    .unwrap();
    p
}

fn declare(repo: &TestRepo, value: &str) {
    repo.write(
        "kv.tend.yaml",
        format!("kind: key\nkey: greeting\nvalue: {value}\n"),
    );
    repo.commit(value);
}

/// Two replicas, `a` and `b`, once exactly one of them leads and the key
/// is `v1`: (leader, follower).
fn two_replicas(repo: &TestRepo, cfg: &Path, cluster: &Cluster) -> (Host, Host) {
    declare(repo, "v1");
    let a = replica("a", repo, cfg);
    let b = replica("b", repo, cfg);
    let settled = wait_until(30, || {
        let roles = [role(&a), role(&b)];
        roles.contains(&"leader".to_string())
            && roles.contains(&"follower".to_string())
            && cluster.any().get("/app/greeting").as_deref() == Some("v1")
    });
    assert!(
        settled,
        "no single leader converged:\na: {}\n{}\nb: {}\n{}",
        a.status(),
        a.log(),
        b.status(),
        b.log()
    );
    let (leader, follower) = if leads(&a) { (a, b) } else { (b, a) };
    let named = wait_until(10, || {
        follower.status()["ha"]["leader"] == leader.name.as_str()
    });
    assert!(named, "{}", follower.status());
    assert_eq!(leader.status()["ha"]["leader"], leader.name.as_str());
    assert_eq!(leader_metric(&leader), Some(1.0));
    let says = format!("role     follower (leader: {})", leader.name);
    assert!(
        follower.status_text().contains(&says),
        "{}",
        follower.status_text()
    );
    let says = format!("role     leader (leader: {})", leader.name);
    assert!(
        leader.status_text().contains(&says),
        "{}",
        leader.status_text()
    );
    assert_eq!(leader_metric(&follower), Some(0.0));
    // The page says it too.
    let page = |r: &Host| r.get("/").map(|p| p.text()).unwrap_or_default();
    let says = format!(
        "<h2>Role</h2><p class=\"muted\"><b>follower</b>: observes and records drift, writes nothing (leader: {})</p>",
        leader.name
    );
    assert!(page(&follower).contains(&says), "{}", page(&follower));
    let says = format!(
        "<h2>Role</h2><p class=\"ok\"><b>leader</b>: writes (leader: {})</p>",
        leader.name
    );
    assert!(page(&leader).contains(&says), "{}", page(&leader));
    (leader, follower)
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease_and_a_pass() {
    if !etcd_here() {
        return;
    }
    let cluster = Cluster::start(3);
    let repo = TestRepo::new();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &cluster);
    let (mut leader, follower) = two_replicas(&repo, &cfg, &cluster);
    // The follower observed the key but wrote nothing: one write of v1.
    assert_eq!(
        cluster.any().history("/app/greeting"),
        ["v1"],
        "{}",
        follower.log()
    );

    leader.kill9();
    declare(&repo, "v2");
    let killed = Instant::now();
    let took = wait_until(30, || {
        cluster.any().get("/app/greeting").as_deref() == Some("v2")
    });
    assert!(took, "the follower never took over:\n{}", follower.log());
    // The lease runs out, the follower wins, and its first pass (or the
    // next fetch, every second) writes the new revision.
    let within = TTL + Duration::from_secs(4);
    assert!(
        killed.elapsed() < within,
        "took {:?}, more than {within:?}:\n{}",
        killed.elapsed(),
        follower.log()
    );
    assert!(wait_until(5, || leads(&follower)), "{}", follower.status());
    assert_eq!(cluster.any().history("/app/greeting"), ["v1", "v2"]);
}

#[test]
fn a_paused_leader_writes_nothing_after_its_lease_ended() {
    if !etcd_here() {
        return;
    }
    let cluster = Cluster::start(3);
    let repo = TestRepo::new();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &cluster);
    let (old, new) = two_replicas(&repo, &cfg, &cluster);

    // Paused past its lease: the other leads, and writes a new revision
    // the paused one never saw (it still wants v1, and would restore it).
    old.signal(rustix::process::Signal::STOP);
    declare(&repo, "v2");
    let took = wait_until(30, || {
        cluster.any().get("/app/greeting").as_deref() == Some("v2")
    });
    assert!(took, "the other replica never took over:\n{}", new.log());
    assert!(wait_until(5, || leads(&new)), "{}", new.status());

    // Woken up, the old leader sees the key differ from what it declares
    // (its watch and its next pass), and must not write it back.
    let applied_before = old.log().matches("applied id=").count();
    old.signal(rustix::process::Signal::CONT);
    let followed = wait_until(15, || role(&old) == "follower");
    assert!(followed, "{}\n{}", old.status(), old.log());
    std::thread::sleep(TTL * 2);
    let history = cluster.history_revisions("/app/greeting");
    let values: Vec<&str> = history.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        values,
        ["v1", "v2"],
        "a write after the takeover:\n{history:?}\nold:\n{}",
        old.log()
    );
    assert_eq!(cluster.any().get("/app/greeting").as_deref(), Some("v2"));
    // It follows the new leader, and wrote nothing since it woke up.
    let s = old.status();
    assert_eq!(s["ha"]["role"], "follower", "{s}");
    assert!(
        wait_until(10, || old.status()["ha"]["leader"] == new.name.as_str()),
        "{}",
        old.status()
    );
    let applied = |log: &str| log.matches("applied id=").count();
    assert_eq!(applied(&old.log()), applied_before, "{}", old.log());
}

#[test]
fn one_member_down_still_writes_two_down_writes_nothing_until_they_return() {
    if !etcd_here() {
        return;
    }
    let mut cluster = Cluster::start(3);
    let repo = TestRepo::new();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &cluster);
    let (leader, follower) = two_replicas(&repo, &cfg, &cluster);

    cluster.members[0].kill();
    declare(&repo, "v2");
    let wrote = wait_until(30, || {
        cluster.any().get("/app/greeting").as_deref() == Some("v2")
    });
    assert!(
        wrote,
        "one member down, no write:\n{}\n{}",
        leader.log(),
        follower.log()
    );

    cluster.members[1].kill();
    declare(&repo, "v3");
    // Without a quorum neither replica can renew: both stop writing, and
    // the key is unknown to both.
    let unknown = wait_until(30, || {
        [&leader, &follower].iter().all(|r| {
            let s = r.status();
            s["resources"]
                .as_array()
                .and_then(|rs| rs.iter().find(|x| x["id"] == "kv/key/greeting"))
                .is_some_and(|x| x["state"] == "Unknown")
        })
    });
    assert!(
        unknown,
        "{}\n{}\n{}",
        leader.status(),
        follower.status(),
        leader.log()
    );
    assert!(wait_until(10, || !leads(&leader) && !leads(&follower)));

    cluster.members[0].resume();
    cluster.members[1].resume();
    let back = wait_until(60, || {
        cluster.any().get("/app/greeting").as_deref() == Some("v3")
    });
    assert!(back, "{}\n{}", leader.log(), follower.log());
    assert_eq!(
        cluster.any().history("/app/greeting"),
        ["v1", "v2", "v3"],
        "each revision written once"
    );
    assert!(wait_until(10, || leads(&leader) != leads(&follower)));
}

#[test]
fn every_member_restarted_in_turn_under_a_running_leader_loses_and_doubles_nothing() {
    if !etcd_here() {
        return;
    }
    let mut cluster = Cluster::start(3);
    let repo = TestRepo::new();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &cluster);
    let (a, b) = two_replicas(&repo, &cfg, &cluster);
    let mut want = vec!["v1".to_string()];
    for i in 0..3 {
        cluster.members[i].kill();
        std::thread::sleep(Duration::from_secs(1));
        cluster.members[i].resume();
        let v = format!("v{}", i + 2);
        declare(&repo, &v);
        let wrote = wait_until(30, || {
            cluster.any().get("/app/greeting").as_deref() == Some(v.as_str())
        });
        assert!(
            wrote,
            "after member {i} restarted:\n{}\n{}\n{}\n{}",
            a.status(),
            b.status(),
            a.log(),
            b.log()
        );
        want.push(v);
    }
    // A key changed by hand is restored by the leader's watch, which came
    // back by itself on every restart.
    cluster.any().put("/app/greeting", "by hand");
    let restored = wait_until(15, || {
        cluster.any().get("/app/greeting").as_deref() == Some("v4")
    });
    assert!(restored, "{}\n{}", a.log(), b.log());
    want.extend(["by hand".to_string(), "v4".to_string()]);
    assert_eq!(cluster.any().history("/app/greeting"), want);
    assert!(wait_until(10, || leads(&a) != leads(&b)));
}

#[test]
fn a_leader_stopped_by_sigterm_hands_over_before_its_lease_would_expire() {
    if !etcd_here() {
        return;
    }
    let cluster = Cluster::start(3);
    let repo = TestRepo::new();
    let dir = tempfile::tempdir().unwrap();
    // A long lease: only a revoked one hands over within the wait below.
    let long = std::fs::read_to_string(config(dir.path(), &cluster))
        .unwrap()
        .replace("lease_ttl: 3s", "lease_ttl: 30s");
    let cfg = dir.path().join("long.yaml");
    std::fs::write(&cfg, long).unwrap();
    let (mut leader, follower) = two_replicas(&repo, &cfg, &cluster);
    let stopped = Instant::now();
    let exited = leader.terminate(10);
    assert!(exited.is_some(), "{}", leader.log());
    assert!(
        wait_until(15, || leads(&follower)),
        "{}\n{}",
        follower.status(),
        follower.log()
    );
    assert!(stopped.elapsed() < Duration::from_secs(20));
    assert!(
        leader.log().contains("stopped campaigning"),
        "{}",
        leader.log()
    );
}

#[test]
fn tend_sync_with_ha_never_campaigns_and_writes_nothing() {
    if !etcd_here() {
        return;
    }
    let cluster = Cluster::start(1);
    let repo = TestRepo::new();
    declare(&repo, "v1");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &cluster);
    let out = tend_cmd()
        .args(["sync", "--repo"])
        .arg(repo.url())
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("-c")
        .arg(&cfg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`tend sync` writes nothing"), "{stderr}");
    assert_eq!(cluster.any().get("/app/greeting"), None, "{stderr}");
    assert!(
        cluster.any().keys("/").is_empty(),
        "no lease, no campaign key"
    );
}

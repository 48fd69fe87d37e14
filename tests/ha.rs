//! High availability (SPEC §11) against a real three-member etcd cluster
//! (Debian's etcd-server) on loopback ports: two `tend run` replicas with
//! the same config elect one writer; a killed leader is replaced within
//! its lease and a pass; a paused leader that wakes up after its lease
//! writes nothing; one member down still writes, two down writes nothing.

mod util;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use util::etcd::{self, Cluster};
use util::{can_run, tend_cmd, wait_until, TestRepo};

/// The lease: short, to keep the tests fast.
const TTL: Duration = Duration::from_secs(3);

fn etcd_here() -> bool {
    can_run(
        etcd::installed(),
        "etcd and etcdctl are not installed (etcd-server, etcd-client)",
    )
}

/// One `tend run` replica: its own state dir and log, the shared config
/// and repository; killed when dropped.
struct Replica {
    name: String,
    state: tempfile::TempDir,
    child: Option<Child>,
}

impl Replica {
    /// Started with the shared config and `host.name` its own.
    fn start(name: &str, repo: &TestRepo, shared: &Path) -> Replica {
        let state = tempfile::Builder::new()
            .prefix("tend-ha-")
            .tempdir()
            .unwrap();
        let config = state.path().join("tend.yaml");
        let text = std::fs::read_to_string(shared).unwrap();
        std::fs::write(&config, format!("{text}host:\n  name: {name}\n")).unwrap();
        let mut r = Replica {
            name: name.to_string(),
            state,
            child: None,
        };
        let log = std::fs::File::create(r.log_path()).unwrap();
        let child = tend_cmd()
            .args(["run", "--listen", "127.0.0.1:0", "--log-level", "info"])
            .args(["--interval", "1s", "--repo"])
            .arg(repo.url())
            .arg("--state-dir")
            .arg(r.state.path())
            .arg("-c")
            .arg(&config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start tend run");
        r.child = Some(child);
        r
    }

    fn log_path(&self) -> PathBuf {
        self.state.path().join("daemon.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn status(&self) -> serde_json::Value {
        let out = tend_cmd()
            .args(["status", "-o", "json", "--state-dir"])
            .arg(self.state.path())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// `leader` or `follower`, as its status says.
    fn role(&self) -> String {
        self.status()["ha"]["role"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// `tend_ha_leader` as its /metrics says.
    fn leader_metric(&self) -> Option<String> {
        self.get("/metrics")?
            .lines()
            .find_map(|l| l.strip_prefix("tend_ha_leader "))
            .map(str::to_string)
    }

    /// What its listener answers to `GET path`, read over HTTP at the
    /// address it logged.
    fn get(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let log = self.log();
        let addr = log
            .lines()
            .find_map(|l| l.split("listening addr=").nth(1))?
            .split_whitespace()
            .next()?
            .to_string();
        let mut c = std::net::TcpStream::connect(&addr).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut body = String::new();
        c.read_to_string(&mut body).ok()?;
        Some(body)
    }

    fn leads(&self) -> bool {
        self.role() == "leader"
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A stopped process must be woken to die of anything but KILL.
            self.signal(rustix::process::Signal::CONT);
        }
        self.kill9();
    }
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
fn two_replicas(repo: &TestRepo, cfg: &Path, cluster: &Cluster) -> (Replica, Replica) {
    declare(repo, "v1");
    let a = Replica::start("a", repo, cfg);
    let b = Replica::start("b", repo, cfg);
    let settled = wait_until(30, || {
        let roles = [a.role(), b.role()];
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
    let (leader, follower) = if a.leads() { (a, b) } else { (b, a) };
    let named = wait_until(10, || {
        follower.status()["ha"]["leader"] == leader.name.as_str()
    });
    assert!(named, "{}", follower.status());
    assert_eq!(leader.status()["ha"]["leader"], leader.name.as_str());
    assert_eq!(leader.leader_metric().as_deref(), Some("1"));
    let text = |r: &Replica| {
        let out = tend_cmd()
            .args(["status", "--state-dir"])
            .arg(r.state.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let says = format!("role     follower (leader: {})", leader.name);
    assert!(text(&follower).contains(&says), "{}", text(&follower));
    let says = format!("role     leader (leader: {})", leader.name);
    assert!(text(&leader).contains(&says), "{}", text(&leader));
    assert_eq!(follower.leader_metric().as_deref(), Some("0"));
    // The page says it too.
    let page = |r: &Replica| r.get("/").unwrap_or_default();
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
    assert!(wait_until(5, || follower.leads()), "{}", follower.status());
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
    assert!(wait_until(5, || new.leads()), "{}", new.status());

    // Woken up, the old leader sees the key differ from what it declares
    // (its watch and its next pass), and must not write it back.
    let applied_before = old.log().matches("applied id=").count();
    old.signal(rustix::process::Signal::CONT);
    let followed = wait_until(15, || old.role() == "follower");
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
    assert!(wait_until(10, || !leader.leads() && !follower.leads()));

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
    assert!(wait_until(10, || leader.leads() != follower.leads()));
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
    assert!(wait_until(10, || a.leads() != b.leads()));
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
    leader.signal(rustix::process::Signal::TERM);
    let exited = wait_until(10, || {
        matches!(leader.child.as_mut().unwrap().try_wait(), Ok(Some(_)))
    });
    assert!(exited, "{}", leader.log());
    leader.child = None;
    assert!(
        wait_until(15, || follower.leads()),
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

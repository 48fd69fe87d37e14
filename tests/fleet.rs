//! Fleets (SPEC §12) against a real etcd (Debian's etcd-server) and five
//! `tend run` hosts on this machine, each with its own root, state dir and
//! `host.name`: `tend fleet status` lists them and a stopped one drops
//! out; behind one Git HTTP server (nginx and git-http-backend) one host
//! polls for the fleet and the others fetch only a new revision, another
//! taking over when it is killed; with etcd gone each host polls again.

mod util;

use std::path::Path;

use util::etcd::{self, Etcd};
use util::host::Host;
use util::http::get;
use util::https::HttpsServer;
use util::{can_run, tend_cmd, wait_until, Run, TestRepo};

/// The lease of each host's key and of the poller's election: long
/// enough that a loaded machine does not make the poller step down.
const TTL_SECS: u64 = 6;
const HOSTS: usize = 5;

fn etcd_here() -> bool {
    can_run(
        etcd::installed(),
        "etcd and etcdctl are not installed (etcd-server, etcd-client)",
    )
}

/// How the hosts reach the repository.
struct Source {
    url: String,
    /// `source.interval`.
    interval: &'static str,
    /// `source:` lines beyond the interval (auth for https).
    extra: String,
}

/// One `tend run` host with its own root, state dir, config and log,
/// and a home of its own for Git.
fn start_host(name: &str, source: &Source, etcd: &Etcd) -> Host {
    let mut host = Host::new("tend-fleet-", name);
    std::fs::create_dir_all(host.dir().join("home")).unwrap();
    host.configure(&format!(
        "host:\n  name: {name}\nsource:\n  interval: {}\n{}fleet:\n  etcd: {{endpoints: [\"{}\"], timeout: 2s}}\n  lease_ttl: {TTL_SECS}s\npolicy:\n  resync: 1h\n",
        source.interval,
        source.extra,
        etcd.endpoint()
    ));
    let mut c = host.run_command();
    c.arg("--repo")
        .arg(&source.url)
        .arg("--root")
        .arg(host.root())
        .env("HOME", host.dir().join("home"))
        .env("GIT_CONFIG_NOSYSTEM", "1");
    host.start(c);
    host
}

fn motd(host: &Host) -> String {
    std::fs::read_to_string(host.root().join("etc/motd")).unwrap_or_default()
}

fn polls_for_fleet(host: &Host) -> bool {
    host.running() && host.metric("tend_fleet_poller", &[]) == Some(1.0)
}

fn fetches(host: &Host) -> f64 {
    host.metric("tend_source_fetch_total", &[("result", "ok")])
        .unwrap_or(-1.0)
}

fn declare(repo: &TestRepo, text: &str) -> String {
    repo.write(
        "motd.tend.yaml",
        "kind: file\npath: etc/motd\nsource: motd\n",
    );
    repo.write("motd", format!("{text}\n"));
    repo.commit(text)
}

fn start_hosts(source: &Source, etcd: &Etcd) -> Vec<Host> {
    (1..=HOSTS)
        .map(|i| start_host(&format!("host-{i}"), source, etcd))
        .collect()
}

fn logs(hosts: &[Host]) -> String {
    hosts
        .iter()
        .map(|h| format!("--- {}:\n{}", h.name, h.log()))
        .collect()
}

/// Waits until every running host has applied `text`.
fn converge(hosts: &[Host], text: &str, secs: u64) {
    let want = format!("{text}\n");
    let live = || hosts.iter().filter(|h| h.running());
    let done = wait_until(secs, || live().all(|h| motd(h) == want));
    assert!(done, "not every host applied {text:?}:\n{}", logs(hosts));
}

fn fleet_status(config: &Path, json: bool) -> Run {
    let mut c = tend_cmd();
    c.args(["fleet", "status", "-c"]).arg(config);
    if json {
        c.args(["-o", "json"]);
    }
    Run::from(c.output().expect("run tend fleet status"))
}

fn listed(config: &Path) -> Vec<serde_json::Value> {
    let run = fleet_status(config, true);
    serde_json::from_str::<Vec<serde_json::Value>>(&run.stdout).unwrap_or_default()
}

fn names(rows: &[serde_json::Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["host"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The one host polling for the fleet, once exactly one says so.
fn poller(hosts: &[Host], secs: u64) -> usize {
    let mut found = None;
    let one = wait_until(secs, || {
        let polling: Vec<usize> = (0..hosts.len())
            .filter(|i| polls_for_fleet(&hosts[*i]))
            .collect();
        found = polling.first().copied();
        polling.len() == 1
    });
    assert!(one, "not exactly one poller:\n{}", logs(hosts));
    found.unwrap()
}

#[test]
fn fleet_status_lists_every_host_and_a_stopped_one_drops_out() {
    if !etcd_here() {
        return;
    }
    let mut etcd = Etcd::start();
    let repo = TestRepo::new();
    let head = declare(&repo, "v1");
    let source = Source {
        url: repo.url(),
        interval: "1s",
        extra: String::new(),
    };
    let mut hosts = start_hosts(&source, &etcd);
    converge(&hosts, "v1", 60);
    let config = hosts[0].config();
    let all: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
    let every = wait_until(30, || {
        let rows = listed(&config);
        names(&rows) == all
            && rows.iter().all(|r| {
                r["revision"] == head.as_str()
                    && r["counts"]["InSync"] == 1
                    && r["last_pass"].is_string()
            })
            && rows.iter().filter(|r| r["poller"] == true).count() == 1
    });
    assert!(
        every,
        "{}\n{}",
        fleet_status(&config, true).all(),
        logs(&hosts)
    );

    let text = fleet_status(&config, false);
    assert_eq!(text.code, 0, "{text:?}");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(lines[0].starts_with("HOST"), "{}", text.stdout);
    assert_eq!(lines.len(), HOSTS + 1, "{}", text.stdout);
    for (line, name) in lines[1..].iter().zip(&all) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], name, "{}", text.stdout);
        assert_eq!(cells[1], &head[..12], "{}", text.stdout);
        assert_eq!(cells[2..6], ["1", "0", "0", "0"], "{}", text.stdout);
    }

    // The status page shows the fleet's table too.
    let addr = hosts[0].addr().expect("listening address");
    let page = get(addr, "/").text();
    assert!(page.contains("<h2>Fleet</h2>"), "{page}");
    for name in &all {
        assert!(page.contains(&format!(">{name}<")), "{name}: {page}");
    }
    // And the fleet's day: each host created its file, so the changes the
    // fleet applied are at least one per host.
    let picture = page
        .split("The fleet's last 24 hours</h3>")
        .nth(1)
        .unwrap_or_else(|| panic!("no fleet picture: {page}"));
    let applied: usize = picture
        .split("Changes applied (peak ")
        .nth(1)
        .and_then(|s| s.split(" in all)").next())
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of changes: {picture}"));
    assert!(applied >= HOSTS, "{applied} changes over {HOSTS} hosts");

    // Killed: its key goes with its lease.
    hosts[2].kill9();
    let gone = wait_until(TTL_SECS * 3 + 10, || {
        let rows = listed(&config);
        rows.len() == HOSTS - 1 && !names(&rows).contains(&"host-3".to_string())
    });
    assert!(gone, "{}", fleet_status(&config, true).all());
    // Stopped: it revokes its lease on the way out.
    let stopped = hosts[3].terminate(20).and_then(|s| s.code());
    assert_eq!(stopped, Some(0), "{}", hosts[3].log());
    assert_eq!(
        etcd.get("tend/fleet/host-4"),
        None,
        "the lease was not revoked before the host exited"
    );
    let gone = wait_until(TTL_SECS * 3 + 10, || {
        names(&listed(&config)) == ["host-1", "host-2", "host-5"]
    });
    assert!(gone, "{}", fleet_status(&config, true).all());

    // etcd unreachable: the command says so and exits 2.
    etcd.kill();
    let run = fleet_status(&config, false);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("etcd"), "{run:?}");
}

/// A Git smart-HTTP server the hosts fetch from, with basic auth.
fn git_server(repo: &TestRepo) -> Option<(HttpsServer, Source, tempfile::TempDir)> {
    let server = HttpsServer::start("tend", "fleet-secret")?;
    server.publish("ops.git", repo.path());
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "fleet-secret\n").unwrap();
    let extra = format!(
        "  auth:\n    token_file: {}\n    ca_file: {}\n",
        token.display(),
        server.ca_file().display()
    );
    let source = Source {
        url: server.url("ops.git"),
        interval: "1s",
        extra,
    };
    Some((server, source, secrets))
}

/// The ref advertisements the server answered (one for each fetch).
fn fetches_served(server: &HttpsServer) -> usize {
    server
        .access_log()
        .lines()
        .filter(|l| l.contains("/info/refs") && l.contains("\" 200 "))
        .count()
}

#[test]
fn one_host_polls_for_the_fleet_and_another_takes_over_when_it_dies() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let repo = TestRepo::new();
    declare(&repo, "v1");
    let Some((server, source, _secrets)) = git_server(&repo) else {
        return;
    };
    let mut hosts = start_hosts(&source, &etcd);
    converge(&hosts, "v1", 90);
    let first = poller(&hosts, 30);

    // Ten polls of the poller: the server sees about ten fetches, not
    // fifty, and the others fetch nothing (there is nothing new).
    let before: Vec<f64> = hosts.iter().map(fetches).collect();
    let served_before = fetches_served(&server);
    let ten = wait_until(60, || fetches(&hosts[first]) >= before[first] + 10.0);
    assert!(ten, "the poller did not poll:\n{}", logs(&hosts));
    let after: Vec<f64> = hosts.iter().map(fetches).collect();
    let served = fetches_served(&server) - served_before;
    let polls = (after[first] - before[first]) as usize;
    let others: f64 = (0..HOSTS)
        .filter(|i| *i != first)
        .map(|i| after[i] - before[i])
        .sum();
    assert!(
        others <= 2.0,
        "the other hosts fetched {others} times over {polls} polls: {before:?} -> {after:?}\n{}",
        logs(&hosts)
    );
    assert!(
        served <= polls + 3 && served < polls * HOSTS / 2,
        "{served} fetches served over {polls} polls of the poller (five hosts polling would be {}):\n{}",
        polls * HOSTS,
        server.access_log()
    );

    // A new commit reaches every host.
    declare(&repo, "v2");
    converge(&hosts, "v2", 30);

    // The poller dies: another is elected within its lease, polls, and a
    // new commit still reaches every host left.
    hosts[first].kill9();
    let next = poller(&hosts, TTL_SECS * 3 + 15);
    assert_ne!(next, first);
    let polled = fetches(&hosts[next]);
    let polls_on = wait_until(30, || fetches(&hosts[next]) >= polled + 2.0);
    assert!(polls_on, "the new poller does not poll:\n{}", logs(&hosts));
    declare(&repo, "v3");
    converge(&hosts, "v3", 30);
}

#[test]
fn with_etcd_gone_each_host_polls_on_its_own() {
    if !etcd_here() {
        return;
    }
    let mut etcd = Etcd::start();
    let repo = TestRepo::new();
    declare(&repo, "v1");
    let source = Source {
        url: repo.url(),
        interval: "1s",
        extra: String::new(),
    };
    let hosts = start_hosts(&source, &etcd);
    converge(&hosts, "v1", 60);
    poller(&hosts, 30);

    etcd.kill();
    declare(&repo, "v2");
    converge(&hosts, "v2", 60);
    let logged = hosts.iter().all(|h| {
        h.log()
            .contains("polling the source on this host meanwhile")
    });
    assert!(logged, "{}", logs(&hosts));

    // etcd back: the hosts publish their status again.
    etcd.resume();
    let config = hosts[0].config();
    let back = wait_until(60, || listed(&config).len() == HOSTS);
    assert!(
        back,
        "{}\n{}",
        fleet_status(&config, true).all(),
        logs(&hosts)
    );
}

#[test]
fn a_refresh_asked_of_any_host_reaches_the_whole_fleet() {
    if !etcd_here() {
        return;
    }
    let etcd = Etcd::start();
    let repo = TestRepo::new();
    declare(&repo, "v1");
    // Nobody polls within the test: only the refresh fetches.
    let source = Source {
        url: repo.url(),
        interval: "1h",
        extra: String::new(),
    };
    let hosts = start_hosts(&source, &etcd);
    converge(&hosts, "v1", 60);
    let first = poller(&hosts, 30);
    let asked = (first + 1) % HOSTS;

    declare(&repo, "v2");
    let addr = hosts[asked].addr().expect("listening address");
    let answer = util::http::post(addr, "/api/v1/refresh", &[], b"");
    assert!(answer.status < 300, "{}", answer.text());
    converge(&hosts, "v2", 30);
    assert_eq!(
        etcd.get("tend/fleet/revision").as_deref(),
        Some(repo.head().as_str())
    );
}

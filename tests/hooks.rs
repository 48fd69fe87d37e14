//! Hooks that reach an application: an HTTP endpoint (a real server on a
//! loopback port), a signal to the process in a pidfile, a command told the
//! revision; retried with backoff and delivered at least once.

mod util;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use util::{wait_until, Env};

const SIGHUP: i32 = 1;

/// One request the endpoint received: when, and its JSON body.
#[derive(Debug, Clone)]
struct Received {
    at: Instant,
    line: String,
    body: serde_json::Value,
    /// What the application saw when the call came (see [`Endpoint::seeing`]).
    saw: String,
}

type Look = Box<dyn Fn() -> String + Send>;

/// An application's reload endpoint: answers request `i` with
/// `statuses[i]` (the last one from then on) and keeps what it received.
struct Endpoint {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Endpoint {
    fn start(statuses: &[u16]) -> Endpoint {
        Endpoint::on(TcpListener::bind("127.0.0.1:0").unwrap(), statuses)
    }

    fn on(listener: TcpListener, statuses: &[u16]) -> Endpoint {
        Endpoint::seeing(listener, statuses, Box::new(String::new))
    }

    /// An endpoint that looks at something (`look`) the moment a call comes.
    fn seeing(listener: TcpListener, statuses: &[u16], look: Look) -> Endpoint {
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let (log, statuses) = (got.clone(), statuses.to_vec());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let Some((line, body)) = read_request(&mut conn) else {
                    continue;
                };
                let saw = look();
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(Received {
                        at: Instant::now(),
                        line,
                        body: serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
                        saw,
                    });
                    log.len()
                };
                let status = statuses[(n - 1).min(statuses.len() - 1)];
                let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        Endpoint { port, got }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/-/reload", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// The request line and the body of one HTTP/1.1 request.
fn read_request(conn: &mut std::net::TcpStream) -> Option<(String, String)> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        text.extend_from_slice(&buf[..n]);
        let s = String::from_utf8_lossy(&text).into_owned();
        if let Some((head, body)) = s.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if body.len() >= len {
                return Some((head.lines().next()?.to_string(), body[..len].to_string()));
            }
        }
    }
}

fn mirror_site(env: &Env, token: &str) -> String {
    env.repo.write("site/a.txt", format!("{token}\n"));
    env.repo.write("site/b.txt", format!("{token}\n"));
    env.repo.commit(token)
}

#[test]
fn an_http_hook_gets_each_commit_with_its_revision_in_mirror_mode() {
    let env = Env::new();
    let app = Endpoint::start(&[200]);
    let v1 = mirror_site(&env, "v1");
    let cfg = env.config(&format!(
        "source:\n  on_change: app\npolicy:\n  resync: 1h\nhooks:\n  app: {{http: {{url: \"{}\", method: POST}}, timeout: 10s}}\n",
        app.url()
    ));
    let cfg = cfg.to_str().unwrap();
    let _d = env.daemon(&["--mirror", "--path", "site", "--interval", "1s", "-c", cfg]);
    assert!(
        wait_until(30, || app.received().len() == 1),
        "{:?}\n{}",
        app.received(),
        env.daemon_log()
    );
    let first = &app.received()[0];
    assert_eq!(first.line, "POST /-/reload HTTP/1.1");
    assert_eq!(
        first.body,
        serde_json::json!({"revision": v1, "changed": 2})
    );
    assert_eq!(env.read("a.txt"), "v1\n");

    // One file changes: one call, for one change, after the write.
    env.repo.write("site/b.txt", "v2\n");
    let v2 = env.repo.commit("v2");
    assert!(
        wait_until(30, || app.received().len() == 2),
        "{:?}\n{}",
        app.received(),
        env.daemon_log()
    );
    assert_eq!(
        app.received()[1].body,
        serde_json::json!({"revision": v2, "changed": 1})
    );
    assert_eq!(env.read("b.txt"), "v2\n");
    // A file deleted in Git is a change too.
    env.repo.remove("site/a.txt");
    let v3 = env.repo.commit("v3");
    assert!(
        wait_until(30, || app.received().len() == 3),
        "{}",
        env.daemon_log()
    );
    assert_eq!(
        app.received()[2].body,
        serde_json::json!({"revision": v3, "changed": 1})
    );
    assert!(!env.at("a.txt").exists());
}

#[test]
fn a_failing_endpoint_is_retried_with_growing_waits_until_it_answers() {
    let env = Env::new();
    let app = Endpoint::start(&[500, 500, 503, 200]);
    // Many changed files, one hook: each try is one call, not one per file.
    for i in 0..20 {
        env.repo.write(&format!("site/more/f{i}"), "x\n");
    }
    let v1 = mirror_site(&env, "v1");
    let cfg = env.config(&format!(
        "source:\n  on_change: app\npolicy:\n  resync: 1h\nhooks:\n  app: {{http: {{url: \"{}\"}}, timeout: 5s}}\n",
        app.url()
    ));
    let d = env.daemon(&[
        "--mirror",
        "--path",
        "site",
        "--interval",
        "1h",
        "-c",
        cfg.to_str().unwrap(),
    ]);
    assert!(
        wait_until(60, || app.received().len() >= 4),
        "{:?}\n{}",
        app.received(),
        env.daemon_log()
    );
    let got = app.received();
    assert!(
        got.iter().all(|r| r.body["revision"] == v1.as_str()),
        "{got:?}"
    );
    // Backoff: 1 s, 2 s, 4 s (each +/-10 %), so the third wait is well
    // over the first.
    let gaps: Vec<Duration> = got.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(
        gaps[2] > gaps[0] * 2,
        "waits must grow: {gaps:?}\n{}",
        env.daemon_log()
    );
    // Delivered: the resources it was for are in sync, and no more calls,
    // not even from a full pass run after that (SIGHUP's), which would
    // deliver a call still pending.
    assert!(
        wait_until(20, || env
            .resource("files/file/a.txt")
            .is_some_and(|r| r["state"] == "InSync")),
        "{:?}",
        env.status()
    );
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || env.full_passes_after("reloading") >= 1),
        "{}",
        env.daemon_log()
    );
    let got = app.received();
    assert_eq!(got.len(), 4, "three failures, one success: {got:?}");
    assert_eq!(got[3].body["changed"], 22);
}

#[test]
fn an_http_hook_that_could_not_be_delivered_is_delivered_by_the_next_run() {
    let env = Env::new();
    // The port is reserved, then freed: nothing listens when tend calls.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let v1 = mirror_site(&env, "v1");
    let cfg = env.config(&format!(
        "source:\n  on_change: app\nhooks:\n  app: {{http: {{url: \"http://127.0.0.1:{port}/r\"}}, timeout: 5s}}\n"
    ));
    let cfg = cfg.to_str().unwrap();
    let r = env.tend(&["sync", "--mirror", "--path", "site", "-c", cfg]);
    assert_eq!(r.code, 3, "a failed hook is not converged: {r:?}");
    assert!(r.stderr.contains("cannot connect"), "{r:?}");
    assert_eq!(env.read("a.txt"), "v1\n");
    // The application comes up; the next run has nothing to write, and
    // delivers the call still pending, with the revision it was for.
    let app = Endpoint::on(TcpListener::bind(("127.0.0.1", port)).unwrap(), &[200]);
    let r = env.tend(&["sync", "--mirror", "--path", "site", "-c", cfg]);
    assert_eq!(r.code, 0, "{r:?}");
    let got = app.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0].body,
        serde_json::json!({"revision": v1, "changed": 2})
    );
    let r = env.tend(&["sync", "--mirror", "--path", "site", "-c", cfg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(app.received().len(), 1, "delivered once is enough");
}

#[test]
fn a_signal_hook_sends_sighup_to_the_process_in_the_pidfile() {
    let env = Env::new();
    let got = env.state.path().join("got-hup");
    let script = format!(
        "trap 'echo hup >> {}' HUP; echo ready; while :; do sleep 0.05; done",
        got.display()
    );
    // HUP as by default, so the trap takes even under a parent that
    // ignores it (`nohup`): a shell cannot trap a signal ignored when it
    // started.
    let mut app = std::process::Command::new("env")
        .args(["--default-signal=HUP", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    app.stdout.take().unwrap().read_exact(&mut ready).unwrap();
    let pidfile = env.state.path().join("app.pid");
    std::fs::write(&pidfile, format!("{}\n", app.id())).unwrap();
    env.repo.write(
        "app.tend.yaml",
        "kind: file\npath: etc/app.conf\ncontent: \"v1\\n\"\non_change: reload\n",
    );
    env.repo.commit("v1");
    let cfg = env.config(&format!(
        "hooks:\n  reload: {{signal: {{pidfile: {}, signal: HUP}}}}\n",
        pidfile.display()
    ));
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    let heard = wait_until(10, || {
        std::fs::read_to_string(&got).is_ok_and(|s| s == "hup\n")
    });
    let _ = app.kill();
    let _ = app.wait();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(heard, "the application never got SIGHUP");
    // A pidfile naming no process fails the hook, and says so.
    std::fs::write(&pidfile, format!("{}\n", app.id())).unwrap();
    env.repo.write(
        "app.tend.yaml",
        "kind: file\npath: etc/app.conf\ncontent: \"v2\\n\"\non_change: reload\n",
    );
    env.repo.commit("v2");
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("cannot send"), "{r:?}");
}

#[test]
fn a_command_hook_sees_the_revision_and_the_number_of_changes() {
    let env = Env::new();
    let log = env.state.path().join("hook.log");
    env.repo.write("site/a.txt", "1\n");
    env.repo.write("site/b.txt", "1\n");
    env.repo.write("site/c.txt", "1\n");
    let v1 = env.repo.commit("v1");
    let cfg = env.config(&format!(
        "source:\n  on_change: log\nhooks:\n  log: {{run: [sh, -c, \"echo $TEND_REVISION $TEND_CHANGED >> {}\"]}}\n",
        log.display()
    ));
    let cfg = cfg.to_str().unwrap();
    let r = env.tend(&["sync", "--mirror", "--path", "site", "-c", cfg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{v1} 3\n"));
    env.repo.write("site/c.txt", "2\n");
    let v2 = env.repo.commit("v2");
    let r = env.tend(&["sync", "--mirror", "--path", "site", "-c", cfg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!("{v1} 3\n{v2} 1\n")
    );
}

#[test]
fn in_link_mode_the_hook_comes_after_the_switch() {
    let env = Env::new();
    let link = env.at("current");
    // The application reads the published tree when told to reload.
    let app = Endpoint::seeing(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        &[200],
        Box::new(move || {
            let tree = std::fs::read_link(&link).map(|t| t.display().to_string());
            let a = std::fs::read_to_string(link.join("a.txt")).unwrap_or_default();
            format!("{} {}", tree.unwrap_or_default(), a.trim())
        }),
    );
    let cfg = env.config(&format!(
        "source:\n  on_change: app\nhooks:\n  app: {{http: {{url: \"{}\"}}}}\n",
        app.url()
    ));
    let cfg = cfg.to_str().unwrap();
    for (n, token) in ["v1", "v2"].into_iter().enumerate() {
        let rev = mirror_site(&env, token);
        let r = env.tend(&[
            "sync", "--mirror", "--path", "site", "--link", "current", "-c", cfg,
        ]);
        assert_eq!(r.code, 0, "{r:?}");
        let got = app.received();
        assert_eq!(got.len(), n + 1, "{got:?}");
        assert_eq!(got[n].body["revision"], rev.as_str());
        assert_eq!(got[n].saw, format!(".tend/revs/{rev} {token}"));
    }
}

/// A declaration whose change calls hook `name`.
fn app_calling(env: &Env, name: &str, content: &str) {
    env.repo.write(
        "app.tend.yaml",
        format!("kind: file\npath: etc/app.conf\ncontent: \"{content}\\n\"\non_change: {name}\n"),
    );
    env.repo.commit(content);
}

/// Ends the processes whose ids a hook appended to `pidfile`.
fn end_listed(pidfile: &std::path::Path) {
    for pid in std::fs::read_to_string(pidfile).unwrap_or_default().lines() {
        if let Some(pid) = pid
            .trim()
            .parse()
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

#[test]
fn a_timeout_bounds_the_sync_even_when_the_hook_has_a_grandchild() {
    let env = Env::new();
    app_calling(&env, "slow", "v1");
    let cfg = env.config("hooks:\n  slow: {run: [sh, -c, \"sleep 20 & wait\"], timeout: 2s}\n");
    let started = Instant::now();
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    let took = started.elapsed();
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("timed out after 2s"), "{r:?}");
    // The timeout plus the grace for SIGTERM, with room to spare; waiting
    // on the grandchild takes 20 s.
    assert!(took < Duration::from_secs(8), "sync took {took:?}");
}

#[test]
fn a_process_a_hook_leaves_running_never_holds_a_pass() {
    let env = Env::new();
    let pids = env.state.path().join("left.pids");
    app_calling(&env, "start", "v1");
    // As `nohup app &` without redirection: the leftover holds the hook's
    // stdout and stderr for 40 s.
    let hooks = format!(
        "hooks:\n  start: {{run: [sh, -c, \"sleep 40 & echo $! >> {}\"], timeout: 60s}}\n",
        pids.display()
    );
    let cfg = env.config(&hooks);
    let started = Instant::now();
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    let took = started.elapsed();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(took < Duration::from_secs(8), "sync took {took:?}");
    let left = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(left.lines().count(), 1, "{left}");
    // What the hook started is its business: it is still running.
    let pid = rustix::process::Pid::from_raw(left.trim().parse().unwrap()).unwrap();
    assert!(rustix::process::test_kill_process(pid).is_ok());

    // Under `tend run`: ready at once, a hand edit corrected at once (each
    // correction runs the hook again), and SIGTERM prompt.
    app_calling(&env, "start", "v2");
    let started = Instant::now();
    let mut served = env.serve(&hooks, &[]);
    assert!(served.ready(30), "{}", env.daemon_log());
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "ready after {took:?}");
    assert!(wait_until(30, || env.status()["watcher"]
        .as_str()
        .is_some_and(|w| w.starts_with("watching"))));
    let runs = || std::fs::read_to_string(&pids).unwrap().lines().count();
    for edit in ["edited\n", "edited again\n"] {
        let before = runs();
        std::fs::write(env.at("etc/app.conf"), edit).unwrap();
        let started = Instant::now();
        let back = wait_until(20, || env.read("etc/app.conf") == "v2\n");
        let took = started.elapsed();
        assert!(back, "{}", env.daemon_log());
        assert!(took < Duration::from_secs(2), "corrected after {took:?}");
        // The correction ran the hook, which left another process behind.
        assert!(wait_until(10, || runs() > before), "{}", env.daemon_log());
    }
    let started = Instant::now();
    let code = served.daemon.stop(10);
    let took = started.elapsed();
    end_listed(&pids);
    assert_eq!(code, Some(0), "{}", env.daemon_log());
    assert!(took < Duration::from_secs(5), "stopped after {took:?}");
}

/// Whether process `pid` runs (a zombie waiting for its reaper does not).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

#[test]
fn stopping_the_daemon_ends_a_running_hook_and_its_group_and_it_stays_pending() {
    let env = Env::new();
    let pids = env.state.path().join("hook.pids");
    app_calling(&env, "slow", "v1");
    let hooks = format!(
        "hooks:\n  slow: {{run: [sh, -c, \"sleep 30 & echo $! >> {}; wait\"], timeout: 60s}}\n",
        pids.display()
    );
    let lines = || std::fs::read_to_string(&pids).unwrap_or_default();
    let mut served = env.serve(&hooks, &[]);
    assert!(
        wait_until(30, || lines().lines().count() == 1),
        "{}",
        env.daemon_log()
    );
    let started = Instant::now();
    let code = served.daemon.stop(40);
    let took = started.elapsed();
    let still = running(&lines());
    end_listed(&pids);
    assert_eq!(code, Some(0), "{}", env.daemon_log());
    // The hook would hold the pass for 30 s.
    assert!(took < Duration::from_secs(8), "stopped after {took:?}");
    assert!(!still, "the hook's child was left running");
    assert!(env.daemon_log().contains("tend is stopping"));
    // Not delivered: the next start runs it.
    let ran = env.state.path().join("ran");
    let cfg = env.config(&format!(
        "hooks:\n  slow: {{run: [sh, -c, \"echo ran >> {}\"]}}\n",
        ran.display()
    ));
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
}

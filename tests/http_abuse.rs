//! The HTTP surface of a running `tend run` under abuse (issue 13): a huge
//! audit log read by concurrent page loads in bounded memory, thousands of
//! slow connections that neither starve `/healthz` nor stop corrections,
//! and handlers whose work does not grow with what a client sends.

mod util;

use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use util::http::Served;
use util::{wait_until, Env};

fn file_decl(path: &str, content: &str) -> String {
    format!("kind: file\npath: {path}\ncontent: {content:?}\n")
}

/// One managed file at `etc/a` with `content`, committed.
fn commit_a(env: &Env, content: &str) {
    env.repo.write("a.tend.yaml", file_decl("etc/a", content));
    env.repo.commit(content);
}

fn started(env: &Env, extra: &str, args: &[&str]) -> Served {
    let s = env.serve(extra, args);
    assert!(s.ready(30), "never ready:\n{}", env.daemon_log());
    s
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn audit_line(id: &str, time: &str) -> String {
    format!(
        "{{\"time\":\"{time}\",\"revision\":\"{rev}\",\"id\":\"{id}\",\"action\":\"update\",\
         \"why\":[\"content\",\"mode\"],\"before\":\"git:{b}\",\"after\":\"git:{a}\",\
         \"backup\":\"sha256:{k}\"}}\n",
        rev = "a".repeat(40),
        b = "1".repeat(40),
        a = "2".repeat(40),
        k = "3".repeat(64),
    )
}

/// Writes `bytes` of valid audit lines naming `files/file/etc/filler`, then
/// twenty naming `files/file/etc/last-0` .. `last-19`, oldest first.
fn write_big_audit_log(path: &std::path::Path, bytes: u64) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let filler = audit_line("files/file/etc/filler", "2024-01-01T00:00:00.000Z");
    let mut written = 0;
    while written < bytes {
        out.write_all(filler.as_bytes()).unwrap();
        written += filler.len() as u64;
    }
    for i in 0..20 {
        let line = audit_line(
            &format!("files/file/etc/last-{i}"),
            "2024-01-02T00:00:00.000Z",
        );
        out.write_all(line.as_bytes()).unwrap();
    }
    out.flush().unwrap();
}

/// Issue 13, item 1: every `GET /` parsed the whole audit log to show 20
/// lines (a 49 MB log added 251 MiB to the daemon per request). Now the
/// page reads the log from its end: 100 MB of log and eight page loads at
/// once leave the daemon's peak memory where it was, and the page shows
/// the newest lines.
#[test]
fn concurrent_page_loads_over_a_huge_audit_log_stay_in_bounded_memory() {
    let env = Env::new();
    commit_a(&env, "a1\n");
    write_big_audit_log(&env.state.path().join("audit.jsonl"), 100 << 20);
    // Kept whole, not rotated away, to be read as one big file.
    let s = started(&env, "  audit_max: 1GiB\n", &[]);
    let pid = s.daemon.child.id();
    // The first page load, alone, settles what the daemon holds anyway.
    assert_eq!(s.get("/").status, 200);
    let before = proc_kib(pid, "VmHWM");

    let pages: Vec<_> = (0..8)
        .map(|_| {
            let addr = s.addr;
            std::thread::spawn(move || util::http::request(addr, "GET", "/", &[], b""))
        })
        .collect();
    let pages: Vec<_> = pages.into_iter().map(|p| p.join().unwrap()).collect();
    let grew = proc_kib(pid, "VmHWM").saturating_sub(before);
    assert!(
        grew < 48 << 10,
        "eight page loads raised the daemon's peak memory by {} MiB (VmRSS now {} MiB)",
        grew >> 10,
        proc_kib(pid, "VmRSS") >> 10
    );
    for page in pages {
        let page = page.expect("the page answers");
        assert_eq!(page.status, 200);
        let text = page.text();
        assert!(text.contains("etc/last-19"), "the newest line is missing");
        assert!(
            !text.contains("cannot be read"),
            "the log was refused: {text}"
        );
        assert!(
            !text.contains("etc/filler"),
            "more than the twenty newest lines were shown"
        );
    }
}

/// [`Env::serve`] through `wrapper`, a command that execs tend.
fn serve_under(env: &Env, wrapper: &[&str], extra: &str) -> Served {
    let cfg = env.config(&format!("{}{extra}", util::http::QUIET));
    let daemon = env.daemon_under(wrapper, &["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    let mut addr = None;
    let up = wait_until(15, || {
        addr = util::http::listening_addr(&env.daemon_log());
        addr.is_some()
    });
    assert!(up, "no listening line:\n{}", env.daemon_log());
    let s = Served {
        daemon,
        addr: addr.unwrap(),
    };
    assert!(s.ready(30), "never ready:\n{}", env.daemon_log());
    s
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The sockets among the descriptors of `pid`: its listener and the
/// connections it accepted.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
            .count()
    })
}

/// Connections waiting in the accept queue of the listener at `addr`
/// (the `rx_queue` of a listening socket in /proc/net/tcp), `None` when
/// no such listener is found.
fn accept_queue(addr: std::net::SocketAddr) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{:04X}", addr.port());
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let listening = fields.get(3) == Some(&"0A");
        let ours = fields.get(1).is_some_and(|l| l.ends_with(&local));
        (listening && ours)
            .then(|| fields.get(4)?.split_once(':'))
            .flatten()
            .and_then(|(_, rx)| usize::from_str_radix(rx, 16).ok())
    })
}

/// The connections tend keeps open at once with `pid`'s open-files limit
/// (an eighth of it, at most 256: `server.max_connections` by default).
fn connection_limit(pid: u32) -> usize {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let soft: usize = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("Max open files");
    (soft / 8).clamp(1, 256)
}

/// Waits until tend accepted every connection made to `addr`: none is
/// left in the listener's queue.
fn all_accepted(addr: std::net::SocketAddr) {
    let drained = wait_until(20, || accept_queue(addr) == Some(0));
    assert!(
        drained,
        "tend left {:?} connections unaccepted",
        accept_queue(addr)
    );
}

/// Whether the server closed `stream` (end of file or a reset).
fn closed(stream: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// Issue 13, item 4: without a timeout on unfinished headers, a few
/// thousand slow connections took every descriptor: `/healthz` stopped
/// answering and hand edits were no longer corrected. Now, with tend held
/// to 1024 open files, 1500 connections that send half a request and stall
/// neither keep a fresh `/healthz` from answering at once nor stop a
/// correction, the daemon's descriptors stay well under its limit, and
/// every stalled connection is closed once the header timeout (10 s) passes.
#[test]
fn slow_connections_starve_neither_health_nor_corrections() {
    let Some(prlimit) = util::http::tool("prlimit", "util-linux") else {
        return;
    };
    let env = Env::new();
    commit_a(&env, "a1\n");
    let prlimit = prlimit.to_str().unwrap();
    let s = serve_under(&env, &[prlimit, "--nofile=1024:1024", "--"], "");
    let pid = s.daemon.child.id();

    let mut slow = Vec::new();
    for _ in 0..1500 {
        // A connect that finds the listener's queue full waits for the
        // kernel's retransmit, a second or more on a loaded machine: each
        // is tried again a few times before it counts as not made.
        let Some(mut c) = (0..5).find_map(|_| {
            std::net::TcpStream::connect_timeout(&s.addr, Duration::from_secs(3)).ok()
        }) else {
            continue;
        };
        let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nHost: tend\r\nX-Slow: ");
        slow.push(c);
    }
    // The load arrived: every connection was made, and tend accepted each
    // (holding the newest, closing the oldest to make room) before its
    // descriptors are counted.
    assert_eq!(
        slow.len(),
        1500,
        "only {} of 1500 connections were made",
        slow.len()
    );
    all_accepted(s.addr);
    let limit = connection_limit(pid);
    assert_eq!(limit, 128, "an eighth of 1024 open files");
    let held = sockets(pid);
    assert!(
        held >= limit * 3 / 4,
        "tend holds {held} sockets beside {} stalled connections, not near its {limit}",
        slow.len()
    );
    let mut unclosed = 0;
    let settled = wait_until(5, || {
        unclosed = slow.iter_mut().map(|c| usize::from(!closed(c))).sum();
        unclosed <= limit
    });
    assert!(
        settled && unclosed >= limit * 3 / 4,
        "{unclosed} stalled connections open, with tend keeping at most {limit}"
    );
    let fds = open_fds(pid);
    let started = Instant::now();
    let health = util::http::request(s.addr, "GET", "/healthz", &[], b"");
    let took = started.elapsed();
    assert!(
        health.as_ref().is_ok_and(|r| r.status == 200),
        "/healthz beside {} slow connections: {health:?}",
        slow.len()
    );
    assert!(took < Duration::from_secs(3), "/healthz took {took:?}");
    assert!(fds < 512, "the daemon holds {fds} descriptors of 1024");

    // The watcher tells tend's own writes by what they left, not by a time
    // after writing: the edit can come at once.
    std::fs::write(env.at("etc/a"), "edited by hand\n").unwrap();
    assert!(
        wait_until(20, || std::fs::read_to_string(env.at("etc/a"))
            .is_ok_and(|t| t == "a1\n")),
        "the hand edit was not corrected:\n{}",
        env.daemon_log()
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut open: Vec<_> = slow;
    while !open.is_empty() && Instant::now() < deadline {
        open.retain_mut(|c| !closed(c));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        open.is_empty(),
        "{} stalled connections still open 30 s on",
        open.len()
    );
    assert_eq!(s.get("/healthz").status, 200);
}

/// Webhook bodies are capped at 1 MiB each, but every connection read its
/// own at once: 200 senders of 1 MiB held 200 MiB. Now a few are read at
/// a time and the rest wait, so the daemon's peak memory barely moves.
#[test]
fn large_webhook_bodies_sent_at_once_stay_in_bounded_memory() {
    let env = Env::new();
    commit_a(&env, "a1\n");
    let secret = env.secret_file("generic.secret", "s3cret\n");
    let extra = format!(
        "server:\n  webhooks:\n    generic: {{secret_file: {}}}\n",
        secret.display()
    );
    let s = started(&env, &extra, &[]);
    let pid = s.daemon.child.id();
    assert_eq!(s.get("/").status, 200);
    let before = proc_kib(pid, "VmHWM");

    let body = vec![b' '; (1 << 20) - 1];
    let senders: Vec<_> = (0..200)
        .map(|_| {
            let (addr, body) = (s.addr, body.clone());
            std::thread::spawn(move || {
                let Ok(mut c) = std::net::TcpStream::connect(addr) else {
                    return None;
                };
                c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
                let head = "POST /webhook/generic HTTP/1.1\r\nHost: tend\r\n\
                            Content-Length: 1048576\r\n\r\n";
                let _ = c.write_all(head.as_bytes());
                // All but the last byte: the body is never complete.
                let _ = c.write_all(&body);
                Some(c)
            })
        })
        .collect();
    let held: Vec<_> = senders
        .into_iter()
        .filter_map(|t| t.join().ok().flatten())
        .collect();
    // Every sender connected, and tend accepted all it may hold: their
    // bodies were on its sockets when its memory is read.
    assert_eq!(
        held.len(),
        200,
        "only {} of 200 senders connected",
        held.len()
    );
    let limit = connection_limit(pid).min(200);
    let accepted = wait_until(20, || sockets(pid) > limit);
    assert!(
        accepted,
        "tend holds {} sockets, not its listener and {limit} senders",
        sockets(pid)
    );
    // A bounded daemon never gets there: give it every chance to.
    let bound = 48 << 10;
    let grew = || proc_kib(pid, "VmHWM").saturating_sub(before);
    wait_until(5, || grew() >= bound);
    assert!(
        grew() < bound,
        "200 unfinished 1 MiB webhook bodies raised the daemon's peak memory by {} MiB",
        grew() >> 10
    );
    drop(held);
    assert_eq!(s.get("/healthz").status, 200);
}

//! Talking to a running `tend run` over its real port: a plain HTTP/1.1
//! client on `TcpStream`, the daemon's address read from its log, a reader
//! of the Prometheus text format, and the external programs (Chromium,
//! promtool) some tests drive.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{wait_until, Daemon, Env};

/// One answer, read to the end of the connection.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn decode_chunked(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&rest[..end]);
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).unwrap_or(0);
        rest = &rest[end + 2..];
        if size == 0 || rest.len() < size {
            return out;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
}

fn parse(raw: &[u8]) -> std::io::Result<Response> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(status_line))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let mut r = Response {
        status,
        headers,
        body: Vec::new(),
    };
    r.body = if r
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        decode_chunked(rest)
    } else {
        let n = r
            .header("content-length")
            .and_then(|n| n.parse().ok())
            .unwrap_or(rest.len());
        rest[..n.min(rest.len())].to_vec()
    };
    Ok(r)
}

/// Sends one request with `Connection: close` and reads the whole answer.
/// The body is written from another thread, so a server that answers
/// before reading all of it (413) is heard rather than deadlocked on.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(15)))?;
    stream.set_write_timeout(Some(Duration::from_secs(15)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    let sets_length = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    if !sets_length && (method == "POST" || !body.is_empty()) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    let mut writer = stream.try_clone()?;
    let body = body.to_vec();
    let sent = std::thread::spawn(move || {
        let _ = writer.write_all(&body);
    });
    let mut raw = Vec::new();
    let read = stream.read_to_end(&mut raw);
    let _ = sent.join();
    match read {
        Ok(_) => parse(&raw),
        // A reset after the answer arrived (the server closed with our body
        // still unread) loses nothing we need.
        Err(e) if !raw.is_empty() => parse(&raw).map_err(|_| e),
        Err(e) => Err(e),
    }
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"").unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

pub fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    request(addr, "POST", path, headers, body).unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// The address in the last `listening` line of a log, text or JSON.
pub fn listening_addr(log: &str) -> Option<SocketAddr> {
    let line = log.lines().rev().find(|l| l.contains("listening"))?;
    let at = line.find("127.0.0.1:")?;
    let tail = &line[at + "127.0.0.1:".len()..];
    let port: String = tail.chars().take_while(char::is_ascii_digit).collect();
    format!("127.0.0.1:{port}").parse().ok()
}

/// `tend run` polling every second with a resync every two, so a hand
/// edit close after tend's own write (taken as its echo by the watcher)
/// is still corrected soon; and the address it serves on.
pub fn serve_polling(env: &Env, args: &[&str]) -> Served {
    let cfg = env.config("policy:\n  resync: 2s\n");
    let mut all = vec!["--interval", "1s", "-c", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    let before = env.daemon_log().matches("listening").count();
    let daemon = env.daemon(&all);
    let mut addr = None;
    let up = wait_until(15, || {
        let log = env.daemon_log();
        if log.matches("listening").count() > before {
            addr = listening_addr(&log);
        }
        addr.is_some()
    });
    assert!(up, "no listening line:\n{}", env.daemon_log());
    Served {
        daemon,
        addr: addr.unwrap(),
    }
}

/// A daemon and the address it serves on.
pub struct Served {
    pub daemon: Daemon,
    pub addr: SocketAddr,
}

impl Served {
    pub fn get(&self, path: &str) -> Response {
        get(self.addr, path)
    }

    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        post(self.addr, path, headers, body)
    }

    /// Waits until `/readyz` answers 200.
    pub fn ready(&self, secs: u64) -> bool {
        wait_until(secs, || {
            request(self.addr, "GET", "/readyz", &[], b"").is_ok_and(|r| r.status == 200)
        })
    }

    /// `POST /api/v1/refresh`, which must be accepted.
    pub fn refresh(&self) {
        let r = self.post("/api/v1/refresh", &[], b"");
        assert_eq!(r.status, 202, "refresh: {}", r.text());
    }

    pub fn metrics(&self) -> Metrics {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200, "{}", r.text());
        Metrics(r.text())
    }
}

/// The config every test here runs with: the resync timer an hour away,
/// so (with `--interval 1h`) only the request under test explains a
/// fast change. `extra` adds top-level sections other than `policy`.
pub const QUIET: &str = "policy:\n  resync: 1h\n";

impl Env {
    /// Starts `tend run --interval 1h` with [`QUIET`] plus `extra` as its
    /// config, and waits for its listening line.
    pub fn serve(&self, extra: &str, args: &[&str]) -> Served {
        let cfg = self.config(&format!("{QUIET}{extra}"));
        let before = self.daemon_log().matches("listening").count();
        let mut all = vec!["--interval", "1h", "-c", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        let daemon = self.daemon(&all);
        let mut addr = None;
        let up = wait_until(15, || {
            let log = self.daemon_log();
            if log.matches("listening").count() > before {
                addr = listening_addr(&log);
            }
            addr.is_some()
        });
        assert!(up, "no listening line:\n{}", self.daemon_log());
        Served {
            daemon,
            addr: addr.unwrap(),
        }
    }

    /// Starts `tend run` with only `args` (no log flags, unlike
    /// [`Env::daemon`]), its output appended to the same log file.
    pub fn daemon_as_configured(&self, args: &[&str]) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.path().join("daemon.log"))
            .unwrap();
        let mut c = self.cmd(&["run"]);
        c.args(args).stdout(log.try_clone().unwrap()).stderr(log);
        Daemon {
            child: c.spawn().expect("start tend run"),
        }
    }

    /// Writes a file in the state dir (secrets, tokens) and returns its path.
    pub fn secret_file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.state.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

/// A `/metrics` answer, read as the Prometheus text format.
#[derive(Debug, Clone)]
pub struct Metrics(pub String);

/// One sample: name, labels, value.
pub type Sample = (String, BTreeMap<String, String>, f64);

fn labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_matches([',', ' ']).to_string(), value);
        rest = &after[end..];
    }
    out
}

impl Metrics {
    pub fn samples(&self) -> Vec<Sample> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let value: f64 = value.parse().ok()?;
                Some(match series.split_once('{') {
                    Some((name, rest)) => {
                        (name.to_string(), labels(rest.trim_end_matches('}')), value)
                    }
                    None => (series.to_string(), BTreeMap::new(), value),
                })
            })
            .collect()
    }

    /// The value of the series `name` whose labels include `with`.
    pub fn value(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        self.samples()
            .into_iter()
            .find(|(n, l, _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .map(|(_, _, v)| v)
    }

    /// Every value the label `label` takes in series `name`.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        self.samples()
            .into_iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, mut l, _)| l.remove(label))
            .collect()
    }
}

/// An external program the tests need. Missing, it fails the test under CI
/// or as root (scripts/test installs `package` then), and skips it with a
/// note otherwise.
pub fn tool(program: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    });
    super::can_run(
        found.is_some(),
        &format!("{program} is missing; scripts/test installs Debian's {package} package"),
    );
    found
}

/// What a headless Chromium made of a page.
#[derive(Debug)]
pub struct Page {
    pub dom: String,
    /// Console messages the page raised (errors, warnings, logs).
    pub console: Vec<String>,
    pub stderr: String,
}

/// Chromium writes a console message to stderr as `:INFO:CONSOLE:<line>]`
/// (recent releases) or `:INFO:CONSOLE(<line>)]` (older ones).
pub fn console_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE:") || l.contains("CONSOLE("))
        .map(String::from)
        .collect()
}

/// Loads `url` in headless Chromium, dumps the DOM once loaded, and saves
/// a phone-sized screenshot to `screenshot` when given.
pub fn chromium(bin: &Path, url: &str, screenshot: Option<&Path>) -> Page {
    let profile = tempfile::Builder::new()
        .prefix("tend-chromium-")
        .tempdir()
        .unwrap();
    let mut c = Command::new(bin);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg("--dump-dom");
    if let Some(p) = screenshot {
        c.arg(format!("--screenshot={}", p.display()))
            .arg("--window-size=412,915");
    }
    let out_file = profile.path().join("dom.html");
    let err_file = profile.path().join("stderr.txt");
    c.arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap());
    let mut child = c.spawn().expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within 60 s:\n{}",
                std::fs::read_to_string(&err_file).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stderr = std::fs::read_to_string(&err_file).unwrap_or_default();
    Page {
        dom: std::fs::read_to_string(&out_file).unwrap_or_default(),
        console: console_lines(&stderr),
        stderr,
    }
}

/// `promtool check metrics` on `text`: its exit status and what it said.
pub fn promtool_check(bin: &Path, text: &str) -> (bool, String) {
    let mut child = Command::new(bin)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

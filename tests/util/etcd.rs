//! A real etcd member for tests (Debian's etcd-server): its own data dir
//! in a temp dir, free loopback ports, killed on drop, never left running.
//! `etcdctl` (etcd-client) reads and writes beside tend as another writer.
//! Self-contained but for `certs.rs` and `ports.rs`, which its includer
//! names beside it as `certs` and `ports`, so unit tests include it too.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::certs;
use super::ports::free_port;

pub const ETCD: &str = "/usr/bin/etcd";
pub const ETCDCTL: &str = "/usr/bin/etcdctl";

/// Whether etcd and etcdctl are installed.
pub fn installed() -> bool {
    Path::new(ETCD).exists() && Path::new(ETCDCTL).exists()
}

pub struct Etcd {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// `NAME:PASSWORD` etcdctl gives once auth is on.
    user: Option<String>,
    /// `--initial-cluster`: this member alone, or every member of a cluster.
    initial_cluster: String,
    /// With TLS: the directory of `ca.pem`, `server.pem`/`server.key` and a
    /// client's `client.pem`/`client.key`; clients must show a certificate
    /// the CA signed.
    tls: Option<PathBuf>,
}

impl Etcd {
    /// One member, started and answering.
    pub fn start() -> Etcd {
        Etcd::alone(false)
    }

    /// One member serving clients over TLS only, asking each for a client
    /// certificate; its CA and a client's certificate are made by openssl
    /// in [`Etcd::tls_dir`].
    pub fn start_tls() -> Etcd {
        Etcd::alone(true)
    }

    /// A one-member cluster, started and answering.
    fn alone(tls: bool) -> Etcd {
        let dir = tempfile::Builder::new()
            .prefix("tend-etcd-")
            .tempdir()
            .unwrap();
        let tls = tls.then(|| {
            let certs = dir.path().join("tls");
            std::fs::create_dir(&certs).unwrap();
            make_certificates(&certs);
            certs
        });
        let peer_port = free_port();
        let mut e = Etcd {
            name: "m1".into(),
            client_port: free_port(),
            peer_port,
            dir,
            child: None,
            user: None,
            initial_cluster: format!("m1=http://127.0.0.1:{peer_port}"),
            tls,
        };
        e.resume();
        e
    }

    /// The certificates of a TLS member.
    pub fn tls_dir(&self) -> Option<&Path> {
        self.tls.as_deref()
    }

    pub fn endpoint(&self) -> String {
        let scheme = match self.tls {
            Some(_) => "https",
            None => "http",
        };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the member again on its data dir and ports, and waits until
    /// it answers.
    pub fn resume(&mut self) {
        self.spawn();
        self.wait_healthy();
    }

    /// Waits until this member answers a health check (which needs a
    /// quorum of its cluster).
    pub fn wait_healthy(&self) {
        let up = wait(30, || {
            TcpStream::connect(("127.0.0.1", self.client_port)).is_ok()
                && self.ctl(&["endpoint", "health"]).status.success()
        });
        assert!(up, "etcd did not come up:\n{}", self.log());
    }

    /// Starts the member's process, not waiting for it.
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "etcd is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(ETCD)
            .arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen-client-urls")
            .arg(self.endpoint())
            .arg("--advertise-client-urls")
            .arg(self.endpoint())
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .args(self.tls.iter().flat_map(|d| {
                [
                    "--cert-file".into(),
                    d.join("server.pem").into_os_string(),
                    "--key-file".into(),
                    d.join("server.key").into_os_string(),
                    "--trusted-ca-file".into(),
                    d.join("ca.pem").into_os_string(),
                    "--client-cert-auth".into(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
    }

    /// Kills the member (SIGKILL, as a crash) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// `etcdctl` against this member (API v3).
    pub fn ctl(&self, args: &[&str]) -> Output {
        let mut c = Command::new(ETCDCTL);
        if let Some(user) = &self.user {
            c.arg("--user").arg(user);
        }
        if let Some(d) = &self.tls {
            c.arg("--cacert")
                .arg(d.join("ca.pem"))
                .arg("--cert")
                .arg(d.join("client.pem"))
                .arg("--key")
                .arg(d.join("client.key"));
        }
        c.env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoint())
            .arg("--dial-timeout")
            .arg("2s")
            .arg("--command-timeout")
            .arg("5s")
            .args(args)
            .output()
            .expect("run etcdctl")
    }

    fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn put(&self, key: &str, value: &str) {
        self.ctl_ok(&["put", key, value]);
    }

    /// A key's value, or `None` when it is absent.
    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.ctl_ok(&["get", key, "--print-value-only"]);
        let v = out.strip_suffix('\n').unwrap_or(&out);
        (!out.is_empty()).then(|| v.to_string())
    }

    /// Every key under `prefix`, sorted.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self.ctl_ok(&["get", prefix, "--prefix", "--keys-only"]);
        out.lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// The store's current revision: it grows with every write.
    pub fn revision(&self) -> i64 {
        let out = self.ctl_ok(&[
            "get",
            "/",
            "--prefix",
            "--keys-only",
            "--limit",
            "1",
            "-w",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["header"]["revision"].as_i64().unwrap()
    }

    /// Turns etcd's auth on with a `root` user of this password, which
    /// etcdctl uses from now on.
    pub fn enable_auth(&mut self, password: &str) {
        self.ctl_ok(&["user", "add", "root", "--new-user-password", password]);
        self.ctl_ok(&["auth", "enable"]);
        self.user = Some(format!("root:{password}"));
    }

    /// Compacts history up to the current revision.
    pub fn compact(&self) {
        let rev = self.revision().to_string();
        self.ctl_ok(&["compaction", &rev, "--physical"]);
    }

    /// Every change of `key` in the history that is not compacted: its
    /// values, oldest first (an empty string for a delete).
    pub fn history(&self, key: &str) -> Vec<String> {
        self.history_revisions(key)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    /// [`Etcd::history`] with each change's mod revision. etcdctl's watch
    /// prints what it replays and is stopped after a while: a slow machine
    /// is given longer when nothing came in time.
    pub fn history_revisions(&self, key: &str) -> Vec<(i64, String)> {
        for wait in [700, 2000, 5000] {
            let found = self.replay(key, Duration::from_millis(wait));
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    fn replay(&self, key: &str, wait: Duration) -> Vec<(i64, String)> {
        let mut child = Command::new(ETCDCTL)
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoint())
            .args(["watch", key, "--rev", "1", "-w", "json"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(wait);
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let mut values = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            for e in v["Events"].as_array().into_iter().flatten() {
                let value = e["kv"]["value"].as_str().unwrap_or("");
                let rev = e["kv"]["mod_revision"].as_i64().unwrap_or(0);
                values.push((rev, decode(value)));
            }
        }
        values
    }
}

/// A cluster of members on loopback ports, each killed on drop.
pub struct Cluster {
    pub members: Vec<Etcd>,
}

impl Cluster {
    /// `n` members, started together and answering.
    pub fn start(n: usize) -> Cluster {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{}=http://127.0.0.1:{peer}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut members: Vec<Etcd> = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| Etcd {
                name: format!("m{}", i + 1),
                client_port: *client,
                peer_port: *peer,
                dir: tempfile::Builder::new()
                    .prefix("tend-etcd-")
                    .tempdir()
                    .unwrap(),
                child: None,
                user: None,
                initial_cluster: initial.clone(),
                tls: None,
            })
            .collect();
        for m in &mut members {
            m.spawn();
        }
        for m in &members {
            m.wait_healthy();
        }
        Cluster { members }
    }

    /// Every member's client URL, as a YAML flow list.
    pub fn endpoints(&self) -> String {
        let urls: Vec<String> = self.members.iter().map(Etcd::endpoint).collect();
        format!("[{}]", urls.join(", "))
    }

    /// A member that is running, for etcdctl.
    pub fn any(&self) -> &Etcd {
        self.members
            .iter()
            .find(|m| m.child.is_some())
            .expect("a running member")
    }

    /// Every change of `key` still in the history, with its mod revision.
    pub fn history_revisions(&self, key: &str) -> Vec<(i64, String)> {
        self.any().history_revisions(key)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// etcdctl's JSON gives values in base64.
fn decode(b64: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in b64.bytes().filter(|c| *c != b'=') {
        let Some(v) = ALPHABET.iter().position(|a| *a == c) else {
            continue;
        };
        bits = (bits << 6) | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `check` every 50 ms until it holds or `secs` pass.
pub fn wait(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check()
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate.
fn make_certificates(dir: &Path) {
    certs::authority(dir);
    certs::signed(dir, "server", "server", certs::SERVER);
    certs::signed(dir, "client", "client", certs::CLIENT);
}

//! A real OpenSSH server on a loopback port, child of the test: its own host
//! key, its own sshd_config and an authorized_keys file with throwaway
//! client keys. The test's listener accepts each connection and hands it to
//! `sshd -i` (inetd mode), which needs no port of its own and lets the
//! server be switched to "hung": accept, then never answer.

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::servers::{available, Group};

const SSHD: &str = "/usr/sbin/sshd";
const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";

pub struct SshServer {
    dir: tempfile::TempDir,
    pub port: u16,
    /// The account the client keys log in as: the user running the tests.
    pub user: String,
    hang: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    sessions: Arc<Mutex<Vec<Group>>>,
}

impl SshServer {
    /// `None` when the programs are missing and the test is skipped.
    pub fn start() -> Option<SshServer> {
        if !available(
            "ssh remote tests",
            &[Path::new(SSHD), Path::new(SSH_KEYGEN)],
        ) {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("tend-sshd-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"), "");
        keygen(&d.join("client_key"), "");
        keygen(&d.join("stranger_key"), "");
        let authorized = std::fs::read_to_string(d.join("client_key.pub")).unwrap();
        std::fs::write(d.join("authorized_keys"), authorized).unwrap();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "HostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n\
                 PidFile none\nAllowTcpForwarding no\nX11Forwarding no\n\
                 PrintMotd no\nLogLevel VERBOSE\n",
                d = d.display()
            ),
        )
        .unwrap();
        if super::servers::is_root() {
            // sshd refuses to start without its privilege separation dir.
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| "root".into());

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let hang = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let sessions = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (hang, stop, sessions) = (hang.clone(), stop.clone(), sessions.clone());
            let dir = d.to_path_buf();
            std::thread::spawn(move || serve(listener, &dir, &hang, &stop, &sessions))
        };
        Some(SshServer {
            dir,
            port,
            user,
            hang,
            stop,
            thread: Some(thread),
            sessions,
        })
    }

    /// `ssh://user@127.0.0.1:port/<absolute path>`.
    pub fn url(&self, repo: &Path) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.display()
        )
    }

    /// The scp-like form with a port: `[user@127.0.0.1:port]:<path>`.
    pub fn scp_url(&self, repo: &Path) -> String {
        format!("[{}@127.0.0.1:{}]:{}", self.user, self.port, repo.display())
    }

    /// A known_hosts line trusting this server's key.
    pub fn known_hosts_line(&self) -> String {
        let key = std::fs::read_to_string(self.dir.path().join("host_key.pub")).unwrap();
        let mut fields = key.split_whitespace();
        let (kind, blob) = (fields.next().unwrap(), fields.next().unwrap());
        format!("[127.0.0.1]:{} {kind} {blob}\n", self.port)
    }

    /// The host key's fingerprint as `ssh-keygen -l` prints it (`SHA256:...`).
    pub fn fingerprint(&self) -> String {
        let out = Command::new(SSH_KEYGEN)
            .args(["-l", "-E", "sha256", "-f"])
            .arg(self.dir.path().join("host_key.pub"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace().nth(1).unwrap().to_string()
    }

    /// A key in authorized_keys, without a passphrase.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// A key the server does not know.
    pub fn stranger_key(&self) -> PathBuf {
        self.dir.path().join("stranger_key")
    }

    /// A copy of the authorized key, encrypted with `passphrase`.
    pub fn locked_key(&self, passphrase: &str) -> PathBuf {
        let p = self.dir.path().join("locked_key");
        std::fs::copy(self.client_key(), &p).unwrap();
        let out = Command::new(SSH_KEYGEN)
            .args(["-q", "-p", "-P", "", "-N", passphrase, "-f"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        p
    }

    /// While hung, connections are accepted and never answered.
    pub fn set_hung(&self, hung: bool) {
        self.hang.store(hung, Ordering::Relaxed);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.sessions.lock().unwrap().clear();
    }
}

fn keygen(path: &Path, passphrase: &str) {
    let out = Command::new(SSH_KEYGEN)
        .args([
            "-q",
            "-t",
            "ed25519",
            "-C",
            "tend-test",
            "-N",
            passphrase,
            "-f",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "ssh-keygen: {out:?}");
}

fn serve(
    listener: TcpListener,
    dir: &Path,
    hang: &AtomicBool,
    stop: &AtomicBool,
    sessions: &Mutex<Vec<Group>>,
) {
    let mut held = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok((stream, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        stream.set_nonblocking(false).unwrap();
        if hang.load(Ordering::Relaxed) {
            held.push(stream);
            continue;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("sshd.log"))
            .unwrap();
        let input = OwnedFd::from(stream.try_clone().unwrap());
        let output = OwnedFd::from(stream);
        let mut sshd = Command::new(SSHD);
        sshd.arg("-i")
            .arg("-e")
            .arg("-f")
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::from(input))
            .stdout(Stdio::from(output))
            .stderr(log);
        let mut sessions = sessions.lock().unwrap();
        sessions.retain_mut(|s| !s.exited());
        sessions.push(Group::spawn(sshd));
    }
}

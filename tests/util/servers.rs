//! What the remote-source tests share: finding the server binaries (or
//! saying why a test is skipped), free loopback ports, child processes in
//! their own process group, a listener that accepts and never answers, and
//! running `tend` against a remote address.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{tend_cmd, Daemon, Env, Run};

pub use super::gate::is_root;

/// Whether every program in `programs` exists. Missing ones fail the test
/// under CI or as root (scripts/test installs them then), and skip it with
/// a printed reason otherwise.
pub fn available(what: &str, programs: &[&Path]) -> bool {
    let missing: Vec<_> = programs.iter().filter(|p| !p.exists()).collect();
    if missing.is_empty() {
        return true;
    }
    super::can_run(
        false,
        &format!(
            "{what}: {missing:?} missing; scripts/test installs them \
             (apt-get install nginx fcgiwrap openssh-server openssl)"
        ),
    )
}

/// git-http-backend of the git on PATH, else Debian's.
pub fn git_http_backend() -> PathBuf {
    let exec_path = Command::new("git")
        .arg("--exec-path")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(dir) = exec_path {
        let p = Path::new(&dir).join("git-http-backend");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("/usr/lib/git-core/git-http-backend")
}

pub use super::ports::free_port;

/// Waits until something accepts connections on `port`.
pub fn wait_for_port(port: u16, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Runs a command as the leader of its own process group, so that dropping
/// it ends whatever it forked too.
pub struct Group {
    pub child: Child,
}

impl Group {
    pub fn spawn(mut command: Command) -> Group {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        Group { child }
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Only while the leader is unreaped is its id surely still this
        // group's: once reaped it may name someone else's.
        if let Ok(None) = self.child.try_wait() {
            if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
        let _ = self.child.wait();
    }
}

/// Accepts TCP connections on loopback and holds them open without ever
/// sending a byte: a remote that is reachable but hung.
pub struct BlackHole {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub accepted: Arc<Mutex<u32>>,
}

impl BlackHole {
    pub fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(Mutex::new(0));
        let thread = {
            let (stop, accepted) = (stop.clone(), accepted.clone());
            std::thread::spawn(move || {
                listener.set_nonblocking(true).unwrap();
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            *accepted.lock().unwrap() += 1;
                            held.push(stream);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                    // Read and drop what the client sends; never answer.
                    for s in &mut held {
                        let _ = s.set_nonblocking(true);
                        let _ = s.read(&mut [0u8; 4096]);
                    }
                }
            })
        };
        BlackHole {
            port,
            stop,
            thread: Some(thread),
            accepted,
        }
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The HOME tend runs with in these tests: empty, inside the state dir, so
/// no known_hosts or git config of the machine plays a part.
pub fn home(env: &Env) -> PathBuf {
    let home = env.state.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    home
}

/// `tend` with `--repo url`, the env's root and state dir, `-c config` when
/// given, and [`home`] as HOME.
pub fn remote_cmd(env: &Env, url: &str, config: Option<&Path>, args: &[&str]) -> Command {
    let mut c = tend_cmd();
    c.args(args)
        .arg("--repo")
        .arg(url)
        .arg("--root")
        .arg(env.root())
        .arg("--state-dir")
        .arg(env.state.path())
        .env("HOME", home(env))
        .env("GIT_CONFIG_NOSYSTEM", "1");
    if let Some(config) = config {
        c.arg("-c").arg(config);
    }
    c
}

pub fn run_remote(env: &Env, url: &str, config: Option<&Path>, args: &[&str]) -> Run {
    let out = remote_cmd(env, url, config, args)
        .output()
        .expect("run tend");
    Run::from(out)
}

/// `tend run` against a remote address, logging to `daemon.log` in the
/// state dir (where `Env::daemon_log` reads it).
pub fn remote_daemon(env: &Env, url: &str, config: Option<&Path>, args: &[&str]) -> Daemon {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.state.path().join("daemon.log"))
        .unwrap();
    let mut c = remote_cmd(
        env,
        url,
        config,
        &["run", "--listen", "127.0.0.1:0", "--log-level", "info"],
    );
    c.args(args).stdout(log.try_clone().unwrap()).stderr(log);
    Daemon {
        child: c.spawn().expect("start tend run"),
    }
}

//! `tend run` hosts for the tests that run several daemons at once (ha,
//! fleets, rollouts): each in a temp dir of its own with its root, state
//! dir, config and log, started as its test says, read through its status
//! and its HTTP port, and killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use super::http::{listening_addr, request, Metrics, Response};
use super::{tend_cmd, wait_until, Run};

pub struct Host {
    pub name: String,
    dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl Host {
    /// A host named `name`, not started: a temp dir whose name begins with
    /// `prefix`, with an empty root.
    pub fn new(prefix: &str, name: &str) -> Host {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        std::fs::create_dir(dir.path().join("root")).unwrap();
        Host {
            name: name.to_string(),
            dir,
            child: None,
        }
    }

    /// Writes its config.
    pub fn configure(&self, config: &str) {
        std::fs::write(self.config(), config).unwrap();
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("tend.yaml")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `tend run` on a free port, logging at info, with the host's state
    /// dir and config; the test adds the source and the rest.
    pub fn run_command(&self) -> Command {
        let mut c = tend_cmd();
        c.args(["run", "--listen", "127.0.0.1:0", "--log-level", "info"])
            .arg("--state-dir")
            .arg(self.state())
            .arg("-c")
            .arg(self.config());
        c
    }

    /// Starts `command` (from [`Host::run_command`]), its output appended
    /// to the host's log, which a restart keeps.
    pub fn start(&mut self, mut command: Command) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        command.stdout(log.try_clone().unwrap()).stderr(log);
        self.child = Some(command.spawn().expect("start tend run"));
    }

    /// Whether its process was started and not killed or stopped since.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// `tend status` of its state dir, as text (`json`: `-o json`).
    pub fn status_run(&self, json: bool) -> Run {
        let mut c = tend_cmd();
        c.arg("status").arg("--state-dir").arg(self.state());
        if json {
            c.args(["-o", "json"]);
        }
        Run::from(c.output().expect("run tend status"))
    }

    /// `tend status -o json`, parsed; `Null` when it printed none.
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.status_run(true).stdout).unwrap_or_default()
    }

    /// `tend status` as text.
    pub fn status_text(&self) -> String {
        self.status_run(false).stdout
    }

    /// The address it serves on, from the last `listening` line it logged.
    pub fn addr(&self) -> Option<SocketAddr> {
        listening_addr(&self.log())
    }

    /// What it answers to `GET path`; `None` before it listens or when it
    /// does not answer.
    pub fn get(&self, path: &str) -> Option<Response> {
        request(self.addr()?, "GET", path, &[], b"").ok()
    }

    pub fn metrics(&self) -> Option<Metrics> {
        Some(Metrics(self.get("/metrics")?.text()))
    }

    /// A sample of its /metrics with these labels.
    pub fn metric(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        self.metrics()?.value(name, with)
    }

    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = self.child.as_ref().expect("a running host").id() as i32;
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and how it exited, once it did within `secs`; killed
    /// after that either way.
    pub fn terminate(&mut self, secs: u64) -> Option<ExitStatus> {
        self.signal(rustix::process::Signal::TERM);
        let mut c = self.child.take()?;
        let mut status = None;
        wait_until(secs, || {
            status = c.try_wait().ok().flatten();
            status.is_some()
        });
        let _ = c.kill();
        let _ = c.wait();
        status
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill9();
    }
}

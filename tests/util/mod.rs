//! Fixtures for binary-driven tests: a real repository, a root, a state dir
//! and a sentinel directory outside the root, and a runner for `tend`.

#![allow(dead_code)]

pub mod age;
pub mod certs;
pub mod container;
pub mod docker;
pub mod etcd;
pub mod gate;
pub mod host;
pub mod http;
pub mod https;
pub mod plugins;
pub mod ports;
pub mod repo;
pub mod sandbox;
pub mod secrets;
pub mod servers;
pub mod signing;
pub mod sshd;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[allow(unused_imports)]
pub use gate::{can_run, strict};
pub use repo::TestRepo;

/// The outcome of one `tend` invocation.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Everything printed, for searching.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn tend_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tend")
}

/// A command for `tend` with a clean environment (no TEND_* from outside).
pub fn tend_cmd() -> Command {
    let mut c = Command::new(tend_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("TEND_") || k == "NO_COLOR" {
            c.env_remove(k);
        }
    }
    c
}

pub struct Env {
    pub repo: TestRepo,
    pub root: tempfile::TempDir,
    pub state: tempfile::TempDir,
    /// Outside the root: attacks aim here, and it must never change.
    pub sentinel: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let sentinel = tempfile::Builder::new()
            .prefix("tend-sentinel-")
            .tempdir()
            .unwrap();
        std::fs::write(sentinel.path().join("precious"), "do not touch\n").unwrap();
        Env {
            repo: TestRepo::new(),
            root: tempfile::Builder::new()
                .prefix("tend-root-")
                .tempdir()
                .unwrap(),
            state: tempfile::Builder::new()
                .prefix("tend-state-")
                .tempdir()
                .unwrap(),
            sentinel,
        }
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn at(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = tend_cmd();
        c.args(args);
        // Commands that read only the state dir take no source or root.
        if !matches!(
            args.first(),
            Some(&("status" | "pause" | "resume" | "unpin"))
        ) {
            c.arg("--repo")
                .arg(self.repo.url())
                .arg("--root")
                .arg(self.root.path());
        }
        c.arg("--state-dir").arg(self.state.path());
        c
    }

    /// Runs `tend <args> --repo .. --root .. --state-dir ..` (only
    /// `--state-dir` for status, pause and resume).
    pub fn tend(&self, args: &[&str]) -> Run {
        Run::from(self.cmd(args).output().expect("run tend"))
    }

    /// [`Env::tend`] with one environment variable set.
    pub fn tend_with(&self, var: (&str, &str), args: &[&str]) -> Run {
        Run::from(self.cmd(args).env(var.0, var.1).output().expect("run tend"))
    }

    /// Runs tend with exactly these arguments (no defaults added).
    pub fn raw(&self, args: &[&str]) -> Run {
        Run::from(tend_cmd().args(args).output().expect("run tend"))
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.at(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    pub fn sentinel_snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        snapshot_tree(self.sentinel.path())
    }
}

/// Every file under `dir` with its bytes, sorted; symlinks as their target.
pub fn snapshot_tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p.clone());
                out.push((p, b"<dir>".to_vec()));
            } else if ft.is_symlink() {
                // An entry that vanished since the listing (a writer's temp
                // file renamed away) is simply not there.
                if let Ok(target) = std::fs::read_link(&p) {
                    out.push((p.clone(), target.into_os_string().into_encoded_bytes()));
                }
            } else if let Ok(bytes) = std::fs::read(&p) {
                out.push((p.clone(), bytes));
            }
        }
    }
    out.sort();
    out
}

/// (inode, mtime ns, ctime ns) of a path, not following a final symlink.
pub fn stamp(p: &Path) -> (u64, i64, i64) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (
        m.ino(),
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ctime() * 1_000_000_000 + m.ctime_nsec(),
    )
}

/// Stamps of every entry under a directory.
pub fn stamps(dir: &Path) -> Vec<(PathBuf, (u64, i64, i64))> {
    snapshot_tree(dir)
        .into_iter()
        .map(|(p, _)| {
            let s = stamp(&p);
            (p, s)
        })
        .collect()
}

pub fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Polls `check` every 50 ms until it holds or `secs` pass.
pub fn wait_until(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    check()
}

/// A `tend run` process; killed when dropped.
pub struct Daemon {
    pub child: std::process::Child,
}

impl Daemon {
    pub fn signal(&self, sig: i32) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        let sig = rustix::process::Signal::from_named_raw(sig).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    /// SIGTERM, then the exit code (None if it did not exit within `secs`).
    pub fn stop(&mut self, secs: u64) -> Option<i32> {
        self.signal(libc_sigterm());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn libc_sigterm() -> i32 {
    15
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Env {
    /// Writes a config file with these extra lines (YAML) and returns its path.
    pub fn config(&self, extra: &str) -> PathBuf {
        let p = self.state.path().join("tend.yaml");
        std::fs::write(&p, extra).unwrap();
        p
    }

    /// Starts `tend run` with the given extra arguments, logs to a file in
    /// the state dir.
    pub fn daemon(&self, args: &[&str]) -> Daemon {
        self.daemon_under(&[], args)
    }

    /// [`Env::daemon`], started through `wrapper` (a command that ends by
    /// exec'ing its arguments, so the child is tend itself).
    pub fn daemon_under(&self, wrapper: &[&str], args: &[&str]) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.path().join("daemon.log"))
            .unwrap();
        let mut tend = self.cmd(&["run", "--listen", "127.0.0.1:0"]);
        if !args.contains(&"--log-level") {
            tend.args(["--log-level", "info"]);
        }
        tend.args(args);
        let mut c = match wrapper.split_first() {
            None => tend,
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest)
                    .arg(tend.get_program())
                    .args(tend.get_args())
                    .env_clear()
                    .envs(std::env::vars_os().filter(|(k, _)| {
                        let k = k.to_string_lossy();
                        !k.starts_with("TEND_") && k != "NO_COLOR"
                    }))
                    .envs(tend.get_envs().filter_map(|(k, v)| Some((k, v?))));
                c
            }
        };
        c.stdout(log.try_clone().unwrap()).stderr(log);
        Daemon {
            child: c.spawn().expect("start tend run"),
        }
    }
    /// The one mirror under the state dir.
    pub fn mirror_dir(&self) -> PathBuf {
        let mirrors = self.state.path().join("mirrors");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&mirrors)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs.pop().unwrap()
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("daemon.log")).unwrap_or_default()
    }

    /// Full passes the daemon has ended so far, by its (text) log. A test
    /// that must see something hold across passes waits for this to grow
    /// by two: the first pass counted may have begun before the moment it
    /// cares about, the second began after.
    pub fn full_passes(&self) -> usize {
        self.daemon_log()
            .lines()
            .filter(|l| l.contains("pass ended") && l.contains("full=true"))
            .count()
    }

    /// Full passes ended after the last log line containing `mark` (a
    /// line the daemon writes before the pass it cares about begins).
    pub fn full_passes_after(&self, mark: &str) -> usize {
        let log = self.daemon_log();
        let lines: Vec<&str> = log.lines().collect();
        let Some(at) = lines.iter().rposition(|l| l.contains(mark)) else {
            return 0;
        };
        lines[at..]
            .iter()
            .filter(|l| l.contains("pass ended") && l.contains("full=true"))
            .count()
    }

    /// `tend status -o json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let r = self.raw(&[
            "status",
            "-o",
            "json",
            "--state-dir",
            self.state.path().to_str().unwrap(),
        ]);
        serde_json::from_str(&r.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// The status entry of one resource.
    pub fn resource(&self, id: &str) -> Option<serde_json::Value> {
        self.status()["resources"]
            .as_array()?
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
    }
}

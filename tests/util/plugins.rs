//! Helpers for tests of exec plugins: where the fixture plugins are, and the
//! worker processes the replicas plugin keeps.

use std::path::{Path, PathBuf};

use super::{tend_cmd, Run};

pub fn plugin(name: &str) -> String {
    format!("{}/fixtures/plugins/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `tend plugin check -- COMMAND...`.
pub fn check(command: &[&str]) -> Run {
    let out = tend_cmd()
        .args(["plugin", "check", "--timeout", "5s", "--"])
        .args(command)
        .output()
        .expect("run tend plugin check");
    Run::from(out)
}

/// Live pids named by the replicas plugin's pid files under `dir/name`.
pub fn workers(dir: &Path, name: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir.join(name)) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().ends_with(".pid") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        if matches!(state, Some(s) if s != "Z" && s != "X") {
            pids.push(pid);
        }
    }
    pids.sort();
    pids
}

/// Kills every worker left under a replicas store when a test ends.
pub struct Workers(pub PathBuf);

impl Drop for Workers {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            for pid in workers(&self.0, &entry.file_name().to_string_lossy()) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
        }
    }
}

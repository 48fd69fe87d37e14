//! A sandbox for commands that must leave nothing behind: HOME,
//! XDG_STATE_HOME and TMPDIR in empty directories and, as root, an empty
//! /var/lib for tend alone in a private mount namespace, so the default
//! state dir (/var/lib/tend) would show up there.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use super::{servers, snapshot_tree, Run};

/// Where tend could leave something: each must stay empty.
pub struct Sandbox {
    pub home: tempfile::TempDir,
    state_home: tempfile::TempDir,
    tmp: tempfile::TempDir,
    var_lib: tempfile::TempDir,
    /// Run tend as this user instead (its default state dir is then under
    /// XDG_STATE_HOME).
    user: Option<u32>,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = || {
            tempfile::Builder::new()
                .prefix("tend-sandbox-")
                .tempdir()
                .unwrap()
        };
        Sandbox {
            home: dir(),
            state_home: dir(),
            tmp: dir(),
            var_lib: dir(),
            user: None,
        }
    }

    /// A sandbox whose tend runs as `uid` (which owns its directories).
    pub fn for_user(uid: u32) -> Sandbox {
        let mut s = Sandbox::new();
        for d in [&s.home, &s.state_home, &s.tmp, &s.var_lib] {
            std::os::unix::fs::chown(d.path(), Some(uid), Some(uid)).unwrap();
        }
        s.user = Some(uid);
        s
    }

    /// Runs tend in `cwd`. As root, /var/lib is replaced by an empty
    /// directory for tend alone, so the default state dir
    /// (/var/lib/tend) would show up there.
    pub fn tend(&self, cwd: &Path, args: &[&str]) -> Run {
        let mut c = if let Some(uid) = self.user {
            let mut c = Command::new("setpriv");
            let id = uid.to_string();
            c.args(["--reuid", &id, "--regid", &id, "--clear-groups"])
                .arg(super::tend_bin());
            c
        } else if servers::is_root() {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg("mount --bind \"$0\" /var/lib && exec \"$@\"")
                .arg(self.var_lib.path())
                .arg(super::tend_bin());
            c
        } else {
            Command::new(super::tend_bin())
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("TEND_") || k == "NO_COLOR" {
                c.env_remove(k);
            }
        }
        let out = c
            .args(args)
            .current_dir(cwd)
            .env("HOME", self.home.path())
            .env("XDG_STATE_HOME", self.state_home.path())
            .env("TMPDIR", self.tmp.path())
            .output()
            .expect("run tend");
        Run::from(out)
    }

    pub fn assert_untouched(&self) {
        for (what, dir) in [
            ("HOME", &self.home),
            ("XDG_STATE_HOME", &self.state_home),
            ("TMPDIR", &self.tmp),
            ("/var/lib", &self.var_lib),
        ] {
            let left: Vec<_> = snapshot_tree(dir.path()).into_iter().map(|e| e.0).collect();
            assert!(left.is_empty(), "{what} holds {left:?}");
        }
    }
}

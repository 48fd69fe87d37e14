//! `TestRepo`: a real Git repository in a temp directory, built with the
//! `git` command line as a user would.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TestRepo {
    dir: tempfile::TempDir,
}

impl TestRepo {
    pub fn new() -> TestRepo {
        let dir = tempfile::Builder::new()
            .prefix("tend-repo-")
            .tempdir()
            .expect("temp dir");
        let repo = TestRepo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["config", "user.name", "Test"]);
        repo.git(&["config", "user.email", "test@example.com"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `file://` URL of the repository.
    pub fn url(&self) -> String {
        format!("file://{}", self.path().display())
    }

    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.path())
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn full(&self, rel: &str) -> PathBuf {
        let p = self.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        p
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> &TestRepo {
        std::fs::write(self.full(rel), content).expect("write file");
        self
    }

    pub fn executable(&self, rel: &str, content: impl AsRef<[u8]>) -> &TestRepo {
        use std::os::unix::fs::PermissionsExt;
        let p = self.full(rel);
        std::fs::write(&p, content).expect("write file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        self
    }

    pub fn symlink(&self, rel: &str, target: &str) -> &TestRepo {
        let p = self.full(rel);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, p).expect("symlink");
        self
    }

    pub fn remove(&self, rel: &str) -> &TestRepo {
        let p = self.path().join(rel);
        if p.is_dir() {
            std::fs::remove_dir_all(p).expect("remove dir");
        } else {
            std::fs::remove_file(p).expect("remove file");
        }
        self
    }

    /// Stages everything and commits; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }
}

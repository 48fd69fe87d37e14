//! `TestRepo`: a real Git repository in a temp directory, built with the
//! `git` command line as a user would, isolated from the host's git
//! configuration.
//!
//! One file serves both kinds of tests: the binary-driven tests under
//! `tests/` reach it through `tests/util`, and the crate's unit tests include
//! it as `crate::test_repo`. It therefore uses nothing but std and
//! `tempfile`. Not every test binary uses every method.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A non-bare repository in `repo/` of a temp dir; the temp dir around it
/// is a place outside the repository for sentinels.
pub struct TestRepo {
    tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl TestRepo {
    /// A repository whose HEAD is `main`.
    pub fn new() -> TestRepo {
        TestRepo::with_branch("main")
    }

    /// A repository whose HEAD is `branch`. The identity and the settings
    /// commits need are written to the repository's own config, so a test
    /// can change them there like any user.
    pub fn with_branch(branch: &str) -> TestRepo {
        let tmp = tempfile::Builder::new()
            .prefix("tend-repo-")
            .tempdir()
            .expect("temp dir");
        let dir = tmp.path().join("repo");
        std::fs::create_dir(&dir).expect("create repo dir");
        let repo = TestRepo { tmp, dir };
        repo.git(&["init", "-q", "-b", branch]);
        repo.git(&["config", "user.name", "Test"]);
        repo.git(&["config", "user.email", "test@example.com"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        repo.git(&["config", "tag.gpgsign", "false"]);
        repo.git(&["config", "core.symlinks", "true"]);
        repo
    }

    /// The work tree.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The temp dir holding the repository: a place outside it for
    /// sentinels, removed with it.
    pub fn outside(&self) -> &Path {
        self.tmp.path()
    }

    /// `file://` URL of the repository.
    pub fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    /// git in the work tree, reading no system or global configuration.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("git");
        command
            .args(args)
            .current_dir(&self.dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", &self.dir);
        command
    }

    /// Runs git in the work tree; panics with its stderr on failure and
    /// returns its trimmed stdout.
    pub fn git(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("run git");
        Self::checked(args, out)
    }

    /// Runs git in the work tree with `input` on its standard input, as
    /// [`TestRepo::git`] does otherwise.
    pub fn git_with_input(&self, args: &[&str], input: &[u8]) -> String {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run git");
        child
            .stdin
            .take()
            .expect("git's stdin")
            .write_all(input)
            .expect("write git's stdin");
        let out = child.wait_with_output().expect("wait for git");
        Self::checked(args, out)
    }

    fn checked(args: &[&str], out: std::process::Output) -> String {
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `rel` in the work tree, with its parent directories made.
    fn full(&self, rel: &str) -> PathBuf {
        let p = self.dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        p
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> &TestRepo {
        std::fs::write(self.full(rel), content).expect("write file");
        self
    }

    /// Writes `rel` with mode 0755.
    pub fn executable(&self, rel: &str, content: impl AsRef<[u8]>) -> &TestRepo {
        use std::os::unix::fs::PermissionsExt;
        let p = self.full(rel);
        std::fs::write(&p, content).expect("write file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        self
    }

    /// Makes `rel` a symlink to `target`, replacing what was there.
    pub fn symlink(&self, rel: &str, target: &str) -> &TestRepo {
        let p = self.full(rel);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, p).expect("symlink");
        self
    }

    pub fn remove(&self, rel: &str) -> &TestRepo {
        let p = self.dir.join(rel);
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
        self.head()
    }

    /// The commit id of HEAD.
    pub fn head(&self) -> String {
        self.rev("HEAD")
    }

    /// The commit id `rev` names.
    pub fn rev(&self, rev: &str) -> String {
        self.git(&["rev-parse", &format!("{rev}^{{commit}}")])
    }
}

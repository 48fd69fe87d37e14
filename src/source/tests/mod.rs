//! Tests of the Git puller against real repositories made with the `git`
//! command line in temp dirs, fetched through file:// URLs and plain paths.

mod fetch;
mod links;
mod refs;
mod tree;
mod url;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use git2::Oid;
use tempfile::TempDir;

use super::{Mirror, SourceSpec};

/// A non-bare repository built with the git CLI, isolated from the host's
/// git configuration.
pub(super) struct TestRepo {
    _tmp: TempDir,
    dir: PathBuf,
}

impl TestRepo {
    /// A repository whose HEAD is `branch`.
    pub(super) fn with_branch(branch: &str) -> TestRepo {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("repo");
        std::fs::create_dir(&dir).unwrap();
        let repo = TestRepo { _tmp: tmp, dir };
        repo.git(&["init", "-q", "-b", branch]);
        repo
    }

    pub(super) fn new() -> TestRepo {
        TestRepo::with_branch("main")
    }

    pub(super) fn path(&self) -> &Path {
        &self.dir
    }

    /// The temp dir holding the repository: a place outside it for sentinels.
    pub(super) fn outside(&self) -> &Path {
        self._tmp.path()
    }

    pub(super) fn file_url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    /// Runs git in the work tree; panics with its stderr on failure.
    pub(super) fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(&self.dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args([
                "-c",
                "user.name=Test",
                "-c",
                "user.email=test@example.com",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(["-c", "tag.gpgsign=false", "-c", "core.symlinks=true"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    pub(super) fn write(&self, rel: &str, content: &str) {
        let path = self.dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub(super) fn symlink(&self, rel: &str, target: &str) {
        let path = self.dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    pub(super) fn executable(&self, rel: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.dir.join(rel), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }

    /// Stages everything and commits; returns the new commit id.
    pub(super) fn commit(&self, message: &str) -> Oid {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.head()
    }

    pub(super) fn head(&self) -> Oid {
        self.rev("HEAD")
    }

    pub(super) fn rev(&self, rev: &str) -> Oid {
        Oid::from_str(&self.git(&["rev-parse", &format!("{rev}^{{commit}}")])).unwrap()
    }
}

/// A spec for a test repository with a short timeout.
pub(super) fn spec(repo: &str, reference: Option<&str>) -> SourceSpec {
    SourceSpec {
        repo: repo.to_string(),
        reference: reference.map(str::to_string),
        timeout: Duration::from_secs(30),
        auth: Default::default(),
    }
}

/// Opens a mirror of `repo` at `reference` in `state` and fetches it.
pub(super) fn fetched(state: &Path, repo: &TestRepo, reference: Option<&str>) -> (Mirror, Oid) {
    let mirror = Mirror::open(state, spec(&repo.file_url(), reference)).unwrap();
    let commit = mirror.fetch().unwrap();
    (mirror, commit)
}

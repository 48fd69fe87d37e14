//! The container sidecar on a real Docker engine (issue 16): the image built
//! here from the top-level Dockerfile with local bases, non-root, healthy
//! once the first pass has ended and unhealthy while frozen; and the compose
//! scenario of docs/sidecar/compose.yaml (see tests/container/), with a
//! smart-HTTP Git server, the sidecar in link mode and a real reader.
//!
//! Only Docker networks these tests create are used; no host port is
//! published.

mod util;

use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::process::Command;

use util::docker::{docker, docker_out, health, health_log, images, repo_dir, Scratch};
use util::{wait_until, TestRepo};

/// The user the image runs as.
const TEND_UID: u32 = 65532;

/// A bare repository on the host that a container mounts or a Git server
/// serves, fed by pushes from a work repository.
struct Remote {
    dir: tempfile::TempDir,
    work: TestRepo,
}

impl Remote {
    fn new() -> Remote {
        let dir = tempfile::Builder::new()
            .prefix("tend-remote-")
            .tempdir()
            .unwrap();
        let remote = Remote {
            dir,
            work: TestRepo::new(),
        };
        let bare = remote.bare();
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&bare)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::set_permissions(
            remote.dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        remote
    }

    /// Owned by the image's user, for a container that mounts it: libgit2
    /// refuses a local repository another user owns.
    fn owned_by_tend(self) -> Remote {
        chown(self.bare(), Some(TEND_UID), Some(TEND_UID)).unwrap();
        self
    }

    /// The directory holding `site.git`.
    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn bare(&self) -> PathBuf {
        self.dir.path().join("site.git")
    }

    /// Commits the work repository's changes and pushes them; the commit id.
    fn push(&self, message: &str) -> String {
        let commit = self.work.commit(message);
        let bare = self.bare();
        // git pushes only into a repository of its own user; the container
        // reading it directly needs it to be its own.
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&bare).unwrap());
        chown(&bare, Some(0), Some(0)).unwrap();
        self.work
            .git(&["push", "-q", "--force", bare.to_str().unwrap(), "HEAD:main"]);
        chown(&bare, Some(owner), Some(owner)).unwrap();
        commit
    }
}

/// A host directory a container's user can write.
fn writable_dir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    chown(d.path(), Some(TEND_UID), Some(TEND_UID)).unwrap();
    d
}

#[test]
fn the_image_is_built_here_small_non_root_and_answers_version() {
    let Some(images) = images() else { return };
    let version = docker(&["run", "--rm", &images.tend, "--version"]);
    assert_eq!(version, format!("tend {}", env!("CARGO_PKG_VERSION")));

    let config = |field: &str| docker(&["image", "inspect", "-f", field, &images.tend]);
    assert_eq!(config("{{.Config.User}}"), format!("{TEND_UID}:{TEND_UID}"));
    assert_eq!(config("{{json .Config.Entrypoint}}"), r#"["tend"]"#);
    assert!(
        config("{{json .Config.Healthcheck.Test}}").contains(r#""tend","health""#),
        "{}",
        config("{{json .Config.Healthcheck}}")
    );
    assert!(config("{{json .Config.Volumes}}").contains("/var/lib/tend"));
    assert!(!config(r#"{{index .Config.Labels "tend.image"}}"#).is_empty());
    let size: f64 = config("{{.Size}}").parse().unwrap();
    assert!(size < 40e6, "image of {:.1} MB, over 40 MB", size / 1e6);

    // Made from this machine's parts: the bases carry the keys
    // scripts/build-image gave them.
    for (base, label) in [
        ("tend-local/tend-builder:bookworm", "tend.builder"),
        ("tend-local/tend-runtime:bookworm", "tend.runtime"),
    ] {
        let key = docker(&[
            "image",
            "inspect",
            "-f",
            &format!("{{{{index .Config.Labels \"{label}\"}}}}"),
            base,
        ]);
        assert!(!key.is_empty(), "{base} has no {label} label");
    }

    // Unchanged sources: nothing is built again.
    let id = config("{{.Id}}");
    let again = Command::new(repo_dir().join("scripts/build-image"))
        .current_dir(repo_dir())
        .output()
        .unwrap();
    assert!(again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(!said.contains("building"), "rebuilt: {said}");
    assert_eq!(config("{{.Id}}"), id);
}

#[test]
fn the_container_is_healthy_after_the_first_pass_and_unhealthy_while_frozen() {
    let Some(images) = images() else { return };
    let mut scratch = Scratch::new("health");
    let remote = Remote::new().owned_by_tend();
    let data = writable_dir("tend-data-");
    let name = scratch.container("tend");
    let repo_mount = format!("{}:/repo:ro", remote.bare().display());
    let data_mount = format!("{}:/data", data.path().display());
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--read-only",
        "--health-interval",
        "1s",
        "--health-timeout",
        "5s",
        "--health-retries",
        "2",
        "-v",
        &repo_mount,
        "-v",
        &data_mount,
        &images.tend,
        "run",
        "--repo",
        "/repo",
        "--mirror",
        "--root",
        "/data",
        "--interval",
        "1s",
    ]);
    let logs = || {
        let out = docker_out(&["logs", "--tail", "40", &name]);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    // Nothing to apply yet (the repository has no commit): the loop runs,
    // no pass ends, so not healthy.
    assert!(
        wait_until(60, || health_log(&name)
            .contains("first pass has not ended")),
        "{}\n{}",
        health_log(&name),
        logs()
    );
    assert_ne!(health(&name), "healthy");

    remote.work.write("index.html", "one\n");
    remote.push("one");
    assert!(
        wait_until(120, || health(&name) == "healthy"),
        "{}: {}\n{}",
        health(&name),
        health_log(&name),
        logs()
    );
    assert_eq!(
        std::fs::read_to_string(data.path().join("index.html")).unwrap(),
        "one\n"
    );

    // The daemon's process runs as the image's user.
    let pid = docker(&["inspect", "-f", "{{.State.Pid}}", &name]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uids.split_whitespace().skip(1).collect::<Vec<_>>(),
        vec![TEND_UID.to_string(); 4],
        "{uids}"
    );

    // Frozen (tend is PID 1; the checks run beside it, not frozen).
    docker(&["kill", "--signal", "STOP", &name]);
    assert!(
        wait_until(60, || health(&name) == "unhealthy"),
        "{}: {}",
        health(&name),
        health_log(&name)
    );
    assert!(
        health_log(&name).contains("no answer within"),
        "{}",
        health_log(&name)
    );
    docker(&["kill", "--signal", "CONT", &name]);
    assert!(
        wait_until(60, || health(&name) == "healthy"),
        "{}: {}",
        health(&name),
        health_log(&name)
    );
}

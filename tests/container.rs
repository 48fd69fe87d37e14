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
    let remote = Remote::new().owned_by_tend();
    let data = writable_dir("tend-data-");
    // After them: the container goes before the directories it mounts.
    let mut scratch = Scratch::new("health");
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

/// docs/sidecar/compose.yaml with tests/container/compose.test.yaml: a Git
/// server serving `remote`, tend-init, the tend sidecar and the reader app
/// (`mode`: pair or tree), the published volume on `site`.
struct Scenario {
    // First: the project goes before the directories it mounts.
    compose: util::docker::Compose,
    remote: Remote,
    site: tempfile::TempDir,
    results: tempfile::TempDir,
}

impl Scenario {
    fn new(test: &str, mode: &str, remote: Remote) -> Option<Scenario> {
        let images = images()?;
        let compose = Command::new("docker-compose").arg("version").output();
        if !util::can_run(
            compose.is_ok_and(|o| o.status.success()),
            "no docker-compose (apt-get install docker-compose)",
        ) {
            return None;
        }
        let site = writable_dir("tend-site-");
        let results = tempfile::Builder::new()
            .prefix("tend-results-")
            .tempdir()
            .unwrap();
        let fixtures = repo_dir().join("tests/container");
        let env = vec![
            ("TEND_IMAGE", images.tend.clone()),
            ("BASE_IMAGE", images.base.clone()),
            ("APP_IMAGE", images.base.clone()),
            ("APP_MODE", mode.to_string()),
            ("TEND_REPO", "http://git/site.git".to_string()),
            ("TEND_INTERVAL", "1s".to_string()),
            ("TEND_HEALTH_INTERVAL", "1s".to_string()),
            ("TEST_REMOTE", remote.root().display().to_string()),
            ("TEST_FIXTURES", fixtures.display().to_string()),
            ("TEST_RESULTS", results.path().display().to_string()),
            ("TEST_SITE", site.path().display().to_string()),
        ];
        let compose = Scratch::new(test).project(
            &[
                &repo_dir().join("docs/sidecar/compose.yaml"),
                &repo_dir().join("tests/container/compose.test.yaml"),
            ],
            env,
        );
        let s = Scenario {
            compose,
            remote,
            site,
            results,
        };
        s.compose.run(&["up", "-d"]);
        let tend = s.id("tend");
        assert!(
            wait_until(120, || health(&tend) == "healthy"),
            "the sidecar never became healthy: {}\n{}",
            health_log(&tend),
            s.logs()
        );
        assert!(
            wait_until(60, || s.reads()["reads"].as_u64() > Some(0)),
            "the application never read the tree: {}\n{}",
            s.reads(),
            s.logs()
        );
        Some(s)
    }

    fn id(&self, service: &str) -> String {
        self.compose.id(service)
    }

    fn logs(&self) -> String {
        self.compose.logs()
    }

    fn results(&self, name: &str) -> serde_json::Value {
        std::fs::read_to_string(self.results.path().join(name))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(serde_json::Value::Null)
    }

    /// What the application's reader counted so far.
    fn reads(&self) -> serde_json::Value {
        self.results("reads.json")
    }

    /// The reload calls the application received.
    fn hooks(&self) -> Vec<serde_json::Value> {
        self.results("hooks.json")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Where `<root>/current` points, relative to the root.
    fn linked(&self) -> Option<String> {
        std::fs::read_link(self.site.path().join("current"))
            .ok()
            .map(|p| p.display().to_string())
    }

    /// Trees under construction (`.tend/revs/.<commit>.tmp`).
    fn unfinished(&self) -> Vec<String> {
        std::fs::read_dir(self.site.path().join(".tend/revs"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `tend status -o json` inside the sidecar.
    fn status(&self) -> serde_json::Value {
        let out = docker_out(&["exec", &self.id("tend"), "tend", "status", "-o", "json"]);
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }
}

/// Every file of the tree at `<site>/current` carries its token, and there
/// are `count` of them.
fn complete_tree(site: &Path) -> Result<String, String> {
    let tree = site.join("current");
    let read =
        |rel: &str| std::fs::read_to_string(tree.join(rel)).map_err(|e| format!("{rel}: {e}"));
    let token = read("token")?;
    let count: usize = read("count")?
        .trim()
        .parse()
        .map_err(|e| format!("count: {e}"))?;
    for i in 0..count {
        let got = read(&format!("files/{i}"))?;
        if got != token {
            return Err(format!("files/{i} is {got:?}, the tree's token {token:?}"));
        }
    }
    let found = std::fs::read_dir(tree.join("files"))
        .map_err(|e| e.to_string())?
        .count();
    if found != count {
        return Err(format!("{found} files, {count} declared"));
    }
    Ok(token)
}

#[test]
fn compose_a_reader_never_sees_two_revisions_and_each_commit_reaches_the_reload_hook() {
    const COMMITS: usize = 50;
    let remote = Remote::new();
    let mark = |i: usize| {
        for f in ["token", "a", "b"] {
            remote.work.write(f, format!("{i}\n"));
        }
    };
    mark(0);
    for i in 0..300 {
        remote
            .work
            .write(&format!("static/{i}"), format!("unchanged {i}\n"));
    }
    let first = remote.push("0");
    let Some(s) = Scenario::new("pair", "pair", remote) else {
        return;
    };
    assert_eq!(s.linked(), Some(format!(".tend/revs/{first}")));

    let mut commits = Vec::new();
    for i in 1..=COMMITS {
        for f in ["token", "a", "b"] {
            s.remote.work.write(f, format!("{i}\n"));
        }
        let commit = s.remote.push(&i.to_string());
        let arrived = wait_until(60, || {
            s.hooks()
                .iter()
                .any(|h| h["body"]["revision"] == commit.as_str())
        });
        assert!(
            arrived,
            "commit {i} ({commit}) never reached the reload endpoint: {:?}\n{}",
            s.hooks(),
            s.logs()
        );
        commits.push(commit);
    }
    // The reader's counts from after the last commit.
    assert!(wait_until(30, || {
        s.reads()["tokens"]
            .as_array()
            .is_some_and(|t| t.last().is_some_and(|l| l == &format!("{COMMITS}\n")))
    }));
    let reads = s.reads();
    assert_eq!(reads["mixed"], 0, "pairs from two revisions: {reads}");
    assert!(reads["reads"].as_u64().unwrap() > COMMITS as u64, "{reads}");
    let seen = reads["tokens"].as_array().unwrap().len();
    assert!(
        seen > COMMITS / 2,
        "the reader saw {seen} revisions: it was not reading while they landed: {reads}"
    );

    // Each commit was announced once the link pointed at its tree, with the
    // three files it changed; calls may repeat (at least once), in order.
    let hooks = s.hooks();
    let mut announced: Vec<&str> = Vec::new();
    for h in &hooks {
        let revision = h["body"]["revision"].as_str().unwrap_or_default();
        if announced.last() != Some(&revision) {
            announced.push(revision);
        }
        assert_eq!(h["path"], "/reload", "{h}");
        assert_eq!(h["body"]["changed"], 3, "{h}");
        assert_eq!(
            h["linked"].as_str(),
            Some(format!(".tend/revs/{revision}").as_str()),
            "the hook came before the switch: {h}"
        );
    }
    let expected: Vec<&str> = commits.iter().map(String::as_str).collect();
    assert_eq!(announced, expected, "{hooks:?}");
}

#[test]
fn compose_sigkill_of_the_sidecar_mid_update_leaves_a_complete_tree_and_restart_converges() {
    const FILES: usize = 1500;
    let remote = Remote::new();
    let fill = |remote: &Remote, token: usize| {
        remote.work.write("token", format!("{token}\n"));
        remote.work.write("count", format!("{FILES}\n"));
        for i in 0..FILES {
            remote
                .work
                .write(&format!("files/{i}"), format!("{token}\n"));
        }
    };
    fill(&remote, 0);
    remote.push("0");
    let Some(s) = Scenario::new("kill", "tree", remote) else {
        return;
    };
    assert_eq!(complete_tree(s.site.path()), Ok("0\n".into()));
    let tend = s.id("tend");

    let mut caught = 0;
    let mut last = String::new();
    for token in 1..=5 {
        fill(&s.remote, token);
        let commit = s.remote.push(&token.to_string());
        let target = format!(".tend/revs/{commit}");
        // Kill as soon as the new tree is being built, before the switch.
        let mut mid_update = false;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if !s.unfinished().is_empty() && s.linked().as_deref() != Some(&target) {
                docker(&["kill", "--signal", "KILL", &tend]);
                mid_update = s.linked().as_deref() != Some(&target);
                break;
            }
            if s.linked().as_deref() == Some(&target) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if mid_update {
            caught += 1;
            // Down, mid-update: the link is on the previous, whole tree.
            assert!(wait_until(30, || docker(&[
                "inspect",
                "-f",
                "{{.State.Running}}",
                &tend
            ]) == "false"));
            let before = complete_tree(s.site.path());
            assert!(before.is_ok(), "after SIGKILL: {before:?}");
            assert_ne!(s.linked().as_deref(), Some(target.as_str()));
            docker(&["start", &tend]);
        }
        assert!(
            wait_until(120, || s.linked().as_deref() == Some(&target)),
            "never converged to {commit}: link {:?}\n{}",
            s.linked(),
            s.logs()
        );
        assert_eq!(complete_tree(s.site.path()), Ok(format!("{token}\n")));
        last = commit;
        if caught >= 2 {
            break;
        }
    }
    assert!(caught > 0, "no SIGKILL landed during an update");

    // Converged: healthy again, the applied revision the last commit, all
    // in sync, no unfinished tree left, at most link_keep (1) old tree.
    assert!(
        wait_until(60, || health(&tend) == "healthy"),
        "{}",
        health_log(&tend)
    );
    assert!(
        wait_until(60, || s.status()["source"]["applied_revision"]
            == last.as_str()),
        "{}",
        s.status()
    );
    assert!(
        wait_until(60, || s.unfinished().is_empty()),
        "{:?}",
        s.unfinished()
    );
    let trees = std::fs::read_dir(s.site.path().join(".tend/revs"))
        .unwrap()
        .count();
    assert!(trees <= 2, "{trees} trees kept");
    let reads = s.reads();
    assert_eq!(
        reads["incomplete"], 0,
        "a reader saw an incomplete tree: {reads}"
    );
    assert_eq!(reads["no_link"], 0, "a reader found no link: {reads}");
    assert!(reads["reads"].as_u64().unwrap() > 0, "{reads}");
}

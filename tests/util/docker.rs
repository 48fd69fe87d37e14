//! A real Docker engine for the container tests: the image built once per
//! test binary by scripts/build-image (reused by its content key), the
//! local base image for servers and readers, and names of containers,
//! volumes and compose projects removed when the test ends.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The tend image and the local Debian image, or None (test skipped) where
/// skipping is allowed and there is no Docker engine.
pub struct Images {
    pub tend: String,
    pub base: String,
}

pub fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn engine_up() -> bool {
    Command::new("docker")
        .args(["info", "-f", "{{.ServerVersion}}"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Builds (or reuses) the images; every test of the binary shares one
/// build. Fails the test when the build fails.
pub fn images() -> Option<&'static Images> {
    static IMAGES: OnceLock<Result<Images, String>> = OnceLock::new();
    if !super::can_run(engine_up(), "no Docker engine (docker info failed)") {
        return None;
    }
    let built = IMAGES.get_or_init(|| {
        let script = |name: &str| {
            let out = Command::new(repo_dir().join("scripts").join(name))
                .current_dir(repo_dir())
                .output()
                .map_err(|e| format!("scripts/{name}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "scripts/{name} failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        Ok(Images {
            tend: script("build-image")?,
            base: script("base-image")?,
        })
    });
    match built {
        Ok(images) => Some(images),
        Err(e) => panic!("{e}"),
    }
}

/// `docker ARGS`, which must succeed; its stdout, trimmed.
pub fn docker(args: &[&str]) -> String {
    let out = docker_out(args);
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn docker_out(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("run docker")
}

/// A container's health status (`starting`, `healthy`, `unhealthy`).
pub fn health(container: &str) -> String {
    let out = docker_out(&["inspect", "-f", "{{.State.Health.Status}}", container]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The last health check outputs, for messages.
pub fn health_log(container: &str) -> String {
    let out = docker_out(&[
        "inspect",
        "-f",
        "{{range .State.Health.Log}}{{.ExitCode}}: {{.Output}}{{end}}",
        container,
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Names unique to this test process, and everything made under them
/// removed on drop.
pub struct Scratch {
    prefix: String,
    containers: Vec<String>,
    volumes: Vec<String>,
}

impl Scratch {
    pub fn new(test: &str) -> Scratch {
        Scratch {
            prefix: format!("tend-test-{}-{test}", std::process::id()),
            containers: Vec::new(),
            volumes: Vec::new(),
        }
    }

    /// A name for a container, removed at the end.
    pub fn container(&mut self, what: &str) -> String {
        let name = format!("{}-{what}", self.prefix);
        self.containers.push(name.clone());
        name
    }

    /// A named volume, made now, removed at the end.
    pub fn volume(&mut self, what: &str) -> String {
        let name = format!("{}-{what}", self.prefix);
        docker(&["volume", "create", &name]);
        self.volumes.push(name.clone());
        name
    }

    /// A compose project of `files` with the variables they interpolate,
    /// taken down with its containers, networks and volumes when dropped.
    pub fn project(&self, files: &[&Path], env: Vec<(&'static str, String)>) -> Compose {
        Compose {
            name: self.prefix.replace(['-', '_'], "").to_ascii_lowercase(),
            files: files.iter().map(|f| f.display().to_string()).collect(),
            env,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker_out(&["rm", "-f", "-v", c]);
        }
        for v in &self.volumes {
            let _ = docker_out(&["volume", "rm", "-f", v]);
        }
    }
}

/// One docker-compose project; `down -v` when dropped.
pub struct Compose {
    pub name: String,
    files: Vec<String>,
    /// What the files interpolate: every call needs it, `down` too.
    env: Vec<(&'static str, String)>,
}

impl Compose {
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("docker-compose");
        c.args(["--ansi", "never", "-p", &self.name]);
        for f in &self.files {
            c.args(["-f", f]);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v.as_str())));
        c
    }

    /// `docker-compose ARGS`, which must succeed; its stdout.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().expect("run docker-compose");
        assert!(
            out.status.success(),
            "docker-compose {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The container id of a service.
    pub fn id(&self, service: &str) -> String {
        self.run(&["ps", "-q", service])
    }

    /// Every service's log, for messages.
    pub fn logs(&self) -> String {
        self.cmd()
            .args(["logs", "--no-color", "--tail", "60"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let down = self.cmd().args(["down", "-v", "-t", "1"]).output();
        if let Some(o) = down.ok().filter(|o| !o.status.success()) {
            eprintln!(
                "docker-compose down of {} failed: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

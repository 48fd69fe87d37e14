//! A Docker container whose PID 1 is systemd, from the local Debian base
//! image (scripts/base-image: debootstrap and `docker import`, no registry),
//! driven through `docker exec`; removed when dropped.

use std::path::Path;
use std::process::Command;

pub const BASE_IMAGE: &str = "tend-local/debian:bookworm";

/// The capability names by bit number, as docker's --cap-add takes them
/// (up to AUDIT_READ: Docker 20.10 refuses the newer PERFMON, BPF and
/// CHECKPOINT_RESTORE).
const CAPS: [&str; 38] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
];

/// The capabilities this process may pass on. `--privileged` asks for all
/// of them, which fails where the engine itself runs without some (seen:
/// no CAP_SYS_RESOURCE), so the container gets exactly these.
fn our_caps() -> Vec<&'static str> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let bits = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    CAPS.iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, c)| *c)
        .collect()
}

/// What one command in the container printed.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn docker(args: &[&str]) -> Out {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Whether a Docker engine answers.
pub fn docker_works() -> bool {
    Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Makes the base image when it is missing (scripts/base-image is
/// idempotent; it takes minutes the first time).
pub fn ensure_base_image() {
    if docker(&["image", "inspect", BASE_IMAGE]).code == 0 {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/base-image");
    let st = Command::new(script)
        .status()
        .expect("run scripts/base-image");
    assert!(st.success(), "scripts/base-image failed");
}

pub struct Systemd {
    pub id: String,
}

impl Systemd {
    /// Boots systemd in a new container and waits until it has started
    /// its units.
    pub fn boot(name_prefix: &str) -> Systemd {
        let name = format!("{name_prefix}-{}", std::process::id());
        let _ = docker(&["rm", "-f", &name]);
        let mut args: Vec<String> = ["run", "-d", "--name", &name, "--hostname", "tend-test"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for cap in our_caps() {
            args.extend(["--cap-add".into(), cap.into()]);
        }
        args.extend(
            [
                "--security-opt",
                "seccomp=unconfined",
                "--security-opt",
                "apparmor=unconfined",
                "--tmpfs",
                "/run",
                "--tmpfs",
                "/run/lock",
                "-v",
                "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                BASE_IMAGE,
                "/lib/systemd/systemd",
            ]
            .map(String::from),
        );
        let argv: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let run = docker(&argv);
        assert_eq!(run.code, 0, "docker run: {run:?}");
        let c = Systemd {
            id: run.stdout.trim().to_string(),
        };
        // Until PID 1 has its bus up, systemctl cannot even ask.
        let up = || c.sh("systemctl is-system-running --wait");
        let booted = |o: &Out| o.stdout.contains("running") || o.stdout.contains("degraded");
        super::wait_until(60, || booted(&up()));
        let up = up();
        assert!(
            booted(&up),
            "systemd did not come up: {up:?}\n{:?}",
            docker(&["logs", &c.id])
        );
        c
    }

    /// Runs a bash script in the container.
    pub fn sh(&self, script: &str) -> Out {
        docker(&["exec", &self.id, "bash", "-c", script])
    }

    /// [`Systemd::sh`], which must succeed; its stdout.
    pub fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert_eq!(out.code, 0, "{script}: {out:?}");
        out.stdout
    }

    /// Copies a file in (not onto a tmpfs such as /run: docker cp writes
    /// the container's own file system).
    pub fn copy_in(&self, from: &Path, to: &str) {
        let out = docker(&["cp", from.to_str().unwrap(), &format!("{}:{to}", self.id)]);
        assert_eq!(out.code, 0, "docker cp: {out:?}");
    }

    pub fn write(&self, path: &str, content: &str) {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("file");
        std::fs::write(&local, content).unwrap();
        self.ok(&format!("mkdir -p \"$(dirname {path})\""));
        self.copy_in(&local, path);
    }

    /// `systemctl show -p NAME --value UNIT`.
    pub fn prop(&self, unit: &str, name: &str) -> String {
        self.ok(&format!("systemctl show -p {name} --value {unit}"))
            .trim()
            .to_string()
    }
}

impl Drop for Systemd {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.id]);
    }
}

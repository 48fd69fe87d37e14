//! Age keys and files for the tests of secrets kept in Git (issue 26),
//! made by the Debian `age` CLI and ssh-keygen, as users make them.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use super::http::tool;

/// Keys and sealed files, made by `age`, `age-keygen` and `ssh-keygen` in a
/// directory of their own, away from the state dir and the repository.
pub struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    /// `None` (skipped, outside CI and root) when the tools are missing.
    pub fn new() -> Option<Keys> {
        tool("age", "age")?;
        tool("age-keygen", "age")?;
        tool("ssh-keygen", "openssh-client")?;
        Some(Keys {
            dir: tempfile::Builder::new()
                .prefix("tend-age-")
                .tempdir()
                .unwrap(),
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A fresh X25519 identity file, mode 0600; its public key.
    pub fn x25519(&self, name: &str) -> String {
        let path = self.path(name);
        run(Command::new("age-keygen").arg("-o").arg(&path));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let public = run(Command::new("age-keygen").arg("-y").arg(&path));
        String::from_utf8(public).unwrap().trim().to_string()
    }

    /// A fresh SSH ed25519 key (`name`, `name.pub`); its public line.
    pub fn ssh(&self, name: &str) -> String {
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(self.path(name)));
        std::fs::read_to_string(self.path(&format!("{name}.pub")))
            .unwrap()
            .trim()
            .to_string()
    }

    /// `plain` sealed by `age ARGS`.
    pub fn seal(&self, plain: &str, args: &[&str]) -> Vec<u8> {
        let input = self.path("plain.in");
        std::fs::write(&input, plain).unwrap();
        let sealed = run(Command::new("age").args(args).arg(&input));
        std::fs::remove_file(&input).unwrap();
        sealed
    }
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A `file` declaration of `path` from the age file `source`, mode 0600.
pub fn decl(path: &str, source: &str) -> String {
    format!("kind: file\npath: {path}\nsource: {source}\ndecrypt: age\nmode: \"0600\"\n")
}

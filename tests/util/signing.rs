//! Real signing keys for tests: SSH keys made by `ssh-keygen` (git signs
//! with them through `gpg.format=ssh`) and OpenPGP keys made by GnuPG in a
//! temp GNUPGHOME; commits and tags signed by `git` itself.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use super::TestRepo;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a signing tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An ed25519 key pair made by ssh-keygen.
pub struct SshKey {
    pub dir: tempfile::TempDir,
    pub private: PathBuf,
    /// `ssh-ed25519 AAAA... comment`
    pub public: String,
}

impl SshKey {
    /// `None` (skipping, or failing under CI) without ssh-keygen.
    pub fn new(name: &str) -> Option<SshKey> {
        super::http::tool("ssh-keygen", "openssh-client")?;
        let dir = tempfile::Builder::new()
            .prefix("tend-key-")
            .tempdir()
            .unwrap();
        let private = dir.path().join(name);
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&private));
        let public = std::fs::read_to_string(private.with_extension("pub"))
            .unwrap()
            .trim()
            .to_string();
        Some(SshKey {
            dir,
            private,
            public,
        })
    }

    /// The line of an allowed_signers file for this key, with `options`
    /// (`namespaces="git"`, `valid-before=...`) when not empty.
    pub fn allowed_line(&self, principal: &str, options: &str) -> String {
        match options.is_empty() {
            true => format!("{principal} {}\n", self.public),
            false => format!("{principal} {options} {}\n", self.public),
        }
    }

    /// Makes `repo` sign commits and tags with this key, as git does with
    /// `gpg.format=ssh`.
    pub fn sign_with(&self, repo: &TestRepo) {
        repo.git(&["config", "gpg.format", "ssh"]);
        repo.git(&["config", "user.signingkey", self.private.to_str().unwrap()]);
    }

    /// The SHA256 fingerprint ssh-keygen shows.
    pub fn fingerprint(&self) -> String {
        let out = run(Command::new("ssh-keygen")
            .arg("-lf")
            .arg(self.private.with_extension("pub")));
        out.split_whitespace().nth(1).unwrap().to_string()
    }
}

/// A GnuPG home with one signing key.
pub struct GpgKey {
    pub home: tempfile::TempDir,
    pub fingerprint: String,
    /// `gpg` with this home, for git's `gpg.program`.
    pub program: PathBuf,
}

impl GpgKey {
    /// `None` (skipping, or failing under CI) without gpg.
    pub fn new(uid: &str) -> Option<GpgKey> {
        super::http::tool("gpg", "gnupg")?;
        // Short: gpg-agent's socket path must fit in a sockaddr.
        let home = tempfile::Builder::new()
            .prefix("tg-")
            .tempdir_in("/tmp")
            .unwrap();
        let gpg = |args: &[&str]| {
            run(Command::new("gpg")
                .env("GNUPGHOME", home.path())
                .args([
                    "--batch",
                    "--no-tty",
                    "--pinentry-mode",
                    "loopback",
                    "--passphrase",
                    "",
                ])
                .args(args))
        };
        gpg(&["--quick-gen-key", uid, "ed25519", "sign", "never"]);
        let listing = gpg(&["--list-keys", "--with-colons", uid]);
        let fingerprint = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .and_then(|l| l.split(':').find(|f| f.len() == 40))
            .expect("a fingerprint")
            .to_string();
        let program = home.path().join("gpg-here");
        std::fs::write(
            &program,
            format!(
                "#!/bin/sh\nexec gpg --homedir {} --batch --pinentry-mode loopback --passphrase '' \"$@\"\n",
                home.path().display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(GpgKey {
            home,
            fingerprint,
            program,
        })
    }

    /// The armored public key.
    pub fn export(&self) -> String {
        run(Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args(["--batch", "--armor", "--export", &self.fingerprint]))
    }

    pub fn sign_with(&self, repo: &TestRepo) {
        repo.git(&["config", "gpg.format", "openpgp"]);
        repo.git(&["config", "gpg.program", self.program.to_str().unwrap()]);
        repo.git(&["config", "user.signingkey", &self.fingerprint]);
    }
}

impl Drop for GpgKey {
    fn drop(&mut self) {
        // The agent gpg started for this home goes with it.
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", self.home.path())
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

/// Stages everything and makes a signed commit (`git commit -S`).
pub fn signed_commit(repo: &TestRepo, message: &str) -> String {
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-S", "--allow-empty", "-m", message]);
    repo.git(&["rev-parse", "HEAD"])
}

/// The same commit with another tree: message, author, committer and the
/// `gpgsig` header kept, as someone rewriting the object would.
pub fn with_tree(repo: &TestRepo, commit: &str, tree: &str) -> String {
    let raw = repo.git(&["cat-file", "commit", commit]);
    let mut lines: Vec<String> = raw.lines().map(str::to_string).collect();
    assert!(lines[0].starts_with("tree "), "{raw}");
    lines[0] = format!("tree {tree}");
    let text = lines.join("\n") + "\n";
    let file = repo.path().join(".git").join("forged-commit");
    std::fs::write(&file, text).unwrap();
    repo.git(&["hash-object", "-t", "commit", "-w", file.to_str().unwrap()])
}

/// Writes `text` to a file in `dir` and returns its path.
pub fn file_in(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

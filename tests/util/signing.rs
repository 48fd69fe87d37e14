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
    /// `--faked-system-time` for all it does, when made in the past.
    faked: Option<String>,
}

impl GpgKey {
    /// `None` (skipping, or failing under CI) without gpg.
    pub fn new(uid: &str) -> Option<GpgKey> {
        GpgKey::made(uid, "never", None)
    }

    /// A key made at `faked` (gpg's `--faked-system-time`, `20200101T000000`)
    /// that expires after `expire` (`1d`); git signs with it at that time
    /// too, so the signature is sound and the key long expired.
    pub fn expired(uid: &str, faked: &str, expire: &str) -> Option<GpgKey> {
        GpgKey::made(uid, expire, Some(format!("{faked}!")))
    }

    fn made(uid: &str, expire: &str, faked: Option<String>) -> Option<GpgKey> {
        super::http::tool("gpg", "gnupg")?;
        // Short: gpg-agent's socket path must fit in a sockaddr.
        let home = tempfile::Builder::new()
            .prefix("tg-")
            .tempdir_in("/tmp")
            .unwrap();
        let program = home.path().join("gpg-here");
        let time = faked
            .as_ref()
            .map(|t| format!("--faked-system-time {t} "))
            .unwrap_or_default();
        std::fs::write(
            &program,
            format!(
                "#!/bin/sh\nexec gpg --homedir {} --batch --pinentry-mode loopback --passphrase '' {time}\"$@\"\n",
                home.path().display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut key = GpgKey {
            home,
            fingerprint: String::new(),
            program,
            faked,
        };
        key.gpg(&["--quick-gen-key", uid, "ed25519", "sign", expire]);
        key.fingerprint = key.fingerprints().remove(0);
        Some(key)
    }

    /// Runs gpg on this home, without a passphrase.
    pub fn gpg(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("gpg");
        cmd.env("GNUPGHOME", self.home.path()).args([
            "--batch",
            "--no-tty",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
        ]);
        if let Some(t) = &self.faked {
            cmd.args(["--faked-system-time", t]);
        }
        run(cmd.args(args))
    }

    /// Drives one of gpg's dialogs (`--edit-key`, `--gen-revoke`) with
    /// `answers`, a line each, as `--command-fd` reads them.
    fn dialog(&self, args: &[&str], answers: &str) {
        use std::io::Write;
        let mut child = Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args([
                "--no-tty",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(["--command-fd", "0", "--status-fd", "2"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run gpg");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(answers.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "gpg {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The primary key's and subkeys' fingerprints, primary first.
    pub fn fingerprints(&self) -> Vec<String> {
        self.gpg(&["--list-keys", "--with-colons"])
            .lines()
            .filter_map(|l| l.strip_prefix("fpr:"))
            .filter_map(|l| l.split(':').find(|f| f.len() == 40))
            .map(str::to_string)
            .collect()
    }

    /// Adds a signing subkey and returns its fingerprint.
    pub fn add_signing_subkey(&self) -> String {
        self.gpg(&[
            "--quick-add-key",
            &self.fingerprint,
            "ed25519",
            "sign",
            "never",
        ]);
        self.fingerprints().pop().expect("a subkey")
    }

    /// A revocation certificate for the primary key, made now with
    /// `reason` (`none`, `compromised`, `superseded`, `retired`), not yet
    /// imported: the key still signs until [`GpgKey::import`].
    pub fn revocation(&self, reason: &str) -> PathBuf {
        let code = menu(reason);
        let out = self.home.path().join(format!("revoke-{reason}.asc"));
        let out_arg = out.to_str().unwrap();
        self.dialog(
            &[
                "--armor",
                "--output",
                out_arg,
                "--gen-revoke",
                &self.fingerprint,
            ],
            &format!("y\n{code}\nrevoked by the test\n\ny\n"),
        );
        out
    }

    pub fn import(&self, file: &Path) {
        self.gpg(&["--import", file.to_str().unwrap()]);
    }

    /// Revokes the first subkey (`revkey` in `--edit-key`) for `reason`.
    pub fn revoke_subkey(&self, reason: &str) {
        let code = menu(reason);
        self.dialog(
            &["--edit-key", &self.fingerprint],
            &format!("key 1\nrevkey\ny\n{code}\n\ny\nsave\n"),
        );
    }

    /// The armored public key.
    pub fn export(&self) -> String {
        self.gpg(&["--armor", "--export", &self.fingerprint])
    }

    pub fn sign_with(&self, repo: &TestRepo) {
        self.sign_with_key(repo, &self.fingerprint);
    }

    /// Signs with the given key or subkey (a fingerprint with `!`: that
    /// one exactly).
    pub fn sign_with_key(&self, repo: &TestRepo, key: &str) {
        repo.git(&["config", "gpg.format", "openpgp"]);
        repo.git(&["config", "gpg.program", self.program.to_str().unwrap()]);
        repo.git(&["config", "user.signingkey", key]);
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

/// The number of a revocation reason in gpg's menu (not the reason's code
/// in the signature: the menu puts compromised first).
fn menu(reason: &str) -> u8 {
    match reason {
        "none" => 0,
        "compromised" => 1,
        "superseded" => 2,
        "retired" => 3,
        other => panic!("no revocation reason {other:?} in gpg's menu"),
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

/// What `git verify-commit` (or `verify-tag`, with `kind`) says of `rev`,
/// checked by gpg at the real time against `key`'s home: whether it
/// accepts, and its words.
pub fn git_verify(repo: &TestRepo, key: &GpgKey, kind: &str, rev: &str) -> (bool, String) {
    let out = Command::new("git")
        .current_dir(repo.path())
        .env("GNUPGHOME", key.home.path())
        .args(["-c", "gpg.program=gpg", kind, rev])
        .output()
        .expect("run git");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The revision tend refused last, as `tend status` shows it.
pub fn refused(env: &super::Env) -> serde_json::Value {
    env.status()["source"]["refused"].clone()
}

/// A sync refused before any change: exit 2, the reason said, the root as
/// it was.
pub fn assert_refused(env: &super::Env, run: &super::Run, reason: &str, kept: &str) {
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains(reason), "{reason}: {run:?}");
    assert_eq!(env.read("v"), kept, "nothing of a refused revision applies");
    assert_eq!(refused(env)["reason"], reason, "{}", env.status());
}

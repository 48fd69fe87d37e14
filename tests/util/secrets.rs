//! A canary secret, random per run, and the search for it in everything tend
//! shows or stores: command output, `tend status -o json`, the audit log,
//! the daemon log and every file under the state dir.

use std::path::{Path, PathBuf};

use super::{Env, Run};

pub struct Canary {
    value: String,
    /// Holds the files the secret is written to, away from the state dir.
    dir: tempfile::TempDir,
}

impl Canary {
    pub fn new() -> Canary {
        let bytes: [u8; 12] = rand::random();
        Canary {
            value: format!("canary{}", hex::encode(bytes)),
            dir: tempfile::Builder::new()
                .prefix("tend-secrets-")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    /// Writes `content` to a file outside the state dir and returns its path.
    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// A file holding the canary itself (a token, a passphrase).
    pub fn secret_file(&self, name: &str) -> PathBuf {
        self.file(name, &format!("{}\n", self.value))
    }

    pub fn assert_not_in(&self, what: &str, text: &str) {
        assert!(
            !text.contains(&self.value),
            "the secret leaked into {what}:\n{text}"
        );
    }

    pub fn assert_not_in_run(&self, what: &str, run: &Run) {
        self.assert_not_in(&format!("{what} (stdout)"), &run.stdout);
        self.assert_not_in(&format!("{what} (stderr)"), &run.stderr);
    }

    /// Every place tend keeps or shows state: `status -o json` (and text),
    /// the audit log, the daemon log, and the raw bytes of every file under
    /// the state dir (ledger database and its WAL, mirror, config, logs).
    pub fn assert_not_stored(&self, env: &Env) {
        let state = env.state.path().to_str().unwrap();
        for output in ["json", "text"] {
            let status = env.raw(&["status", "-o", output, "--state-dir", state]);
            self.assert_not_in_run(&format!("tend status -o {output}"), &status);
        }
        let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl"));
        self.assert_not_in("the audit log", &audit.unwrap_or_default());
        self.assert_not_in("the daemon log", &env.daemon_log());
        for file in files_under(env.state.path()) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(
                !contains(&bytes, self.value.as_bytes()),
                "the secret is stored in {}",
                file.display()
            );
        }
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

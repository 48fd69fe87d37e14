//! Identity files, read and checked the way ssh reads a private key: one
//! readable by anyone but its owner is refused. Each file keeps its own
//! answer, so a failure names the file and what it said.

use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

type Identity = Box<dyn age::Identity + Send + Sync>;

/// One configured identity file and what reading it gave.
pub struct KeyFile {
    path: PathBuf,
    loaded: Result<Vec<Identity>, String>,
    unread: Unread,
}

/// Whether an identity file could not be read at all, and how: a file
/// that is there but refused (its mode, its form) is neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unread {
    /// Read (or refused for what it holds).
    No,
    /// Not there: a human's to supply, seen at the next read.
    Missing,
    /// There but unreadable now (an I/O error, a mount gone, a path that
    /// cannot be followed): it may come back by itself.
    Unreadable,
}

impl KeyFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn identities(&self) -> Result<&[Identity], &str> {
        self.loaded.as_deref().map_err(String::as_str)
    }
    pub fn unread(&self) -> Unread {
        self.unread
    }
}

/// The configured identity files, read once per revision so a file fixed
/// (its mode, a mount that came back) counts at the next read.
#[derive(Default)]
pub struct Keyring {
    files: Vec<KeyFile>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.files.iter().map(|k| &k.path))
            .finish()
    }
}

/// No identity at all: what a host with none configured decrypts with.
pub static NO_KEYS: Keyring = Keyring { files: Vec::new() };

impl Keyring {
    pub fn load(paths: &[PathBuf]) -> Keyring {
        let files = paths
            .iter()
            .map(|path| {
                let (loaded, unread) = match read(path) {
                    Ok(ids) => (Ok(ids), Unread::No),
                    Err((why, unread)) => (Err(why), unread),
                };
                KeyFile {
                    path: path.clone(),
                    loaded,
                    unread,
                }
            })
            .collect();
        Keyring { files }
    }

    pub fn files(&self) -> &[KeyFile] {
        &self.files
    }
}

fn unread(e: std::io::Error) -> (String, Unread) {
    match e.kind() {
        std::io::ErrorKind::NotFound => (format!("cannot be read: {e}"), Unread::Missing),
        _ => (format!("cannot be read: {e}"), Unread::Unreadable),
    }
}

fn read(path: &Path) -> Result<Vec<Identity>, (String, Unread)> {
    let refused = |why: String| (why, Unread::No);
    read_identities(path).map_err(|e| match e {
        Err(io) => unread(io),
        Ok(why) => refused(why),
    })
}

/// An identity file's identities; an I/O error (`Err`) or a refusal of
/// what it holds (`Ok`).
fn read_identities(path: &Path) -> Result<Vec<Identity>, Result<String, std::io::Error>> {
    let meta = std::fs::metadata(path).map_err(Err)?;
    if !meta.is_file() {
        return Err(Ok("is not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Ok(format!(
            "is readable by others than its owner (mode {mode:04o}); refused, as ssh does: chmod 600 it"
        )));
    }
    let bytes = zeroize::Zeroizing::new(std::fs::read(path).map_err(Err)?);
    let text = std::str::from_utf8(&bytes).map_err(|_| Ok("is not text".to_string()))?;
    if text.trim_start().starts_with("-----BEGIN") {
        return ssh(text, path).map_err(Ok);
    }
    let file = age::IdentityFile::from_buffer(BufReader::new(text.as_bytes()))
        .map_err(|e| Ok(format!("is not an age identity file: {e}")))?;
    let identities = file
        .into_identities()
        .map_err(|_| Ok("holds an identity tend cannot use (plugins are not supported)".into()))?;
    if identities.is_empty() {
        return Err(Ok("holds no identity".into()));
    }
    Ok(identities)
}

fn ssh(text: &str, path: &Path) -> Result<Vec<Identity>, String> {
    let name = Some(path.display().to_string());
    let identity = age::ssh::Identity::from_buffer(BufReader::new(text.as_bytes()), name)
        .map_err(|e| format!("is not an SSH private key age can use: {e}"))?;
    match identity {
        age::ssh::Identity::Unencrypted(_) => Ok(vec![Box::new(identity)]),
        age::ssh::Identity::Encrypted(_) => {
            Err("is a passphrase-protected SSH key; tend needs one it can read unattended".into())
        }
        age::ssh::Identity::Unsupported(_) => {
            Err("is an SSH key of a type age does not support".into())
        }
    }
}

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
}

impl KeyFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn identities(&self) -> Result<&[Identity], &str> {
        self.loaded.as_deref().map_err(String::as_str)
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
            .map(|path| KeyFile {
                path: path.clone(),
                loaded: read(path),
            })
            .collect();
        Keyring { files }
    }

    pub fn files(&self) -> &[KeyFile] {
        &self.files
    }
}

fn read(path: &Path) -> Result<Vec<Identity>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "is readable by others than its owner (mode {mode:04o}); refused, as ssh does: chmod 600 it"
        ));
    }
    let bytes =
        zeroize::Zeroizing::new(std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?);
    let text = std::str::from_utf8(&bytes).map_err(|_| "is not text".to_string())?;
    if text.trim_start().starts_with("-----BEGIN") {
        return ssh(text, path);
    }
    let file = age::IdentityFile::from_buffer(BufReader::new(text.as_bytes()))
        .map_err(|e| format!("is not an age identity file: {e}"))?;
    let identities = file
        .into_identities()
        .map_err(|_| "holds an identity tend cannot use (plugins are not supported)".to_string())?;
    if identities.is_empty() {
        return Err("holds no identity".into());
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

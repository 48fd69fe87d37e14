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
    loaded: Result<Vec<Identity>, KeyFileError>,
}

/// Why an identity file gives no identity; each says it of the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot be read: {0}")]
    Io(#[source] std::io::Error),
    #[error("is not a regular file")]
    NotAFile,
    #[error(
        "is readable by others than its owner (mode {0:04o}); refused, as ssh does: chmod 600 it"
    )]
    OpenToOthers(u32),
    #[error("is not text")]
    NotText,
    #[error("is not an age identity file: {0}")]
    NotAge(#[source] std::io::Error),
    #[error("holds an identity tend cannot use (plugins are not supported)")]
    Plugin,
    #[error("holds no identity")]
    Empty,
    #[error("is not an SSH private key age can use: {0}")]
    NotSsh(#[source] std::io::Error),
    #[error("is a passphrase-protected SSH key; tend needs one it can read unattended")]
    Passphrase,
    #[error("is an SSH key of a type age does not support")]
    SshType,
}

impl KeyFileError {
    /// Whether the file could be read at all: one that is there but
    /// refused (its mode, its form) was.
    fn unread(&self) -> Unread {
        match self {
            KeyFileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => Unread::Missing,
            KeyFileError::Io(_) => Unread::Unreadable,
            _ => Unread::No,
        }
    }
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
    pub fn identities(&self) -> Result<&[Identity], &KeyFileError> {
        self.loaded.as_deref()
    }
    pub fn unread(&self) -> Unread {
        self.loaded
            .as_ref()
            .err()
            .map_or(Unread::No, KeyFileError::unread)
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

/// An identity file's identities, or why it gives none.
fn read(path: &Path) -> Result<Vec<Identity>, KeyFileError> {
    let meta = std::fs::metadata(path).map_err(KeyFileError::Io)?;
    if !meta.is_file() {
        return Err(KeyFileError::NotAFile);
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::OpenToOthers(mode));
    }
    let bytes = zeroize::Zeroizing::new(std::fs::read(path).map_err(KeyFileError::Io)?);
    let text = std::str::from_utf8(&bytes).map_err(|_| KeyFileError::NotText)?;
    if text.trim_start().starts_with("-----BEGIN") {
        return ssh(text, path);
    }
    let file = age::IdentityFile::from_buffer(BufReader::new(text.as_bytes()))
        .map_err(KeyFileError::NotAge)?;
    let identities = file.into_identities().map_err(|_| KeyFileError::Plugin)?;
    if identities.is_empty() {
        return Err(KeyFileError::Empty);
    }
    Ok(identities)
}

fn ssh(text: &str, path: &Path) -> Result<Vec<Identity>, KeyFileError> {
    let name = Some(path.display().to_string());
    let identity = age::ssh::Identity::from_buffer(BufReader::new(text.as_bytes()), name)
        .map_err(KeyFileError::NotSsh)?;
    match identity {
        age::ssh::Identity::Unencrypted(_) => Ok(vec![Box::new(identity)]),
        age::ssh::Identity::Encrypted(_) => Err(KeyFileError::Passphrase),
        age::ssh::Identity::Unsupported(_) => Err(KeyFileError::SshType),
    }
}

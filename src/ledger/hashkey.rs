//! The per-state-dir key behind the hashes shown for sensitive content, so a
//! hash cannot be checked against guessed content without the key.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use super::{create_state_dir, sync_dir, LedgerError};

pub const KEY_FILE: &str = "hash.key";
const KEY_LEN: usize = 32;

pub struct HashKey {
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

impl HashKey {
    /// Loads the key, creating it on first use. Two processes creating it at
    /// once agree on one key: the file appears whole, and only once.
    pub fn load_or_create(state_dir: &Path) -> Result<HashKey, LedgerError> {
        if let Some(key) = HashKey::load(state_dir)? {
            return Ok(key);
        }
        create_state_dir(state_dir)?;
        let path = state_dir.join(KEY_FILE);
        let mut key = [0u8; KEY_LEN];
        rand::rng().fill_bytes(&mut key);
        let tmp = state_dir.join(format!(".tend-{:016x}.tmp", rand::random::<u64>()));
        let written = write_key(&tmp, &key).and_then(|()| fs::hard_link(&tmp, &path));
        let _ = fs::remove_file(&tmp);
        match written {
            Ok(()) => {
                sync_dir(state_dir)?;
                Ok(HashKey { key })
            }
            // Another process got there first; its key is the key.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => HashKey::load(state_dir)?
                .ok_or_else(|| LedgerError::io(&path, std::io::ErrorKind::NotFound.into())),
            Err(e) => Err(LedgerError::io(&path, e)),
        }
    }

    /// Loads the key if one exists; a reader never creates it.
    pub fn load(state_dir: &Path) -> Result<Option<HashKey>, LedgerError> {
        let path = state_dir.join(KEY_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LedgerError::io(&path, e)),
        };
        let mut key = [0u8; KEY_LEN];
        hex::decode_to_slice(text.trim(), &mut key).map_err(|_| LedgerError::Corrupt {
            path: path.clone(),
            detail: format!("expected {} hex digits", KEY_LEN * 2),
        })?;
        Ok(Some(HashKey { key }))
    }

    /// `hmac-sha256:` and the first 16 hex digits of HMAC-SHA256(key, bytes).
    pub fn hash(&self, bytes: &[u8]) -> String {
        format!("hmac-sha256:{}", &self.hex(bytes)[..16])
    }

    /// All 64 hex digits of HMAC-SHA256(key, bytes).
    pub fn hex(&self, bytes: &[u8]) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(bytes);
        hex::encode(mac.finalize().into_bytes())
    }
}

fn write_key(tmp: &Path, key: &[u8; KEY_LEN]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)?;
    file.write_all(format!("{}\n", hex::encode(key)).as_bytes())?;
    file.sync_all()
}

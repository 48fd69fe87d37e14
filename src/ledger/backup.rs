//! Content-addressed backups of what tend overwrites or prunes, under
//! `<state_dir>/backups/<2 hex>/<hex>`, durable before they are named. The
//! address is an HMAC-SHA256 of the content under the state dir's key
//! ([`HashKey`]): the audit log and the status page name backups, and an
//! unkeyed hash of what was there (a hand-edited secret, say) could be
//! checked against guesses. References from before (`sha256:`) still read.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{create_state_dir, sync_dir, HashKey, LedgerError};
use crate::model::{Backup, ResourceId};

pub const BACKUP_DIR: &str = "backups";
const REF_PREFIX: &str = "hmac-sha256:";
/// References written before backups were keyed.
const OLD_REF_PREFIX: &str = "sha256:";

pub struct BackupStore {
    dir: PathBuf,
    key: HashKey,
}

/// One stored backup, as the pruner sees it.
struct Blob {
    path: PathBuf,
    size: u64,
    modified: SystemTime,
}

type Res<T> = Result<T, LedgerError>;

impl BackupStore {
    pub fn new(state_dir: &Path) -> Res<BackupStore> {
        create_state_dir(state_dir)?;
        let key = HashKey::load_or_create(state_dir)?;
        let dir = state_dir.join(BACKUP_DIR);
        create_private_dir(&dir)?;
        Ok(BackupStore { dir, key })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `bytes` and returns `hmac-sha256:<hex>`. The blob is on disk, synced,
    /// under its final name before this returns. Saving content already
    /// stored rewrites nothing; it only renews the blob's age for pruning.
    pub fn save_bytes(&self, bytes: &[u8]) -> Res<String> {
        let hex = self.key.hex(bytes);
        let shard = self.dir.join(&hex[..2]);
        let path = shard.join(&hex);
        if let Ok(meta) = fs::metadata(&path) {
            if meta.len() == bytes.len() as u64 {
                // A refresh that fails only shortens this backup's life.
                let _ = File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                return Ok(format!("{REF_PREFIX}{hex}"));
            }
        }
        if create_private_dir(&shard)? {
            sync_dir(&self.dir)?;
        }
        let tmp = shard.join(format!(".tend-{:016x}.tmp", rand::random::<u64>()));
        let written = write_synced(&tmp, bytes).and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(LedgerError::io(&path, e));
        }
        sync_dir(&shard)?;
        Ok(format!("{REF_PREFIX}{hex}"))
    }

    /// The bytes behind a reference from [`BackupStore::save_bytes`], checked
    /// against their hash.
    pub fn read(&self, reference: &str) -> Res<Vec<u8>> {
        let (hex, keyed) = parse_reference(reference).ok_or_else(|| LedgerError::BadReference {
            path: self.dir.clone(),
            reference: reference.to_string(),
        })?;
        let path = self.dir.join(&hex[..2]).join(hex);
        let bytes = fs::read(&path).map_err(|e| LedgerError::io(&path, e))?;
        let found = match keyed {
            true => self.key.hex(&bytes),
            false => hex::encode(Sha256::digest(&bytes)),
        };
        if found != hex {
            let detail = match keyed {
                true => "content does not match its keyed hash (damaged, or the state dir's hash.key was replaced)",
                false => "content does not match its hash",
            };
            return Err(LedgerError::Corrupt {
                path,
                detail: detail.into(),
            });
        }
        Ok(bytes)
    }

    /// Deletes backups older than `retention`, then the oldest ones until the
    /// rest take at most `max_bytes`. Returns how many were deleted.
    pub fn prune(&self, retention: Duration, max_bytes: u64) -> Res<usize> {
        let mut blobs = self.blobs()?;
        blobs.sort_by(|a, b| {
            a.modified
                .cmp(&b.modified)
                .then_with(|| a.path.cmp(&b.path))
        });
        let horizon = SystemTime::now().checked_sub(retention);
        let mut total: u64 = blobs.iter().map(|b| b.size).sum();
        let mut removed = 0;
        for blob in &blobs {
            let expired = horizon.is_some_and(|h| blob.modified < h);
            if !expired && total <= max_bytes {
                break;
            }
            match fs::remove_file(&blob.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LedgerError::io(&blob.path, e)),
            }
            total -= blob.size;
            removed += 1;
        }
        Ok(removed)
    }

    pub fn total_bytes(&self) -> Res<u64> {
        Ok(self.blobs()?.iter().map(|b| b.size).sum())
    }

    /// Deletes temp files a crash left behind. Call with the state lock held:
    /// a concurrent save's temp file looks just the same.
    pub fn remove_leftover_temp(&self) -> Res<usize> {
        let mut removed = 0;
        for shard in read_dir(&self.dir)? {
            if !shard.is_dir() {
                continue;
            }
            for path in read_dir(&shard)? {
                if is_temp(&path) {
                    fs::remove_file(&path).map_err(|e| LedgerError::io(&path, e))?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    fn blobs(&self) -> Res<Vec<Blob>> {
        let mut out = Vec::new();
        for shard in read_dir(&self.dir)? {
            if !shard.is_dir() {
                continue;
            }
            for path in read_dir(&shard)? {
                if is_temp(&path) {
                    continue;
                }
                let meta = fs::symlink_metadata(&path).map_err(|e| LedgerError::io(&path, e))?;
                if meta.is_file() {
                    let modified = meta.modified().map_err(|e| LedgerError::io(&path, e))?;
                    out.push(Blob {
                        path,
                        size: meta.len(),
                        modified,
                    });
                }
            }
        }
        Ok(out)
    }
}

impl Backup for BackupStore {
    fn save(&self, _id: &ResourceId, bytes: &[u8]) -> std::io::Result<String> {
        self.save_bytes(bytes).map_err(|e| match e {
            LedgerError::Io { ref source, .. } => std::io::Error::new(source.kind(), e.to_string()),
            other => std::io::Error::other(other.to_string()),
        })
    }
}

/// Only 64 lowercase hex digits: a reference from the audit log must not be
/// able to name a path outside the store. Says whether the hex is keyed.
fn parse_reference(reference: &str) -> Option<(&str, bool)> {
    let (hex, keyed) = match reference.strip_prefix(REF_PREFIX) {
        Some(hex) => (hex, true),
        None => (reference.strip_prefix(OLD_REF_PREFIX)?, false),
    };
    let valid = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    valid.then_some((hex, keyed))
}

fn is_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(".tend-") && n.ends_with(".tmp"))
}

/// Creates `dir` (mode 0700) if missing; says whether it did.
fn create_private_dir(dir: &Path) -> Res<bool> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(LedgerError::io(dir, e)),
    }
}

fn write_synced(tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn read_dir(dir: &Path) -> Res<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| LedgerError::io(dir, e))?;
    entries
        .map(|e| e.map(|e| e.path()).map_err(|e| LedgerError::io(dir, e)))
        .collect()
}

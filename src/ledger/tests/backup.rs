//! Backups: content-addressed, deduplicated, checked on read, pruned by age
//! then by size, and unable to name a path outside the store.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::mode_of;
use crate::ledger::{BackupStore, LedgerError};
use crate::model::{Backup, ResourceId};

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

fn blob_path(store: &BackupStore, reference: &str) -> std::path::PathBuf {
    let hex = reference.rsplit(':').next().unwrap();
    store.dir().join(&hex[..2]).join(hex)
}

fn age(path: &Path, by: Duration) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - by)
        .unwrap();
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for shard in fs::read_dir(dir).unwrap() {
        for f in fs::read_dir(shard.unwrap().path()).unwrap() {
            out.push(f.unwrap().file_name().into_string().unwrap());
        }
    }
    out.sort();
    out
}

#[test]
fn save_is_content_addressed_private_and_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let id = ResourceId::new("files", "file", "etc/secret");
    let reference = store.save(&id, b"old content").unwrap();
    // Named by a hash under the state dir's key: an unkeyed one could be
    // checked against guessed content by anyone who sees the audit log.
    let key = crate::ledger::HashKey::load(tmp.path()).unwrap().unwrap();
    let hex = key.hex(b"old content");
    assert_eq!(reference, format!("hmac-sha256:{hex}"));
    assert_ne!(hex, hex::encode(Sha256::digest(b"old content")));
    let path = tmp.path().join("backups").join(&hex[..2]).join(&hex);
    assert_eq!(fs::read(&path).unwrap(), b"old content");
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(mode_of(&tmp.path().join("backups")), 0o700);
    assert_eq!(store.read(&reference).unwrap(), b"old content");
    assert_eq!(
        files_under(store.dir()),
        vec![hex],
        "no temp file is left behind"
    );
}

#[test]
fn equal_content_is_stored_once_and_not_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let first = store.save_bytes(b"same").unwrap();
    let inode = fs::metadata(blob_path(&store, &first)).unwrap().ino();
    let second = store.save_bytes(b"same").unwrap();
    assert_eq!(first, second);
    assert_eq!(
        fs::metadata(blob_path(&store, &first)).unwrap().ino(),
        inode
    );
    store.save_bytes(b"other").unwrap();
    assert_eq!(files_under(store.dir()).len(), 2);
    assert_eq!(store.total_bytes().unwrap(), 9);
}

#[test]
fn a_damaged_backup_is_reported_not_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let reference = store.save_bytes(b"precious").unwrap();
    fs::write(blob_path(&store, &reference), b"tampered").unwrap();
    let err = store.read(&reference).unwrap_err();
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err}");
}

#[test]
fn a_reference_cannot_reach_outside_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let sentinel = tmp.path().join("sentinel");
    fs::create_dir(&sentinel).unwrap();
    fs::write(sentinel.join("secret"), b"outside").unwrap();
    let store = BackupStore::new(&tmp.path().join("state")).unwrap();
    for reference in [
        "sha256:../../sentinel/secret",
        &format!("sha256:../../../{}", "a".repeat(52)),
        &"A".repeat(71),
        &format!("sha256:{}", "A".repeat(64)),
        &format!("md5:{}", "a".repeat(64)),
    ] {
        let err = store.read(reference).unwrap_err();
        assert!(
            matches!(err, LedgerError::BadReference { .. }),
            "{reference}: {err}"
        );
    }
}

#[test]
fn prune_removes_expired_backups_then_the_oldest_beyond_the_size_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let expired: Vec<_> = (0..2)
        .map(|i| store.save_bytes(format!("expired {i}").as_bytes()).unwrap())
        .collect();
    for r in &expired {
        age(&blob_path(&store, r), WEEK + Duration::from_secs(3600));
    }
    let old = store.save_bytes(&[1u8; 100]).unwrap();
    let middle = store.save_bytes(&[2u8; 100]).unwrap();
    let new = store.save_bytes(&[3u8; 100]).unwrap();
    age(&blob_path(&store, &old), Duration::from_secs(3 * 3600));
    age(&blob_path(&store, &middle), Duration::from_secs(2 * 3600));
    age(&blob_path(&store, &new), Duration::from_secs(3600));

    assert_eq!(store.prune(WEEK, u64::MAX).unwrap(), 2);
    assert!(expired.iter().all(|r| !blob_path(&store, r).exists()));
    assert_eq!(store.total_bytes().unwrap(), 300);

    assert_eq!(store.prune(WEEK, 150).unwrap(), 2);
    assert!(!blob_path(&store, &old).exists() && !blob_path(&store, &middle).exists());
    assert_eq!(store.read(&new).unwrap(), vec![3u8; 100]);
    assert_eq!(store.total_bytes().unwrap(), 100);
    assert_eq!(store.prune(WEEK, 100).unwrap(), 0);
}

#[test]
fn saving_again_renews_a_backup_for_pruning() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let reference = store.save_bytes(b"again").unwrap();
    age(&blob_path(&store, &reference), WEEK * 2);
    store.save_bytes(b"again").unwrap();
    assert_eq!(store.prune(WEEK, u64::MAX).unwrap(), 0);
    assert_eq!(store.read(&reference).unwrap(), b"again");
}

#[test]
fn leftover_temp_files_are_removed_and_never_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let reference = store.save_bytes(b"kept").unwrap();
    let shard = blob_path(&store, &reference)
        .parent()
        .unwrap()
        .to_path_buf();
    fs::write(shard.join(".tend-0123456789abcdef.tmp"), vec![0u8; 1000]).unwrap();
    assert_eq!(store.total_bytes().unwrap(), 4);
    assert_eq!(store.remove_leftover_temp().unwrap(), 1);
    assert_eq!(files_under(store.dir()).len(), 1);
    assert_eq!(store.read(&reference).unwrap(), b"kept");
}

#[test]
fn references_written_before_backups_were_keyed_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let store = BackupStore::new(tmp.path()).unwrap();
    let hex = hex::encode(Sha256::digest(b"from before"));
    fs::create_dir_all(store.dir().join(&hex[..2])).unwrap();
    fs::write(store.dir().join(&hex[..2]).join(&hex), b"from before").unwrap();
    assert_eq!(
        store.read(&format!("sha256:{hex}")).unwrap(),
        b"from before"
    );
    // Read as a keyed reference, the same bytes do not match their name.
    assert!(matches!(
        store.read(&format!("hmac-sha256:{hex}")),
        Err(LedgerError::Corrupt { .. })
    ));
}

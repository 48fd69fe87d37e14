//! What a mirror's object store looked like when it was last found whole,
//! kept beside it, so a process does not check every object of a revision
//! seen before. The stamp is the pack files' names and sizes and each
//! loose fan-out directory's inode and change time: removing or adding any
//! object file changes it, so an unchanged stamp says nothing was lost
//! since the check. A record that does not parse, or whose stamp differs,
//! is not trusted: the revision is checked whole again.

use std::fs;
use std::path::Path;

use git2::Oid;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

/// Beside the objects: the commit found whole, and the stamp then.
const VERIFIED: &str = "tend-verified";
/// Beside the objects: the stamps of a local source's and the mirror's
/// objects when the source's loose objects were last linked in.
const SEEDED: &str = "tend-seeded";

/// A digest of an objects directory's shape (see the module comment).
/// `None` when it cannot be read whole.
pub(super) fn objects_stamp(objects: &Path) -> Option<String> {
    let mut hash = Sha256::new();
    // Opened once: each fan-out below is one name looked up in it, not a
    // whole path walked again (256 of them, three stamps a first sync).
    let dir = rfs::open(
        objects,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    hash.update(stat_bytes(&rfs::fstat(&dir).ok()?));
    let mut packs: Vec<(String, u64)> = Vec::new();
    if let Ok(entries) = fs::read_dir(objects.join("pack")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let size = e.metadata().ok()?.len();
            packs.push((name, size));
        }
    }
    packs.sort();
    for (name, size) in packs {
        hash.update(name.as_bytes());
        hash.update(size.to_le_bytes());
    }
    for byte in 0..=255u8 {
        match rfs::statat(&dir, format!("{byte:02x}"), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => hash.update(stat_bytes(&st)),
            Err(Errno::NOENT) => hash.update([0u8]),
            Err(_) => return None,
        }
    }
    Some(hex::encode(hash.finalize()))
}

/// A directory's identity and the last change of its entries.
fn stat_bytes(st: &rfs::Stat) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&st.st_ino.to_le_bytes());
    out[8..16].copy_from_slice(&st.st_ctime.to_le_bytes());
    out[16..24].copy_from_slice(&st.st_ctime_nsec.to_le_bytes());
    out[24..].copy_from_slice(&st.st_mtime_nsec.to_le_bytes());
    out
}

/// The commit recorded found whole in the mirror at `dir`, if the objects
/// still have the stamp they had then.
pub(super) fn verified(dir: &Path) -> Option<Oid> {
    let text = fs::read_to_string(dir.join(VERIFIED)).ok()?;
    let (commit, stamp) = text.trim_end().split_once(' ')?;
    let now = objects_stamp(&dir.join("objects"))?;
    (stamp == now).then(|| Oid::from_str(commit).ok()).flatten()
}

/// Records that `commit` was found whole in the mirror at `dir` as its
/// objects are now. Best effort: without it the next process checks again.
pub(super) fn record_verified(dir: &Path, commit: Oid) {
    match objects_stamp(&dir.join("objects")) {
        Some(stamp) => write_atomic(dir, VERIFIED, &format!("{commit} {stamp}\n")),
        None => forget(dir),
    }
}

/// Drops the record: the next check reads the revision whole.
pub(super) fn forget(dir: &Path) {
    let _ = fs::remove_file(dir.join(VERIFIED));
}

/// Whether neither the source's objects (at `from`) nor the mirror's
/// changed since its loose objects were last linked in: nothing to link.
pub(super) fn seeded(mirror: &Path, from: &Path) -> bool {
    let Ok(text) = fs::read_to_string(mirror.join(SEEDED)) else {
        return false;
    };
    let now = seed_stamps(mirror, from);
    now.is_some_and(|now| text.trim_end() == now)
}

/// Records the source's and the mirror's objects as they are after a
/// linking.
pub(super) fn record_seeded(mirror: &Path, from: &Path) {
    match seed_stamps(mirror, from) {
        Some(now) => write_atomic(mirror, SEEDED, &format!("{now}\n")),
        None => {
            let _ = fs::remove_file(mirror.join(SEEDED));
        }
    }
}

fn seed_stamps(mirror: &Path, from: &Path) -> Option<String> {
    let source = objects_stamp(from)?;
    let ours = objects_stamp(&mirror.join("objects"))?;
    Some(format!("{} {source} {ours}", from.display()))
}

/// Written aside and renamed, so a reader sees the old record or the new.
fn write_atomic(dir: &Path, name: &str, text: &str) {
    let temp = dir.join(format!(".{name}-{}.tmp", std::process::id()));
    let done = fs::write(&temp, text).and_then(|()| fs::rename(&temp, dir.join(name)));
    if done.is_err() {
        let _ = fs::remove_file(&temp);
    }
}

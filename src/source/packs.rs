//! Keeping the mirror's packs few. Every fetch that brings objects adds a
//! pack, and libgit2 never repacks: a daemon polling for months would look
//! each object up in thousands of packs and hold a descriptor for each.
//! Past [`MOST`] packs, all but the largest are rolled into one, as
//! `git repack --geometric` would: the cost is what the small packs hold,
//! not the whole history. Every object they hold goes into the new pack,
//! reachable or not, so nothing a reader of an older revision (a revision
//! since force-pushed away) may still need is lost.
//!
//! The new pack is durable before any old one goes; an old pack's index is
//! removed before its data, so a reader listing the folder never finds an
//! index without its pack. Handles that opened an old pack keep reading it
//! until they close (the file lives on while open). A pack holding an
//! object over 16 MiB is never rolled: packing reads each object whole.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use git2::{Oid, Repository};

use super::SourceError;

/// Packs a mirror may hold before the small ones are rolled into one (git's
/// `gc.autoPackLimit`).
pub(super) const MOST: usize = 50;
/// Largest object a roll-up packs again.
pub(super) const BIG: u64 = 16 << 20;

/// What a roll-up did.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct RolledUp {
    /// Packs replaced.
    pub packs: usize,
    /// Objects they held, now in one pack.
    pub objects: usize,
}

/// One pack in `objects/pack`: `<stem>.pack` and `<stem>.idx`.
pub(super) struct Pack {
    pub stem: PathBuf,
    pub size: u64,
    /// When it was written (or linked from a source that wrote it then).
    pub modified: SystemTime,
}

impl Pack {
    pub(super) fn with(&self, extension: &str) -> PathBuf {
        self.stem.with_extension(extension)
    }
}

/// Rolls all packs but the largest into one when there are more than
/// `most`; `None` when there were not.
pub(super) fn roll_up(repo: &Repository, most: usize) -> Result<Option<RolledUp>, SourceError> {
    let dir = repo.path().join("objects/pack");
    let mut packs = list(&dir).map_err(|e| SourceError::io(&dir, e))?;
    if packs.len() <= most {
        return Ok(None);
    }
    // The largest stays as it is (often a first fetch's whole history).
    packs.sort_by_key(|p| std::cmp::Reverse(p.size));
    let small = packs.split_off(1);
    let mut ids = Vec::new();
    let mut rolled = Vec::new();
    let odb = repo
        .odb()
        .map_err(|e| SourceError::git("opening the object database", e))?;
    // Packing holds each object whole, with its compressed copy beside it:
    // a pack holding a big one stays as it is, so rolling up costs memory
    // bounded by BIG, not by the largest blob ever pushed.
    let small_objects = |ids: &[Oid]| {
        ids.iter().all(|id| {
            odb.read_header(*id)
                .is_ok_and(|(size, _)| size as u64 <= BIG)
        })
    };
    for pack in small {
        let idx = pack.with("idx");
        // A pack whose index this code does not read stays as it is.
        match fs::read(&idx)
            .ok()
            .and_then(|bytes| index_ids(&bytes))
            .filter(|ids| small_objects(ids))
        {
            Some(found) => {
                ids.extend(found);
                rolled.push(pack);
            }
            None => {
                tracing::debug!(index = %idx.display(), "pack index not understood, or a big object in it; left alone")
            }
        }
    }
    if rolled.len() < 2 {
        return Ok(None);
    }
    ids.sort_unstable();
    ids.dedup();
    let replaced = replace(repo, &dir, &rolled, &ids)?;
    Ok(Some(RolledUp {
        packs: replaced,
        objects: ids.len(),
    }))
}

/// Writes `ids` into one new pack in `dir`, durably, then removes the
/// `old` packs (index first); returns how many went. With no `ids`, the
/// old packs only go.
pub(super) fn replace(
    repo: &Repository,
    dir: &Path,
    old: &[Pack],
    ids: &[Oid],
) -> Result<usize, SourceError> {
    let new = if ids.is_empty() {
        None
    } else {
        Some(write_pack(repo, dir, ids)?)
    };
    let mut replaced = 0;
    for old in old.iter().filter(|p| Some(&p.stem) != new.as_ref()) {
        // Index first: without it the pack is invisible to new readers.
        for extension in ["idx", "pack", "rev", "bitmap", "mtimes"] {
            match fs::remove_file(old.with(extension)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(SourceError::io(old.with(extension), e)),
            }
        }
        replaced += 1;
    }
    sync_dir(dir)?;
    Ok(replaced)
}

/// One new pack holding `ids`, checked to hold them all and synced; its
/// stem.
fn write_pack(repo: &Repository, dir: &Path, ids: &[Oid]) -> Result<PathBuf, SourceError> {
    let git = |what: &str, e| SourceError::git(format!("{what} in {}", dir.display()), e);
    let mut builder = repo.packbuilder().map_err(|e| git("starting a pack", e))?;
    for id in ids {
        builder
            .insert_object(*id, None)
            .map_err(|e| git("packing", e))?;
    }
    builder
        .write(dir, 0o444)
        .map_err(|e| git("writing a pack", e))?;
    let name = builder
        .name()
        .map(str::to_string)
        .ok_or_else(|| SourceError::io(dir, io::Error::other("the new pack has no name")))?;
    let new = dir.join(format!("pack-{name}"));
    let (new_pack, new_idx) = (new.with_extension("pack"), new.with_extension("idx"));
    // Everything kept must be in the new pack, durably, before any old
    // pack goes.
    let holds = fs::read(&new_idx)
        .ok()
        .and_then(|bytes| index_ids(&bytes))
        .map(|mut held| {
            held.sort_unstable();
            ids.iter().all(|id| held.binary_search(id).is_ok())
        });
    if holds != Some(true) {
        return Err(SourceError::io(
            new_idx,
            io::Error::other("the new pack lacks objects of the packs it replaces"),
        ));
    }
    for file in [new_pack, new_idx] {
        fs::File::open(&file)
            .and_then(|f| f.sync_all())
            .map_err(|e| SourceError::io(&file, e))?;
    }
    sync_dir(dir)?;
    Ok(new)
}

/// The packs in `dir` that have an index and may be rolled (no `.keep`).
pub(super) fn list(dir: &Path) -> io::Result<Vec<Pack>> {
    let mut packs = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|x| x != "pack") {
            continue;
        }
        let stem = path.with_extension("");
        let kept = stem.with_extension("keep").exists();
        if kept || !stem.with_extension("idx").exists() {
            continue;
        }
        let meta = fs::metadata(&path)?;
        packs.push(Pack {
            stem,
            size: meta.len(),
            modified: meta.modified()?,
        });
    }
    Ok(packs)
}

/// The object ids a pack index lists (index version 2, SHA-1), or `None`
/// for anything else or a damaged index.
pub(super) fn index_ids(bytes: &[u8]) -> Option<Vec<Oid>> {
    const MAGIC: &[u8] = b"\xfftOc";
    const FANOUT: usize = 8;
    const NAMES: usize = FANOUT + 256 * 4;
    if bytes.get(..4)? != MAGIC || bytes.get(4..8)? != [0, 0, 0, 2] {
        return None;
    }
    let last = bytes.get(NAMES - 4..NAMES)?;
    let count = u32::from_be_bytes(last.try_into().ok()?) as usize;
    let names = bytes.get(NAMES..NAMES.checked_add(count.checked_mul(20)?)?)?;
    names
        .chunks_exact(20)
        .map(|raw| Oid::from_bytes(raw).ok())
        .collect()
}

fn sync_dir(dir: &Path) -> Result<(), SourceError> {
    fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| SourceError::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::{index_ids, list, roll_up};
    use crate::test_repo::TestRepo;

    /// `bytes` of noise that does not compress.
    fn noise(seed: u64, bytes: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..bytes / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect()
    }

    #[test]
    fn a_pack_holding_a_big_object_is_never_rolled() {
        let test_repo = TestRepo::new();
        let dir = test_repo.path();
        // One pack per commit: the largest, one holding a 17 MiB blob, and
        // two small ones.
        let files: [(&str, Vec<u8>); 4] = [
            ("largest", noise(1, 24 << 20)),
            ("big", noise(2, 17 << 20)),
            ("a", b"a".to_vec()),
            ("b", b"b".to_vec()),
        ];
        for (name, bytes) in &files {
            test_repo.write(name, bytes);
            test_repo.git(&["add", name]);
            test_repo.git(&["commit", "-q", "-m", name]);
            test_repo.git(&["repack", "-q"]);
        }
        let repo = git2::Repository::open(dir).unwrap();
        let pack_dir = dir.join(".git/objects/pack");
        let before: Vec<_> = list(&pack_dir)
            .unwrap()
            .into_iter()
            .map(|p| p.stem)
            .collect();
        assert_eq!(before.len(), 4);
        let done = roll_up(&repo, 2)
            .unwrap()
            .expect("the small packs are rolled");
        assert_eq!(done.packs, 2, "{done:?}");
        let after: Vec<_> = list(&pack_dir)
            .unwrap()
            .into_iter()
            .map(|p| p.stem)
            .collect();
        assert_eq!(after.len(), 3, "{after:?}");
        let kept = before.iter().filter(|p| after.contains(p)).count();
        assert_eq!(kept, 2, "the largest and the one with the big blob stay");
    }

    fn index(ids: &[[u8; 20]], count: u32) -> Vec<u8> {
        let mut bytes = b"\xfftOc\0\0\0\x02".to_vec();
        for i in 0..256u32 {
            let up_to = ids.iter().filter(|id| u32::from(id[0]) <= i).count() as u32;
            bytes.extend(if i == 255 { count } else { up_to }.to_be_bytes());
        }
        for id in ids {
            bytes.extend(id);
        }
        bytes
    }

    #[test]
    fn an_index_lists_its_ids_and_a_damaged_one_lists_none() {
        let ids = [[1u8; 20], [7u8; 20]];
        let good = index(&ids, 2);
        let read = index_ids(&good).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].as_bytes(), &[7u8; 20]);
        // A count past the end, a cut-off file, another magic or version.
        assert_eq!(index_ids(&index(&ids, 3)), None);
        assert_eq!(index_ids(&index(&ids, u32::MAX)), None);
        assert_eq!(index_ids(&good[..good.len() - 1]), None);
        assert_eq!(index_ids(&good[..100]), None);
        let mut version_3 = good.clone();
        version_3[7] = 3;
        assert_eq!(index_ids(&version_3), None);
        assert_eq!(index_ids(b"PACK"), None);
        assert_eq!(index_ids(&[]), None);
    }
}

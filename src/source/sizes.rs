//! Blob sizes kept across runs beside the mirror. A blob's size never
//! changes for its id, and reading it from a pack costs inflating the start
//! of each delta: on a no-op pass over many files that lookup is a good part
//! of building the declaration. The file is only a cache: one that is
//! missing, torn or altered (its checksum fails) is ignored, and every size
//! it gives was read from a blob header once.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use git2::Oid;
use sha1::{Digest, Sha1};

const FILE: &str = "tend-blob-sizes";
const MAGIC: &[u8] = b"tend blob sizes 1\n";
const OID: usize = 20;
const ENTRY: usize = OID + 8;
const SUM: usize = 20;

pub(super) struct Sizes {
    path: PathBuf,
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    loaded: bool,
    /// Sorted by id, as in the file.
    known: Vec<([u8; OID], u64)>,
    /// Where in `known` the ids starting with each prefix begin: a lookup
    /// searches only the few entries of its prefix.
    index: Fanout,
    used: Vec<bool>,
    found: Vec<([u8; OID], u64)>,
}

impl Sizes {
    pub(super) fn beside(mirror: &Path) -> Sizes {
        Sizes {
            path: mirror.join(FILE),
            state: RefCell::default(),
        }
    }

    /// The size recorded for `oid`, if any (the file is read at the first
    /// lookup).
    pub(super) fn get(&self, oid: Oid) -> Option<u64> {
        let mut s = self.state.borrow_mut();
        if !s.loaded {
            s.loaded = true;
            s.known = read(&self.path).unwrap_or_default();
            s.used = vec![false; s.known.len()];
            s.index = Fanout::over(&s.known);
        }
        let range = s.index.range(oid.as_bytes());
        let i = range.start
            + s.known[range]
                .iter()
                .position(|(k, _)| k.as_slice() == oid.as_bytes())?;
        s.used[i] = true;
        Some(s.known[i].1)
    }

    /// A size read from the object database.
    pub(super) fn found(&self, oid: Oid, size: u64) {
        let mut key = [0u8; OID];
        key.copy_from_slice(oid.as_bytes());
        self.state.borrow_mut().found.push((key, size));
    }

    /// Rewrites the file with the sizes looked up since it was read, when
    /// they differ from its content (some were missing, or some unused), and
    /// lets go of them. Best effort: failing to write only costs lookups.
    pub(super) fn save(&self) {
        let s = std::mem::take(&mut *self.state.borrow_mut());
        if s.found.is_empty() && s.used.iter().all(|u| *u) {
            return;
        }
        let mut all: Vec<([u8; OID], u64)> = s
            .known
            .into_iter()
            .zip(s.used)
            .filter_map(|(e, used)| used.then_some(e))
            .chain(s.found)
            .collect();
        all.sort_unstable();
        all.dedup_by(|a, b| a.0 == b.0);
        if let Err(e) = write(&self.path, &all) {
            tracing::debug!(error = %e, "cannot save the blob sizes");
        }
    }
}

/// Start offsets of the sorted ids by their first `bits` bits (ids are
/// hashes, so each prefix holds about one entry).
#[derive(Default)]
struct Fanout {
    bits: u32,
    starts: Vec<u32>,
}

impl Fanout {
    fn over(sorted: &[([u8; OID], u64)]) -> Fanout {
        // About one entry per prefix, at most 2^16 prefixes.
        let bits = (usize::BITS - sorted.len().leading_zeros()).min(16);
        let mut starts = Vec::with_capacity((1 << bits) + 1);
        let mut at = 0;
        for prefix in 0..=(1u64 << bits) {
            while at < sorted.len() && Fanout::prefix(bits, &sorted[at].0) < prefix {
                at += 1;
            }
            starts.push(at as u32);
        }
        Fanout { bits, starts }
    }

    fn prefix(bits: u32, id: &[u8]) -> u64 {
        let head = u64::from_be_bytes(id[..8].try_into().expect("ids are 20 bytes"));
        head.checked_shr(64 - bits).unwrap_or(0)
    }

    /// Where the entries sharing `id`'s prefix lie.
    fn range(&self, id: &[u8]) -> std::ops::Range<usize> {
        if self.starts.is_empty() {
            return 0..0;
        }
        let p = Fanout::prefix(self.bits, id) as usize;
        self.starts[p] as usize..self.starts[p + 1] as usize
    }
}

fn read(path: &Path) -> Option<Vec<([u8; OID], u64)>> {
    let bytes = std::fs::read(path).ok()?;
    let body = bytes.strip_prefix(MAGIC)?;
    if body.len() < SUM || (body.len() - SUM) % ENTRY != 0 {
        return None;
    }
    let (entries, sum) = body.split_at(body.len() - SUM);
    if Sha1::digest(&bytes[..bytes.len() - SUM]).as_slice() != sum {
        return None;
    }
    let out: Vec<([u8; OID], u64)> = entries
        .chunks_exact(ENTRY)
        .map(|c| {
            let mut key = [0u8; OID];
            key.copy_from_slice(&c[..OID]);
            let size = u64::from_le_bytes(c[OID..].try_into().expect("8 bytes"));
            (key, size)
        })
        .collect();
    // Written sorted; a file that is not cannot be searched.
    out.windows(2).all(|w| w[0].0 < w[1].0).then_some(out)
}

/// Written under a temp name and renamed over: a reader sees the old file or
/// the new one. Not synced: a file lost or torn in a crash is ignored.
fn write(path: &Path, entries: &[([u8; OID], u64)]) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(MAGIC.len() + entries.len() * ENTRY + SUM);
    bytes.extend_from_slice(MAGIC);
    for (key, size) in entries {
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&size.to_le_bytes());
    }
    let sum = Sha1::digest(&bytes);
    bytes.extend_from_slice(&sum);
    // One fixed name, so a file a crash left is written over next time; two
    // processes saving at once may tear it, which its checksum catches.
    let temp = path.with_file_name(".tend-sizes.tmp");
    let result = std::fs::File::create(&temp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| std::fs::rename(&temp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::Sizes;
    use git2::Oid;

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    #[test]
    fn sizes_survive_a_save_and_a_damaged_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sizes::beside(dir.path());
        assert_eq!(s.get(oid(2)), None);
        s.found(oid(2), 20);
        s.found(oid(1), 10);
        s.save();

        let s = Sizes::beside(dir.path());
        assert_eq!(s.get(oid(1)), Some(10));
        assert_eq!(s.get(oid(3)), None);
        s.found(oid(3), 30);
        // oid(2) was not looked up: it is dropped.
        s.save();
        let s = Sizes::beside(dir.path());
        assert_eq!(s.get(oid(2)), None);
        assert_eq!(s.get(oid(3)), Some(30));
        assert_eq!(s.get(oid(1)), Some(10));

        let path = dir.path().join(super::FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = super::MAGIC.len() + 20;
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let s = Sizes::beside(dir.path());
        assert_eq!(
            s.get(oid(1)),
            None,
            "a size whose checksum fails is not used"
        );
        assert_eq!(s.get(oid(3)), None);
    }

    #[test]
    fn every_saved_size_is_found_among_many() {
        let dir = tempfile::tempdir().unwrap();
        let id = |n: u32| git2::Oid::hash_object(git2::ObjectType::Blob, &n.to_le_bytes()).unwrap();
        let s = Sizes::beside(dir.path());
        for n in 0..5000 {
            s.found(id(n), u64::from(n));
        }
        s.save();
        let s = Sizes::beside(dir.path());
        for n in 0..5000 {
            assert_eq!(s.get(id(n)), Some(u64::from(n)), "entry {n}");
        }
        for n in 5000..6000 {
            assert_eq!(s.get(id(n)), None, "entry {n} was never saved");
        }
        // Ids at both ends of the prefix range.
        assert_eq!(s.get(oid(0)), None);
        assert_eq!(s.get(oid(255)), None);
    }
}

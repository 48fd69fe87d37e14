//! The stat cache's file: a compact little-endian record list under a
//! SHA-256 checksum, replaced atomically; damage means an empty cache.

use std::fs::{self, File, OpenOptions};
use std::hash::Hasher;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use siphasher::sip::SipHasher13;

/// Version 03 keeps a keyed print of each entry's stat (see [`Seal`]);
/// a version 02 file, which kept the stat itself, is read and printed
/// under a new seal; a version 01 file (keyed by the path itself) reads
/// as no cache.
const MAGIC: &[u8; 8] = b"TENDSC03";
const MAGIC_02: &[u8; 8] = b"TENDSC02";
/// Bytes of an entry: path key, stat print, trusted (one byte), blob.
const FIXED: usize = 8 + 8 + 1 + 20;
/// Bytes of a version 02 entry: path key, dev, ino, size, mtime, ctime,
/// recorded, blob.
const FIXED_02: usize = 8 * 7 + 20;

/// The key a cache's stat prints are made with: random for each new
/// cache and kept in its file (in the state dir). An entry keeps a 64-bit
/// keyed hash (SipHash-1-3) of the stat it vouches for instead of the
/// stat, 40 bytes where the stat took 72; without the seal nobody can
/// choose a changed file's times so that its stat prints as the old one
/// did, and by chance two stats print alike once in 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seal([u8; 16]);

impl Seal {
    pub(super) fn random() -> Seal {
        Seal(rand::random())
    }

    /// The print of a file's stat: device, inode, size, mtime and ctime.
    pub(super) fn print(&self, dev: u64, ino: u64, size: u64, mtime: i64, ctime: i64) -> u64 {
        let mut h = SipHasher13::new_with_key(&self.0);
        for word in [dev, ino, size, mtime as u64, ctime as u64] {
            // The same bytes on every machine: a cache file may move.
            h.write(&word.to_le_bytes());
        }
        h.finish()
    }
}

/// A new cache has a seal of its own.
/// The key of a path: the first 8 bytes of its SHA-256, stable across
/// builds. Two paths sharing a key share one entry, which only ever answers
/// for a file whose dev, ino, size, mtime and ctime it matches, that is for
/// the same inode unchanged, so a collision costs a re-read, never a wrong
/// blob.
pub(super) fn path_key(path: &str) -> u64 {
    let digest = Sha256::digest(path.as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 of 32 bytes"))
}

/// The cache file's name for a target name, kept to one safe path component.
pub(super) fn file_stem(name: &str) -> String {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if plain {
        name.to_string()
    } else {
        format!("x-{}", hex::encode(name))
    }
}

/// Writes the cache to `out` as a stream, with its checksum at the end.
pub(super) fn encode_to(
    out: impl Write,
    seal: &Seal,
    map: &[(u64, Entry)],
    root_key: &[u8],
) -> io::Result<()> {
    let mut w = Hashing {
        inner: out,
        hash: Sha256::new(),
    };
    w.put(MAGIC)?;
    w.put(&(root_key.len() as u32).to_le_bytes())?;
    w.put(root_key)?;
    w.put(&seal.0)?;
    w.put(&(map.len() as u64).to_le_bytes())?;
    let mut fixed = [0u8; FIXED];
    for (key, e) in map {
        fixed[..8].copy_from_slice(&key.to_le_bytes());
        fixed[8..16].copy_from_slice(&e.stat.to_le_bytes());
        fixed[16] = e.trusted as u8;
        fixed[17..].copy_from_slice(&e.blob);
        w.put(&fixed)?;
    }
    let digest = w.hash.finalize();
    w.inner.write_all(&digest)?;
    w.inner.flush()
}

/// One path's entry: the print of its stat when its content was read
/// ([`Seal::print`]), and the content's blob id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub stat: u64,
    pub blob: [u8; 20],
    /// The generation in which the entry was last used.
    pub seen: u16,
    /// The content was read (or written) strictly after the mtime: see
    /// [`trusted`]. Kept as the answer, not the moment: an entry in memory
    /// is 32 bytes, and there are 100k.
    pub trusted: bool,
}

/// `recorded` of an entry made without a filesystem clock: never trusted.
pub(super) const NEVER: i64 = i64::MIN;
const NANOS: i64 = 1_000_000_000;

/// Racy-git rule: content read at `recorded` can only be vouched for by an
/// mtime strictly older than that moment; a write in the same clock tick
/// could have left the mtime unchanged. A filesystem whose timestamps carry
/// no nanoseconds gets a two-second margin (FAT rounds to two seconds).
pub(super) fn trusted(mtime: i64, recorded: i64) -> bool {
    if recorded == NEVER {
        return false;
    }
    if mtime.rem_euclid(NANOS) == 0 {
        return mtime.div_euclid(NANOS).saturating_add(2) <= recorded.div_euclid(NANOS);
    }
    mtime < recorded
}

#[cfg(test)]
pub(super) fn encode(seal: &Seal, map: &[(u64, Entry)], root_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_to(&mut out, seal, map, root_key).expect("writing to memory");
    out
}

/// A cache file's entries and the seal their stats are printed with.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Loaded {
    pub seal: Seal,
    pub entries: Vec<(u64, Entry)>,
    /// Read from a file of the format before: to be written again.
    pub old: bool,
}

impl Loaded {
    /// No entries, under a new seal: what a missing or damaged file gives.
    pub(super) fn empty() -> Loaded {
        Loaded {
            seal: Seal::random(),
            entries: Vec::new(),
            old: false,
        }
    }
}

/// Reads a cache file as a stream, hashing the bytes as they are parsed;
/// anything missing, damaged or made for another root gives `None`, which
/// means an empty cache. Entries count only once the checksum at the end
/// matches.
pub(super) fn load(file: &Path, root_key: &[u8]) -> Option<Loaded> {
    let f = File::open(file).ok()?;
    let len = f.metadata().ok()?.len();
    decode(BufReader::new(f), len, root_key)
}

fn decode(input: impl Read, len: u64, root_key: &[u8]) -> Option<Loaded> {
    let mut r = Hashing {
        inner: input,
        hash: Sha256::new(),
    };
    let magic = r.array::<8>()?;
    let v02 = match &magic {
        m if m == MAGIC => false,
        m if m == MAGIC_02 => true,
        _ => return None,
    };
    let key_len = u32::from_le_bytes(r.array()?) as usize;
    if key_len != root_key.len() {
        return None;
    }
    let mut buf = vec![0; key_len];
    r.fill(&mut buf)?;
    if buf != root_key {
        return None;
    }
    let seal = match v02 {
        true => Seal::random(),
        false => Seal(r.array()?),
    };
    let count = u64::from_le_bytes(r.array()?);
    let most = len / if v02 { FIXED_02 } else { FIXED } as u64;
    let mut map = Vec::with_capacity(usize::try_from(count.min(most)).ok()?);
    for _ in 0..count {
        map.push(match v02 {
            true => entry_02(&seal, &r.array()?)?,
            false => entry(&r.array()?)?,
        });
    }
    let computed = r.hash.finalize();
    let mut digest = [0; 32];
    r.inner.read_exact(&mut digest).ok()?;
    // The digest must end the file.
    let at_end = matches!(r.inner.read(&mut [0]), Ok(0));
    (at_end && computed.as_slice() == digest).then_some(Loaded {
        seal,
        entries: map,
        old: v02,
    })
}

fn entry(fixed: &[u8; FIXED]) -> Option<(u64, Entry)> {
    let word = |i: usize| u64::from_le_bytes(fixed[i..i + 8].try_into().unwrap());
    let trusted = match fixed[16] {
        0 => false,
        1 => true,
        _ => return None,
    };
    let entry = Entry {
        stat: word(8),
        trusted,
        blob: fixed[17..].try_into().ok()?,
        seen: 0,
    };
    Some((word(0), entry))
}

/// A version 02 entry, its stat printed under `seal`.
fn entry_02(seal: &Seal, fixed: &[u8; FIXED_02]) -> Option<(u64, Entry)> {
    let word = |i: usize| u64::from_le_bytes(fixed[i * 8..i * 8 + 8].try_into().unwrap());
    let (mtime, ctime) = (word(4) as i64, word(5) as i64);
    let entry = Entry {
        stat: seal.print(word(1), word(2), word(3), mtime, ctime),
        trusted: trusted(mtime, word(6) as i64),
        blob: fixed[56..].try_into().ok()?,
        seen: 0,
    };
    Some((word(0), entry))
}

/// Reads or writes, feeding every byte to the checksum.
struct Hashing<T> {
    inner: T,
    hash: Sha256,
}

impl<R: Read> Hashing<R> {
    fn fill(&mut self, buf: &mut [u8]) -> Option<()> {
        self.inner.read_exact(buf).ok()?;
        self.hash.update(&*buf);
        Some(())
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut a = [0; N];
        self.fill(&mut a)?;
        Some(a)
    }
}

impl<W: Write> Hashing<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hash.update(bytes);
        self.inner.write_all(bytes)
    }
}

/// Writes a new file under a temp name with `write`, makes it durable and
/// renames it over `file`: readers see the old file or the new one. The
/// temp name is fixed (`<file>.part`), so one a crash left is written over
/// by the next save rather than left behind; two processes saving at once
/// may tear it, which the file's checksum catches (a void cache only costs
/// a re-read).
pub(super) fn write_atomically(
    file: &Path,
    write: impl FnOnce(&mut io::BufWriter<&File>) -> io::Result<()>,
) -> io::Result<()> {
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".part");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let mut buffered = io::BufWriter::with_capacity(64 * 1024, &out);
        write(&mut buffered)?;
        buffered.flush()?;
        drop(buffered);
        out.sync_data()?;
        fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8], root_key: &[u8]) -> Option<Loaded> {
        super::decode(bytes, bytes.len() as u64, root_key)
    }

    fn loaded(seal: Seal, entries: Vec<(u64, Entry)>) -> Loaded {
        Loaded {
            seal,
            entries,
            old: false,
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_damage() {
        let mut map = Vec::new();
        let seal = Seal::random();
        let entry = Entry {
            stat: seal.print(1, 2, 3, -4, 5),
            trusted: false,
            blob: [7; 20],
            seen: 0,
        };
        map.push((path_key("etc/a"), entry));
        let other = Entry {
            stat: seal.print(1, 9, 3, -4, 5),
            trusted: true,
            ..entry
        };
        map.push((path_key("b"), other));
        let bytes = encode(&seal, &map, b"/root");
        assert_eq!(decode(&bytes, b"/root"), Some(loaded(seal, map)));
        assert_eq!(
            decode(&bytes, b"/other"),
            None,
            "a cache made for another root is void"
        );
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert_eq!(decode(&flipped, b"/root"), None);
        assert_eq!(decode(&bytes[..bytes.len() - 1], b"/root"), None);
        assert_eq!(decode(b"", b"/root"), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer, b"/root"), None, "bytes after the digest");
        let mut last = bytes.clone();
        *last.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&last, b"/root"), None, "an altered digest");
        // Every truncation is void, wherever it cuts an entry.
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut], b"/root"), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_cache_file_loads_from_disk_and_a_torn_one_is_void() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("files");
        let mut map = Vec::new();
        let seal = Seal::random();
        for i in 0..1000u64 {
            let entry = Entry {
                stat: seal.print(1, i, i * 3, 10, 11),
                trusted: true,
                blob: [i as u8; 20],
                seen: 0,
            };
            map.push((path_key(&format!("dir/{i}")), entry));
        }
        let bytes = encode(&seal, &map, b"/root");
        // What a save cut short by a crash left behind is written over.
        fs::write(dir.path().join("files.part"), vec![7; 1 << 20]).unwrap();
        write_atomically(&file, |out| out.write_all(&bytes)).unwrap();
        assert_eq!(load(&file, b"/root"), Some(loaded(seal, map)));
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["files"], "no temp file left");
        fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(load(&file, b"/root"), None);
        assert_eq!(load(&dir.path().join("missing"), b"/root"), None);
    }

    #[test]
    fn a_file_of_the_path_keyed_format_is_no_cache() {
        // Version 01: magic, root key, count, then per entry a u16 path
        // length, the path and the stat, under a SHA-256 of it all.
        let mut old = b"TENDSC01".to_vec();
        old.extend_from_slice(&5u32.to_le_bytes());
        old.extend_from_slice(b"/root");
        old.extend_from_slice(&1u64.to_le_bytes());
        old.extend_from_slice(&1u16.to_le_bytes());
        old.push(b'a');
        old.extend_from_slice(&[1; 8 * 6 + 20]);
        let digest = Sha256::digest(&old);
        old.extend_from_slice(&digest);
        assert_eq!(decode(&old, b"/root"), None);
    }

    /// A version 02 file kept each stat and the moment its content was
    /// read: it is read on, each stat printed under a new seal, an entry
    /// read at its mtime's moment racy, one read after it trusted, one with
    /// no clock never.
    #[test]
    fn a_file_of_the_stat_keeping_format_is_read_on_and_the_moment_decides_trust() {
        let mtime: i64 = 1_700_000_000 * 1_000_000_000 + 500;
        let mut file = MAGIC_02.to_vec();
        file.extend_from_slice(&5u32.to_le_bytes());
        file.extend_from_slice(b"/root");
        file.extend_from_slice(&3u64.to_le_bytes());
        for (key, recorded) in [(1u64, mtime), (2, mtime + 1), (3, NEVER)] {
            for word in [key, 7, 8 + key, 9, mtime as u64, 10, recorded as u64] {
                file.extend_from_slice(&word.to_le_bytes());
            }
            file.extend_from_slice(&[5; 20]);
        }
        let digest = Sha256::digest(&file);
        file.extend_from_slice(&digest);
        let Loaded { seal, entries, old } = decode(&file, b"/root").unwrap();
        assert!(old, "to be written again in the format of now");
        let read: Vec<(u64, bool, u64)> = entries
            .into_iter()
            .map(|(k, e)| (k, e.trusted, e.stat))
            .collect();
        let print = |ino| seal.print(7, ino, 9, mtime, 10);
        assert_eq!(
            read,
            [
                (1, false, print(9)),
                (2, true, print(10)),
                (3, false, print(11))
            ]
        );
    }

    /// Every field of the stat moves the print, and another cache's seal
    /// prints the same stat apart.
    #[test]
    fn a_stat_prints_apart_from_any_other_and_under_another_seal() {
        let seal = Seal::random();
        let stat = (1u64, 2u64, 3u64, 4i64, 5i64);
        let print = |s: &Seal, (d, i, z, m, c): (u64, u64, u64, i64, i64)| s.print(d, i, z, m, c);
        let base = print(&seal, stat);
        assert_eq!(base, print(&seal, stat), "the same stat prints the same");
        let changed = [
            (9, 2, 3, 4, 5),
            (1, 9, 3, 4, 5),
            (1, 2, 9, 4, 5),
            (1, 2, 3, 9, 5),
            (1, 2, 3, 4, 9),
            // Fields are not mixed up: swapped values print apart.
            (2, 1, 3, 4, 5),
            (1, 2, 3, 5, 4),
        ];
        for other in changed {
            assert_ne!(print(&seal, other), base, "{other:?}");
        }
        assert_ne!(print(&Seal::random(), stat), base);
        // Stable across builds and machines: a saved cache is read again.
        let fixed = Seal([0; 16]);
        assert_eq!(fixed.print(1, 2, 3, 4, 5), 0x0ac1_3373_36f4_3ed3);
    }

    /// An entry's trust byte is 0 or 1; anything else is damage.
    #[test]
    fn a_trust_byte_of_neither_answer_voids_the_file() {
        let seal = Seal::random();
        let entry = Entry {
            stat: 1,
            trusted: true,
            blob: [2; 20],
            seen: 0,
        };
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&5u32.to_le_bytes());
        bytes.extend_from_slice(b"/root");
        bytes.extend_from_slice(&seal.0);
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&9u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.push(2);
        bytes.extend_from_slice(&[2; 20]);
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(&digest);
        assert_eq!(decode(&bytes, b"/root"), None);
        assert_eq!(
            decode(&encode(&seal, &[(9, entry)], b"/root"), b"/root"),
            Some(loaded(seal, vec![(9, entry)]))
        );
    }

    #[test]
    fn path_keys_are_stable_and_distinct() {
        assert_eq!(path_key("etc/a"), path_key("etc/a"));
        assert_ne!(path_key("etc/a"), path_key("etc/b"));
        // Fixed across builds: a saved cache must find its entries again.
        assert_eq!(path_key(""), 0x141c_fc98_42c4_b0e3);
    }

    #[test]
    fn target_names_become_one_safe_component() {
        assert_eq!(file_stem("files"), "files");
        assert_eq!(file_stem("../x"), "x-2e2e2f78");
        assert_eq!(file_stem(".hidden"), "x-2e68696464656e");
    }
}

//! The stat cache's file: a compact little-endian record list under a
//! SHA-256 checksum, replaced atomically; damage means an empty cache.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::statcache::Entry;

const MAGIC: &[u8; 8] = b"TENDSC01";
/// Bytes of an entry after its path: dev, ino, size, mtime, ctime,
/// recorded, blob.
const FIXED: usize = 8 * 6 + 20;

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

pub(super) fn encode(map: &HashMap<Box<str>, Entry>, root_key: &[u8]) -> Vec<u8> {
    let paths: usize = map.keys().map(|k| k.len()).sum();
    let mut out = Vec::with_capacity(64 + root_key.len() + paths + map.len() * (2 + FIXED));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(root_key.len() as u32).to_le_bytes());
    out.extend_from_slice(root_key);
    out.extend_from_slice(&(map.len() as u64).to_le_bytes());
    for (path, e) in map {
        // RelPath components are at most a few hundred bytes; a longer
        // path is simply not cached.
        let Ok(len) = u16::try_from(path.len()) else {
            continue;
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        for v in [e.dev, e.ino, e.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [e.mtime, e.ctime, e.recorded] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&e.blob);
    }
    let count_at = 8 + 4 + root_key.len();
    let written = map
        .keys()
        .filter(|k| k.len() <= usize::from(u16::MAX))
        .count() as u64;
    out[count_at..count_at + 8].copy_from_slice(&written.to_le_bytes());
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

/// Reads a cache file; anything missing, damaged or made for another root
/// gives `None`, which means an empty cache.
pub(super) fn load(file: &Path, root_key: &[u8]) -> Option<HashMap<Box<str>, Entry>> {
    let bytes = fs::read(file).ok()?;
    decode(&bytes, root_key)
}

fn decode(bytes: &[u8], root_key: &[u8]) -> Option<HashMap<Box<str>, Entry>> {
    let (body, digest) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != digest {
        return None;
    }
    let mut r = Reader(body);
    if r.take(8)? != MAGIC {
        return None;
    }
    let key_len = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
    if r.take(key_len)? != root_key {
        return None;
    }
    let count = usize::try_from(r.u64()?).ok()?;
    let mut map = HashMap::with_capacity(count.min(body.len() / (2 + FIXED)));
    for _ in 0..count {
        let len = u16::from_le_bytes(r.take(2)?.try_into().ok()?);
        let path = std::str::from_utf8(r.take(usize::from(len))?).ok()?;
        let (dev, ino, size) = (r.u64()?, r.u64()?, r.u64()?);
        let (mtime, ctime, recorded) = (r.u64()? as i64, r.u64()? as i64, r.u64()? as i64);
        let blob = r.take(20)?.try_into().ok()?;
        map.insert(
            path.into(),
            Entry {
                dev,
                ino,
                size,
                mtime,
                ctime,
                recorded,
                blob,
                seen: 0,
            },
        );
    }
    r.0.is_empty().then_some(map)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

pub(super) fn write_atomically(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(format!(".{:016x}.part", rand::random::<u64>()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut out = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        out.write_all(bytes)?;
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
    use crate::target::files::statcache::NEVER;

    #[test]
    fn encoding_round_trips_and_rejects_damage() {
        let mut map = HashMap::new();
        let entry = Entry {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: -4,
            ctime: 5,
            recorded: NEVER,
            blob: [7; 20],
            seen: 0,
        };
        map.insert(Box::<str>::from("etc/a"), entry);
        map.insert(Box::<str>::from("b"), Entry { ino: 9, ..entry });
        let bytes = encode(&map, b"/root");
        assert_eq!(decode(&bytes, b"/root"), Some(map));
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
    }

    #[test]
    fn target_names_become_one_safe_component() {
        assert_eq!(file_stem("files"), "files");
        assert_eq!(file_stem("../x"), "x-2e2e2f78");
        assert_eq!(file_stem(".hidden"), "x-2e68696464656e");
    }
}

//! The stat cache: path -> (dev, ino, size, mtime, ctime, blob), so a file
//! whose stat is unchanged is not read again; kept in the state dir in a
//! compact checksummed format.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use git2::Oid;
use rustix::fs::{self as rfs, Timespec, Timestamps, UTIME_NOW};
use sha2::{Digest, Sha256};

use super::observe::Meta;

const MAGIC: &[u8; 8] = b"TENDSC01";
/// An entry not looked up during this many flushes (passes) is dropped.
const KEEP_GENERATIONS: u32 = 8;
/// `recorded` of an entry made without a filesystem clock: never trusted.
const NEVER: i64 = i64::MIN;
const NANOS: i64 = 1_000_000_000;
/// Bytes of an entry after its path: dev, ino, size, mtime, ctime,
/// recorded, blob.
const FIXED: usize = 8 * 6 + 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    ctime: i64,
    /// The filesystem clock when the content was read (or written).
    recorded: i64,
    blob: [u8; 20],
    /// The generation in which the entry was last used.
    seen: u32,
}

impl Entry {
    fn matches(&self, meta: &Meta) -> bool {
        self.dev == meta.dev
            && self.ino == meta.ino
            && self.size == meta.size
            && self.mtime == meta.mtime
            && self.ctime == meta.ctime
    }
}

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

struct Inner {
    map: HashMap<Box<str>, Entry>,
    generation: u32,
    dirty: bool,
}

pub(super) struct StatCache {
    /// Where the cache persists; `None` when the state dir is unusable.
    file: Option<PathBuf>,
    /// A file in the state dir touched to read the filesystem's clock.
    clock: Option<File>,
    /// The root the entries describe; a cache made for another root is void.
    root_key: Vec<u8>,
    rehash: AtomicBool,
    inner: Mutex<Inner>,
}

impl StatCache {
    pub(super) fn open(state_dir: &Path, name: &str, root: &Path) -> StatCache {
        let dir = state_dir.join("statcache");
        let stem = file_stem(name);
        let (file, clock) = match fs::create_dir_all(&dir) {
            Ok(()) => {
                let clock = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(dir.join(format!("{stem}.clock")));
                if let Err(e) = &clock {
                    tracing::warn!(
                        target = name,
                        "stat cache clock unusable, content will be re-read: {e}"
                    );
                }
                (Some(dir.join(stem)), clock.ok())
            }
            Err(e) => {
                tracing::warn!(target = name, "stat cache disabled, {}: {e}", dir.display());
                (None, None)
            }
        };
        let root_key = root.as_os_str().as_encoded_bytes().to_vec();
        let map = file
            .as_deref()
            .and_then(|f| load(f, &root_key))
            .unwrap_or_default();
        StatCache {
            file,
            clock,
            root_key,
            rehash: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                map,
                generation: 0,
                dirty: false,
            }),
        }
    }

    pub(super) fn set_rehash(&self, rehash: bool) {
        self.rehash.store(rehash, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The map stays consistent whatever panicked while holding it.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The filesystem's idea of now, in nanoseconds, read by touching a file
    /// in the state dir: file timestamps come from that clock (and its
    /// granularity), not from the system clock. `None` if unreadable.
    pub(super) fn clock_now(&self) -> Option<i64> {
        let clock = self.clock.as_ref()?;
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        };
        rfs::futimens(
            clock,
            &Timestamps {
                last_access: now,
                last_modification: now,
            },
        )
        .ok()?;
        rfs::fstat(clock).ok().map(|st| Meta::from_stat(&st).mtime)
    }

    /// The cached blob for `path` if its stat is unchanged and the entry is
    /// not racy.
    pub(super) fn lookup(&self, path: &str, meta: &Meta) -> Option<Oid> {
        if self.rehash.load(Ordering::Relaxed) {
            return None;
        }
        let mut inner = self.lock();
        let generation = inner.generation;
        let entry = inner.map.get_mut(path)?;
        if !entry.matches(meta) || !trusted(entry.mtime, entry.recorded) {
            return None;
        }
        entry.seen = generation;
        Oid::from_bytes(&entry.blob).ok()
    }

    /// Remembers that the file at `path`, with this stat, had content `blob`
    /// at filesystem time `recorded` (taken before the content was read).
    pub(super) fn record(&self, path: &str, meta: &Meta, blob: Oid, recorded: Option<i64>) {
        let Ok(blob) = <[u8; 20]>::try_from(blob.as_bytes()) else {
            return;
        };
        let mut inner = self.lock();
        let entry = Entry {
            dev: meta.dev,
            ino: meta.ino,
            size: meta.size,
            mtime: meta.mtime,
            ctime: meta.ctime,
            recorded: recorded.unwrap_or(NEVER),
            blob,
            seen: inner.generation,
        };
        match inner.map.get_mut(path) {
            Some(old) if *old == entry => return,
            Some(old) => *old = entry,
            None => {
                inner.map.insert(path.into(), entry);
            }
        }
        inner.dirty = true;
    }

    /// Carries a trusted entry across a change of attributes only (chmod,
    /// chown move ctime): content untouched since a trusted read is known.
    pub(super) fn carry(&self, path: &str, before: &Meta, after: &Meta) {
        let mut inner = self.lock();
        let Some(entry) = inner.map.get_mut(path) else {
            return;
        };
        let same_content = (before.dev, before.ino, before.size, before.mtime)
            == (after.dev, after.ino, after.size, after.mtime);
        if entry.matches(before) && trusted(entry.mtime, entry.recorded) && same_content {
            entry.ctime = after.ctime;
            inner.dirty = true;
        }
    }

    pub(super) fn forget(&self, path: &str) {
        let mut inner = self.lock();
        if inner.map.remove(path).is_some() {
            inner.dirty = true;
        }
    }

    /// Writes the cache if it changed, atomically (temp file, rename), and
    /// drops entries unused for a while.
    pub(super) fn flush(&self) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let bytes = {
            let mut inner = self.lock();
            let generation = inner.generation;
            let before = inner.map.len();
            inner
                .map
                .retain(|_, e| generation.wrapping_sub(e.seen) < KEEP_GENERATIONS);
            let pruned = inner.map.len() != before;
            inner.generation = generation.wrapping_add(1);
            if !inner.dirty && !pruned {
                return Ok(());
            }
            inner.dirty = false;
            encode(&inner.map, &self.root_key)
        };
        let result = write_atomically(file, &bytes);
        if result.is_err() {
            self.lock().dirty = true;
        }
        result
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().map.len()
    }
}

/// The cache file's name for a target name, kept to one safe path component.
fn file_stem(name: &str) -> String {
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

fn encode(map: &HashMap<Box<str>, Entry>, root_key: &[u8]) -> Vec<u8> {
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
fn load(file: &Path, root_key: &[u8]) -> Option<HashMap<Box<str>, Entry>> {
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

fn write_atomically(file: &Path, bytes: &[u8]) -> io::Result<()> {
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

    #[test]
    fn racy_entries_are_not_trusted() {
        let t = 1_700_000_000 * NANOS + 500;
        assert!(trusted(t - 1, t));
        assert!(
            !trusted(t, t),
            "an mtime equal to the recording moment is racy"
        );
        assert!(!trusted(t + 1, t));
        assert!(!trusted(t - NANOS, NEVER));
        // Whole-second mtimes need a margin of two seconds.
        let whole = 1_700_000_000 * NANOS;
        assert!(!trusted(whole, whole + NANOS + 1));
        assert!(trusted(whole, whole + 2 * NANOS));
    }

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

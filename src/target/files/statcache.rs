//! The stat cache: a hash of the path -> (a keyed print of dev, ino, size,
//! mtime and ctime, blob), so a file whose stat is unchanged is not read
//! again; kept in the state dir in a compact checksummed file (see
//! `cachefile`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

use git2::Oid;
use rustix::fs::{self as rfs, Timespec, Timestamps, UTIME_NOW};

use super::at::Meta;
use super::cachefile::{
    encode_to, file_stem, load, path_key, trusted, write_atomically, Entry, Loaded, NEVER,
};
use super::stattable::{Table, GONE};

/// An entry not looked up during this many flushes (passes) is dropped.
pub(super) const KEEP_GENERATIONS: u16 = 8;

/// The generation after `g`: never the mark of a forgotten entry.
fn next_generation(g: u16) -> u16 {
    match g.wrapping_add(1) {
        GONE => 0,
        next => next,
    }
}

struct Inner {
    /// Keyed by `path_key`: a collision is harmless, an entry vouches only
    /// for the inode (dev, ino) with the stat it names.
    map: Table,
    /// The cache file being read on another thread; the map is taken from
    /// it at the first use.
    loading: Option<JoinHandle<Option<(Table, bool)>>>,
    /// Let go of once saved (see [`StatCache::release`]): when each entry
    /// was last seen, in key order, for the map read again at the next use.
    released: Option<Vec<u16>>,
    generation: u16,
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
        // Read while the caller goes on (fetching, reading the declaration):
        // nothing looks at the cache before the first observation.
        let (mut map, mut loading, mut rewrite) = (Table::empty(), None, false);
        if let Some(f) = &file {
            let (f2, key) = (f.clone(), root_key.clone());
            let spawned = std::thread::Builder::new()
                .name("tend-statcache".into())
                .spawn(move || load(&f2, &key).map(Table::from_entries));
            match spawned {
                Ok(handle) => loading = Some(handle),
                Err(_) => {
                    (map, rewrite) =
                        Table::from_entries(load(f, &root_key).unwrap_or_else(Loaded::empty))
                }
            }
        }
        StatCache {
            file,
            clock,
            root_key,
            rehash: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                map,
                loading,
                released: None,
                generation: 0,
                // Written again, in order and format, by the next flush.
                dirty: rewrite,
            }),
        }
    }

    pub(super) fn set_rehash(&self, rehash: bool) {
        self.rehash.store(rehash, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The map stays consistent whatever panicked while holding it.
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(loading) = inner.loading.take() {
            // A reader that failed (or panicked) leaves an empty cache.
            let (map, rewrite) = loading
                .join()
                .ok()
                .flatten()
                .unwrap_or_else(|| (Table::empty(), false));
            inner.map = map;
            // Written again, in order and format, by the next flush.
            inner.dirty |= rewrite;
        }
        if let Some(seen) = inner.released.take() {
            let loaded = self.file.as_ref().and_then(|f| load(f, &self.root_key));
            let (mut map, rewrite) = Table::from_entries(loaded.unwrap_or_else(Loaded::empty));
            if !map.set_seen(&seen) {
                // Not the file that was saved: every entry counts as seen
                // now, and a stale one goes after a few passes.
                map.see_all(inner.generation);
            }
            inner.map = map;
            inner.dirty |= rewrite;
        }
        inner
    }

    /// Lets the entries go once the file holds them all (after a
    /// [`StatCache::flush`] that saved them): a daemon waits between full
    /// passes holding nothing the next use can read again. Only when each
    /// entry was last seen is kept, so that unused entries still go after
    /// [`KEEP_GENERATIONS`] passes.
    pub(super) fn release(&self) {
        if self.file.is_none() {
            return;
        }
        // Let go of already (a pass that did not look): not read just to be
        // let go of again.
        let held = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if held.released.is_some() {
            return;
        }
        drop(held);
        let mut inner = self.lock();
        if inner.dirty {
            return;
        }
        let seen = inner.map.seen();
        inner.map = Table::empty();
        inner.released = Some(seen);
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
        let key = path_key(path);
        let mut inner = self.lock();
        let (generation, stat) = (inner.generation, inner.map.print(meta));
        let entry = inner.map.get_mut(key)?;
        if entry.stat != stat || !entry.trusted {
            return None;
        }
        entry.seen = generation;
        Oid::from_bytes(&entry.blob).ok()
    }

    /// The blob last recorded for `path`, whatever its stat is now: what
    /// tend last knew to be there.
    pub(super) fn last_known(&self, path: &str) -> Option<Oid> {
        let mut inner = self.lock();
        Oid::from_bytes(&inner.map.get_mut(path_key(path))?.blob).ok()
    }

    /// Remembers that the file at `path`, with this stat, had content `blob`
    /// at filesystem time `recorded` (taken before the content was read).
    pub(super) fn record(&self, path: &str, meta: &Meta, blob: Oid, recorded: Option<i64>) {
        let Ok(blob) = <[u8; 20]>::try_from(blob.as_bytes()) else {
            return;
        };
        let key = path_key(path);
        let mut inner = self.lock();
        let entry = Entry {
            stat: inner.map.print(meta),
            trusted: trusted(meta.mtime, recorded.unwrap_or(NEVER)),
            blob,
            seen: inner.generation,
        };
        if inner.map.put(key, entry) {
            inner.dirty = true;
        }
    }

    /// Carries a trusted entry across a change of attributes only (chmod,
    /// chown move ctime): content untouched since a trusted read is known.
    pub(super) fn carry(&self, path: &str, before: &Meta, after: &Meta) {
        let key = path_key(path);
        let mut inner = self.lock();
        let (was, now) = (inner.map.print(before), inner.map.print(after));
        let Some(entry) = inner.map.get_mut(key) else {
            return;
        };
        let same_content = (before.dev, before.ino, before.size, before.mtime)
            == (after.dev, after.ino, after.size, after.mtime);
        if entry.stat == was && entry.trusted && same_content {
            entry.stat = now;
            inner.dirty = true;
        }
    }

    pub(super) fn forget(&self, path: &str) {
        let mut inner = self.lock();
        if inner.map.remove(path_key(path)) {
            inner.dirty = true;
        }
    }

    /// Writes the cache if it changed, atomically (temp file, rename), and
    /// drops entries unused for a while.
    pub(super) fn flush(&self) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut inner = self.lock();
        let generation = inner.generation;
        let mut pruned = false;
        inner.map.compact(|e| {
            let keep = generation.wrapping_sub(e.seen) < KEEP_GENERATIONS;
            pruned |= !keep;
            keep
        });
        inner.generation = next_generation(generation);
        if !inner.dirty && !pruned {
            return Ok(());
        }
        // Streamed to the file under the lock (only the pass that flushes
        // uses the cache now), not encoded whole in memory first.
        let result = write_atomically(file, |out| {
            encode_to(out, inner.map.seal(), inner.map.entries(), &self.root_key)
        });
        inner.dirty = result.is_err();
        result
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether the entries are let go of, without reading them again.
    #[cfg(test)]
    pub(super) fn is_released(&self) -> bool {
        self.inner.lock().unwrap().released.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racy_entries_are_not_trusted() {
        const NANOS: i64 = 1_000_000_000;
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
}

//! Observation: what stands at a path, never following its last component;
//! file content named by its Git blob id, read only when the stat cache
//! cannot vouch for it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use git2::Oid;
use rustix::fs::{self as rfs, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha1::{Digest, Sha1};

use super::at::{is_absent, open_regular, read_regular, stat_at, Meta};
use super::resolve::{type_name, Root};
use super::{FilesTarget, View};
use crate::model::{Live, Observed, RelPath};

/// Read size when hashing; also the largest buffer an observation holds.
const CHUNK: usize = 64 * 1024;
/// Batches of at least this many paths are observed on two threads.
const PARALLEL_FROM: usize = 2048;
/// How many paths a pass observes at once (`Target::observe_limit`): the
/// answers of a batch are held together (half a MiB at 4,096), and two
/// threads still share each one.
pub(super) const BATCH: usize = 4096;

/// The Git blob id of a file's first `size` bytes, read in chunks so a huge
/// file costs no more memory than a small one.
pub(super) fn hash_file(file: &mut File, size: u64, buf: &mut Vec<u8>) -> io::Result<Oid> {
    let mut header = [0u8; 32];
    let mut cursor = io::Cursor::new(&mut header[..]);
    write!(cursor, "blob {size}\0")?;
    let header_len = usize::try_from(cursor.position()).unwrap_or(0);
    let mut hasher = Sha1::new();
    hasher.update(&header[..header_len]);
    buf.resize(CHUNK, 0);
    let mut remaining = size;
    while remaining > 0 {
        let want = usize::try_from(remaining).map_or(CHUNK, |r| r.min(CHUNK));
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::other("file shrank while being read"));
        }
        hasher.update(&buf[..n]);
        remaining -= n as u64;
    }
    Oid::from_bytes(&hasher.finalize()).map_err(io::Error::other)
}

/// Moves each `items[k]` to `order[k]`, where `order` is a permutation of
/// the indices, without a second vector.
fn put_in_place<T>(items: &mut [T], mut order: Vec<usize>) {
    for k in 0..items.len() {
        while order[k] != k {
            let j = order[k];
            items.swap(k, j);
            order.swap(k, j);
        }
    }
}

/// State shared by the observations of one batch.
#[derive(Default)]
pub(super) struct Batch {
    /// The filesystem clock, read once, before the first file is hashed.
    clock: Option<Option<i64>>,
    buf: Vec<u8>,
    /// The path observed now holds a decrypted secret: its hash is neither
    /// looked up in nor kept in the stat cache, which persists.
    uncached: bool,
}

impl Batch {
    /// A batch of one path; `uncached` when it holds a decrypted secret.
    pub(super) fn one(uncached: bool) -> Batch {
        Batch {
            uncached,
            ..Batch::default()
        }
    }
}

impl FilesTarget {
    #[cfg(test)]
    pub(super) fn observe_paths(&self, paths: &[&RelPath]) -> Vec<Observed> {
        self.observe_marked(paths, &[])
    }

    /// [`Self::observe_paths`], where `secret[i]` (when given) says that
    /// `paths[i]` holds a decrypted secret.
    pub(super) fn observe_marked(&self, paths: &[&RelPath], secret: &[bool]) -> Vec<Observed> {
        let tree = match self.view() {
            View::Tree(tree) => tree,
            View::Empty => return vec![Observed::Absent; paths.len()],
            View::Broken(reason) => return vec![Observed::Unknown(reason); paths.len()],
        };
        // Grouped by parent, each parent directory is resolved once per batch
        // and only one is held open at a time. Paths come mostly in order, so
        // runs of one parent are sorted, not every path.
        let mut runs: Vec<(&str, std::ops::Range<usize>)> = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            let parent = path.split_last().0;
            match runs.last_mut() {
                Some((p, run)) if *p == parent => run.end = i + 1,
                _ => runs.push((parent, i..i + 1)),
            }
        }
        runs.sort_by(|a, b| a.0.cmp(b.0));
        let order: Vec<usize> = runs.into_iter().flat_map(|(_, run)| run).collect();
        // A large batch is observed on two threads, each half in its own
        // directories (bar the one they may share at the split).
        let (first, second) = if order.len() >= PARALLEL_FROM {
            order.split_at(order.len() / 2)
        } else {
            (&order[..], &[][..])
        };
        let (mut seen, b) = std::thread::scope(|s| {
            let other = (!second.is_empty()).then(|| {
                std::thread::Builder::new()
                    .name("tend-observe".into())
                    .spawn_scoped(s, || self.observe_in_order(&tree, paths, secret, second, 0))
            });
            // Room for both halves, so they join without a copy.
            let a = self.observe_in_order(&tree, paths, secret, first, second.len());
            let b = match other {
                None => Vec::new(),
                Some(Ok(handle)) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: this one does the rest.
                Some(Err(_)) => self.observe_in_order(&tree, paths, secret, second, 0),
            };
            (a, b)
        });
        seen.extend(b);
        put_in_place(&mut seen, order);
        seen
    }

    /// Observes `paths[i]` for each `i` of `order`, in that order, with
    /// room for `more` after them.
    fn observe_in_order(
        &self,
        tree: &Root,
        paths: &[&RelPath],
        secret: &[bool],
        order: &[usize],
        more: usize,
    ) -> Vec<Observed> {
        let mut out = Vec::with_capacity(order.len() + more);
        let mut batch = Batch::default();
        let mut current: Option<(&str, Result<OwnedFd, Errno>)> = None;
        for &i in order {
            let path = paths[i];
            batch.uncached = secret.get(i).copied().unwrap_or(false);
            let (parent, name) = path.split_last();
            let dir = match &current {
                Some((p, dir)) if *p == parent => dir,
                _ => &current.insert((parent, tree.open_dir(parent, false))).1,
            };
            out.push(match dir {
                Ok(dir) => self.observe_at(dir.as_fd(), path, name, &mut batch),
                Err(e) if is_absent(*e) => {
                    self.cache.forget(path.as_str());
                    Observed::Absent
                }
                Err(e) => Observed::Unknown(format!("{}: {e}", super::shown(parent))),
            });
        }
        out
    }

    fn observe_at(
        &self,
        dir: BorrowedFd,
        path: &RelPath,
        name: &str,
        batch: &mut Batch,
    ) -> Observed {
        match self.live_at(dir, path, name, batch) {
            Ok(Some((_, live))) => Observed::Present(live),
            Ok(None) => Observed::Absent,
            Err(e) => Observed::Unknown(format!("{path}: {e}")),
        }
    }

    /// What stands at `name` in `dir` (`path` from the root), with its stat.
    pub(super) fn live_at(
        &self,
        dir: BorrowedFd,
        path: &RelPath,
        name: &str,
        batch: &mut Batch,
    ) -> io::Result<Option<(Meta, Live)>> {
        let meta = match stat_at(dir, name) {
            Ok(meta) => meta,
            Err(e) if is_absent(e) => {
                self.cache.forget(path.as_str());
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let file_type = meta.file_type();
        if file_type != FileType::RegularFile {
            self.cache.forget(path.as_str());
        }
        let live = match file_type {
            FileType::RegularFile => return self.file_at(dir, path, name, meta, batch),
            FileType::Symlink => match rfs::readlinkat(dir, name, Vec::new()) {
                Ok(target) => Live::Symlink {
                    target: String::from_utf8_lossy(target.as_bytes()).into_owned(),
                },
                Err(e) if is_absent(e) => return Ok(None),
                Err(e) => return Err(e.into()),
            },
            FileType::Directory => match dir_is_empty(dir, name) {
                Ok(empty) => Live::Directory { empty },
                Err(e) if is_absent(e) => return Ok(None),
                Err(e) => return Err(e.into()),
            },
            other => Live::Other(type_name(other).to_string()),
        };
        Ok(Some((meta, live)))
    }

    fn file_at(
        &self,
        dir: BorrowedFd,
        path: &RelPath,
        name: &str,
        meta: Meta,
        batch: &mut Batch,
    ) -> io::Result<Option<(Meta, Live)>> {
        let live = |meta: &Meta, blob| Live::File {
            blob,
            size: meta.size,
            mode: meta.perm(),
            uid: meta.uid,
            gid: meta.gid,
        };
        if batch.uncached {
            self.cache.forget(path.as_str());
        } else if let Some(blob) = self.cache.lookup(path.as_str(), &meta) {
            return Ok(Some((meta, live(&meta, blob))));
        }
        // The clock is read before the content, so a write racing with this
        // read leaves an mtime the cache will not trust.
        let recorded = *batch.clock.get_or_insert_with(|| self.cache.clock_now());
        let (mut file, meta) = match open_regular(dir, name) {
            Ok(Some(opened)) => opened,
            Ok(None) => return Err(io::Error::other("replaced while being observed")),
            Err(e) if is_absent(e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        self.hashes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let blob = hash_file(&mut file, meta.size, &mut batch.buf)?;
        if !batch.uncached {
            self.cache.record(path.as_str(), &meta, blob, recorded);
        }
        Ok(Some((meta, live(&meta, blob))))
    }

    pub(super) fn read_live_bytes(&self, path: &RelPath) -> io::Result<Option<Vec<u8>>> {
        let (parent, name) = path.split_last();
        let tree = match self.view() {
            View::Tree(tree) => tree,
            View::Empty => return Ok(None),
            View::Broken(reason) => return Err(io::Error::other(reason)),
        };
        let dir = match tree.open_dir(parent, false) {
            Ok(dir) => dir,
            Err(e) if is_absent(e) => return Ok(None),
            Err(e) => {
                return Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("{}: {e}", super::shown(parent)),
                ))
            }
        };
        read_regular(dir.as_fd(), name)
            .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
    }
}

fn dir_is_empty(dir: BorrowedFd, name: &str) -> Result<bool, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rfs::openat(dir, name, flags, Mode::empty())?;
    let mut entries = rfs::Dir::new(fd)?;
    while let Some(entry) = entries.read() {
        let bytes = entry?.file_name().to_bytes().to_vec();
        if bytes != b"." && bytes != b".." {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn put_in_place_undoes_any_order() {
        let orders: [&[usize]; 5] = [&[], &[0], &[1, 0], &[2, 0, 1], &[3, 4, 0, 2, 1]];
        for order in orders {
            // items[k] belongs at order[k].
            let mut items: Vec<usize> = order.to_vec();
            super::put_in_place(&mut items, order.to_vec());
            assert_eq!(items, (0..order.len()).collect::<Vec<_>>(), "{order:?}");
        }
    }
}

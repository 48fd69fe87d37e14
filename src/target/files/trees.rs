//! Whole-tree publishing (`link`, SPEC §10): each revision is a complete
//! tree under `<root>/.tend/revs/<commit>/`, built under `.<commit>.tmp`
//! from hard links to the published tree's files (the pass then replaces
//! what differs by rename, never in place, so no other tree changes),
//! renamed to its name once complete, and published by renaming a new
//! symlink over `<root>/<NAME>`; trees beyond `keep` previous ones go. A
//! crash at any point leaves the link on a complete tree: only complete
//! trees carry a commit's name, and the link only ever names those.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use git2::Oid;
use rustix::fs::{
    self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Timespec, Timestamps, UTIME_NOW,
    UTIME_OMIT,
};
use rustix::io::Errno;

use super::durable::WholeFs;
use super::observe::stat_at;
use super::remove::is_temp_name;
use super::resolve::{is_absent, type_name, Root};
use super::write::temp_name;
use super::{counted_fsync, transient, FilesTarget, View};
use crate::config::Link;
use crate::model::{RelPath, ResourceId};
use crate::target::TargetError;

/// The trees' directory, relative to the root, as the link names it.
const REVS: &str = ".tend/revs";
const DIR_MODE: u32 = 0o755;
/// tend's own directories are opened beneath their parent and never
/// through a symlink: a link planted there is refused, not followed.
const OWN: ResolveFlags = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::BENEATH);

pub(super) struct Trees {
    link: Link,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The revision passes write, and whether its tree is still under its
    /// temp name.
    writing: Option<(Oid, bool)>,
    /// What passes wrote is what readers see.
    published: bool,
    /// Identities whose last write into the unpublished tree failed and
    /// is retried: the tree is not complete until they succeed.
    failed: HashSet<String>,
}

impl Trees {
    pub(super) fn new(link: Link) -> Trees {
        Trees {
            link,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn unpublished(&self) -> bool {
        !self.state().published
    }

    /// Remembers how a write into the tree being built came out.
    pub(super) fn written(&self, id: &ResourceId, result: &Result<(), TargetError>) {
        let mut st = self.state();
        if st.published {
            return;
        }
        match result {
            Err(TargetError::Transient(_)) => st.failed.insert(id.to_string()),
            // Blocked needs a human, not a retry: it holds nothing back.
            _ => st.failed.remove(id.as_str()),
        };
    }
}

fn staging_name(hex: &str) -> String {
    format!(".{hex}.tmp")
}

/// A commit id in lower-case hex (SHA-1 or SHA-256).
fn is_commit_name(name: &[u8]) -> bool {
    matches!(name.len(), 40 | 64)
        && name
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Opens a directory of tend's own in `dir`, making it when `make` is set.
fn own_dir(dir: BorrowedFd, name: &str, make: bool) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut made = false;
    loop {
        match rfs::openat2(dir, name, flags, Mode::empty(), OWN) {
            Err(Errno::NOENT) if make && !made => {
                make_dir(dir, name)?;
                made = true;
            }
            Err(Errno::AGAIN | Errno::INTR) => {}
            other => return other,
        }
    }
}

/// mkdir with mode 0755 whatever the umask, then the parent synced; one
/// there already is fine.
fn make_dir(parent: BorrowedFd, name: &str) -> Result<(), Errno> {
    match rfs::mkdirat(parent, name, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(()),
        Err(e) => return Err(e),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let made = rfs::openat(parent, name, flags, Mode::empty())?;
    if rfs::fstat(&made)?.st_mode & 0o7777 != DIR_MODE {
        rfs::fchmod(&made, Mode::from_raw_mode(DIR_MODE))?;
    }
    Ok(())
}

/// Removes the directory `name` in `parent` and everything in it, never
/// following a symlink.
fn remove_tree(parent: BorrowedFd, name: &[u8]) -> Result<(), Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match rfs::openat(parent, name, flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    let mut listing = rfs::Dir::read_from(&dir)?;
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            entries.push((child.to_vec(), entry.file_type()));
        }
    }
    for (child, kind) in entries {
        let kind = match kind {
            FileType::Unknown => {
                match rfs::statat(&dir, child.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(e),
                }
            }
            kind => kind,
        };
        match kind {
            FileType::Directory => remove_tree(dir.as_fd(), &child)?,
            _ => match rfs::unlinkat(&dir, child.as_slice(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(e),
            },
        }
    }
    match rfs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The directory at `rel` in `tree`, made (0755) where missing.
fn make_dirs(tree: &Root, rel: &str) -> Result<OwnedFd, Errno> {
    match tree.open_dir(rel, true) {
        Err(e) if is_absent(e) => {}
        other => return other,
    }
    let mut dir = tree.open_dir("", true)?;
    let mut end = 0;
    for component in rel.split('/') {
        end += component.len();
        let prefix = &rel[..end];
        end += 1;
        if let Err(e) = tree.open_dir(prefix, true) {
            if !is_absent(e) {
                return Err(e);
            }
            make_dir(dir.as_fd(), component)?;
        }
        dir = tree.open_dir(prefix, true)?;
    }
    Ok(dir)
}

impl FilesTarget {
    fn revs(&self, make: bool) -> Result<OwnedFd, Errno> {
        let dot = own_dir(self.base.fd(), ".tend", make)?;
        own_dir(dot.as_fd(), "revs", make)
    }

    fn open_tree(&self, revs: &OwnedFd, name: &str) -> Result<Root, Errno> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = loop {
            match rfs::openat2(revs, name, flags, Mode::empty(), OWN) {
                Err(Errno::AGAIN | Errno::INTR) => {}
                other => break other?,
            }
        };
        Ok(Root::from_fd(fd, self.base.path().join(REVS).join(name)))
    }

    /// The published tree, when the link names one of tend's that is there.
    pub(super) fn published(&self, trees: &Trees) -> Option<(String, Root)> {
        let target = rfs::readlinkat(self.base.fd(), trees.link.name.as_str(), Vec::new()).ok()?;
        let hex = target
            .to_str()
            .ok()?
            .strip_prefix(REVS)?
            .strip_prefix('/')?;
        if !is_commit_name(hex.as_bytes()) {
            return None;
        }
        let tree = self.open_tree(&self.revs(false).ok()?, hex).ok()?;
        Some((hex.to_string(), tree))
    }

    /// Chooses the tree passes over `rev` observe and write: the published
    /// one when it is `rev`'s; else `rev`'s complete tree when one is
    /// there (kept, or renamed just before a crash), or a new one built
    /// from the published tree. On an error nothing can be observed.
    pub(super) fn begin_tree(
        &self,
        trees: &Trees,
        rev: Oid,
        carried: &dyn Fn() -> Vec<RelPath>,
    ) -> Result<(), TargetError> {
        let result = self.choose_tree(trees, rev, carried);
        if let Err(e) = &result {
            self.set_view(View::Broken(e.to_string()));
        }
        result
    }

    fn choose_tree(
        &self,
        trees: &Trees,
        rev: Oid,
        carried: &dyn Fn() -> Vec<RelPath>,
    ) -> Result<(), TargetError> {
        let hex = rev.to_string();
        let mut st = trees.state();
        let revs = self.revs(true).map_err(|e| transient(REVS, "open", e))?;
        let published = match self.published(trees) {
            Some((now, tree)) if now == hex => {
                self.set_view(View::Tree(Arc::new(tree)));
                st.writing = Some((rev, false));
                st.published = true;
                st.failed.clear();
                return Ok(());
            }
            other => other,
        };
        if let (Some((was, staging)), false) = (st.writing, st.published) {
            let name = if staging {
                staging_name(&hex)
            } else {
                hex.clone()
            };
            if was == rev {
                if let Ok(tree) = self.open_tree(&revs, &name) {
                    self.set_view(View::Tree(Arc::new(tree)));
                    return Ok(());
                }
            }
        }
        st.writing = None;
        st.published = false;
        st.failed.clear();
        self.remove_leftovers(&revs);
        if let Ok(tree) = self.open_tree(&revs, &hex) {
            self.set_view(View::Tree(Arc::new(tree)));
            st.writing = Some((rev, false));
            drop(st);
            // Written before, by a pass that may have stopped mid-write.
            let paths = carried();
            let swept = self.clean_temp_files(&paths.iter().collect::<Vec<_>>());
            if swept.removed > 0 {
                tracing::info!(target = %self.name, removed = swept.removed, "removed leftover temp files");
            }
            return Ok(());
        }
        let staging = staging_name(&hex);
        let at = format!("{REVS}/{staging}");
        make_dir(revs.as_fd(), &staging).map_err(|e| transient(&at, "mkdir", e))?;
        let tree = self
            .open_tree(&revs, &staging)
            .map_err(|e| transient(&at, "open", e))?;
        if let Some((_, from)) = &published {
            let carried = self.carry_over(from, &tree, carried())?;
            tracing::debug!(target = %self.name, carried, revision = %rev, "new tree shares the published tree's files");
        }
        counted_fsync(&self.dir_syncs, revs.as_fd()).map_err(|e| transient(REVS, "fsync", e))?;
        self.set_view(View::Tree(Arc::new(tree)));
        st.writing = Some((rev, true));
        Ok(())
    }

    /// Links each of `paths` that `from` holds (files and symlinks) into
    /// `to`, their stat cache entries carried across the link; the new
    /// tree's directories are synced before it can be called complete.
    /// Returns how many were linked; one that cannot be is left for the
    /// pass to write.
    fn carry_over(
        &self,
        from: &Root,
        to: &Root,
        paths: Vec<RelPath>,
    ) -> Result<usize, TargetError> {
        let mut by_parent: BTreeMap<&str, Vec<&RelPath>> = BTreeMap::new();
        for path in &paths {
            by_parent.entry(path.split_last().0).or_default().push(path);
        }
        let mut dirs: BTreeSet<&str> = BTreeSet::from([""]);
        let mut linked = 0;
        for (parent, group) in by_parent {
            let Ok(src) = from.open_dir(parent, false) else {
                continue;
            };
            let Ok(dst) = make_dirs(to, parent) else {
                continue;
            };
            let mut at = parent;
            while dirs.insert(at) {
                at = at.rsplit_once('/').map_or("", |(up, _)| up);
            }
            for path in group {
                let name = path.split_last().1;
                let Ok(before) = stat_at(src.as_fd(), name) else {
                    continue;
                };
                let file = before.file_type() == FileType::RegularFile;
                if !file && before.file_type() != FileType::Symlink {
                    continue;
                }
                let known = file && self.cache.lookup(path.as_str(), &before).is_some();
                if rfs::linkat(&src, name, &dst, name, AtFlags::empty()).is_err() {
                    continue;
                }
                linked += 1;
                if known {
                    if let Ok(after) = stat_at(dst.as_fd(), name) {
                        self.cache.carry(path.as_str(), &before, &after);
                    }
                }
            }
        }
        let whole = match self.whole_fs {
            true => to.open_dir("", true).ok().and_then(WholeFs::open),
            false => None,
        };
        if let Some(whole) = whole {
            return whole
                .sync(&self.fs_syncs)
                .map(|()| linked)
                .map_err(|e| transient(REVS, "syncfs", e));
        }
        for dir in dirs {
            let fd = to
                .open_dir(dir, true)
                .map_err(|e| transient(dir, "open", e))?;
            counted_fsync(&self.dir_syncs, fd.as_fd()).map_err(|e| transient(dir, "fsync", e))?;
        }
        Ok(linked)
    }

    /// What a process stopped mid-way left: trees still under their temp
    /// name (never complete, never linked) and temp links in the root.
    fn remove_leftovers(&self, revs: &OwnedFd) {
        for (name, kind) in entries(revs.as_fd()) {
            if kind == FileType::Directory && name.starts_with(b".") && name.ends_with(b".tmp") {
                match remove_tree(revs.as_fd(), &name) {
                    Ok(()) => {
                        tracing::info!(target = %self.name, tree = %String::from_utf8_lossy(&name), "removed an unfinished tree")
                    }
                    Err(e) => {
                        tracing::warn!(target = %self.name, error = %e, "cannot remove an unfinished tree")
                    }
                }
            }
        }
        let Ok(root) = self.base.open_dir("", true) else {
            return;
        };
        for (name, kind) in entries(root.as_fd()) {
            if kind != FileType::Directory && is_temp_name(&name) {
                let _ = rfs::unlinkat(&root, name.as_slice(), AtFlags::empty());
            }
        }
    }

    /// Makes the tree passes wrote what readers see: renamed to its
    /// commit's name when still under its temp name, then the link
    /// switched to it; then trees beyond `keep` go. Refused while a write
    /// into the tree failed: it is not complete.
    pub(super) fn publish_tree(&self, trees: &Trees) -> Result<bool, TargetError> {
        let mut st = trees.state();
        let Some((rev, staging)) = st.writing.filter(|_| !st.published) else {
            return Ok(false);
        };
        if !st.failed.is_empty() {
            return Err(TargetError::Transient(format!(
                "the tree for {rev} is not published while {} of its writes are retried",
                st.failed.len()
            )));
        }
        let hex = rev.to_string();
        let revs = self.revs(false).map_err(|e| transient(REVS, "open", e))?;
        if staging {
            let at = format!("{REVS}/{hex}");
            rfs::renameat(&revs, staging_name(&hex).as_str(), &revs, hex.as_str())
                .map_err(|e| transient(&at, "rename the finished tree", e))?;
            st.writing = Some((rev, false));
            counted_fsync(&self.dir_syncs, revs.as_fd())
                .map_err(|e| transient(REVS, "fsync", e))?;
            let tree = self
                .open_tree(&revs, &hex)
                .map_err(|e| transient(&at, "open", e))?;
            self.set_view(View::Tree(Arc::new(tree)));
        }
        // Dated now: the newest tree is the last published.
        let now = Timestamps {
            last_access: Timespec {
                tv_sec: 0,
                tv_nsec: UTIME_OMIT,
            },
            last_modification: Timespec {
                tv_sec: 0,
                tv_nsec: UTIME_NOW,
            },
        };
        let _ = rfs::utimensat(&revs, hex.as_str(), &now, AtFlags::SYMLINK_NOFOLLOW);
        self.switch_link(&trees.link.name, &hex)?;
        st.published = true;
        st.failed.clear();
        drop(st);
        self.remove_old_trees(&revs, &hex, trees.link.keep);
        Ok(true)
    }

    /// A new symlink under a temp name, renamed over `<root>/<name>`: a
    /// reader finds the old tree or the new one, never none.
    fn switch_link(&self, name: &str, hex: &str) -> Result<(), TargetError> {
        let target = format!("{REVS}/{hex}");
        let base = self.base.fd();
        if rfs::readlinkat(base, name, Vec::new()).is_ok_and(|t| t.as_bytes() == target.as_bytes())
        {
            return Ok(());
        }
        match stat_at(base, name) {
            Ok(m) if m.file_type() != FileType::Symlink => {
                return Err(TargetError::Transient(format!(
                    "{name}: a {} stands where the link to the published tree goes; nothing was changed, move it away",
                    type_name(m.file_type())
                )))
            }
            _ => {}
        }
        let mut made = None;
        for _ in 0..8 {
            let temp = temp_name();
            match rfs::symlinkat(target.as_str(), base, temp.as_str()) {
                Ok(()) => {
                    made = Some(temp);
                    break;
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(transient(name, "create link", e)),
            }
        }
        let temp =
            made.ok_or_else(|| TargetError::Transient(format!("{name}: no free temp name")))?;
        self.writes
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = rfs::renameat(base, temp.as_str(), base, name) {
            let _ = rfs::unlinkat(base, temp.as_str(), AtFlags::empty());
            return Err(transient(name, "switch link", e));
        }
        let root = self
            .base
            .open_dir("", true)
            .map_err(|e| transient("", "open", e))?;
        counted_fsync(&self.dir_syncs, root.as_fd()).map_err(|e| transient("", "fsync", e))?;
        tracing::info!(target = %self.name, link = name, tree = %target, "published");
        Ok(())
    }

    /// Removes the trees older than the `keep` newest besides `current`.
    fn remove_old_trees(&self, revs: &OwnedFd, current: &str, keep: usize) {
        let mut others: Vec<(i64, Vec<u8>)> = entries(revs.as_fd())
            .into_iter()
            .filter(|(name, kind)| {
                *kind == FileType::Directory && is_commit_name(name) && name != current.as_bytes()
            })
            .filter_map(|(name, _)| {
                let st = rfs::statat(revs, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
                Some((
                    st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
                    name,
                ))
            })
            .collect();
        others.sort_by(|a, b| b.cmp(a));
        for (_, name) in others.into_iter().skip(keep) {
            match remove_tree(revs.as_fd(), &name) {
                Ok(()) => {
                    tracing::debug!(target = %self.name, tree = %String::from_utf8_lossy(&name), "removed an old tree")
                }
                Err(e) => {
                    tracing::warn!(target = %self.name, tree = %String::from_utf8_lossy(&name), error = %e, "cannot remove an old tree")
                }
            }
        }
    }
}

/// A directory's entries (names and types as listed); none when it cannot
/// be read.
fn entries(dir: BorrowedFd) -> Vec<(Vec<u8>, FileType)> {
    let Ok(mut listing) = rfs::Dir::read_from(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(entry)) = listing.read() {
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push((name.to_vec(), entry.file_type()));
        }
    }
    out
}

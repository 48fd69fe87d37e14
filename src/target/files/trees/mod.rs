//! Whole-tree publishing (`link`, SPEC §10): each revision is a complete
//! tree under `<root>/.tend/revs/<commit>/`, built under `.<commit>.tmp`
//! from hard links to the published tree's files (the pass then replaces
//! what differs by rename, never in place, so no other tree changes),
//! renamed to its name once complete, and published by renaming a new
//! symlink over `<root>/<NAME>`; trees beyond `keep` previous ones go. A
//! crash at any point leaves the link on a complete tree: only complete
//! trees carry a commit's name, and the link only ever names those.

mod carry;
mod dirs;
mod mend;

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use git2::Oid;
use rustix::fs::{
    self as rfs, AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT,
};
use rustix::io::Errno;

use super::at::stat_at;
use super::resolve::{type_name, Root};
use super::temp::temp_name;
use super::Link;
use super::{counted_fsync, transient, FilesTarget, View};
use crate::model::{RelPath, ResourceId};
use crate::target::TargetError;
use dirs::{entries, is_commit_name, make_dir, own_dir, staging_name, OWN};

/// The trees' directory, relative to the root, as the link names it.
const REVS: &str = ".tend/revs";

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
    /// Files the tree being built took from the published one although
    /// they had changed since tend last saw them (edited in place, so
    /// in the kept trees sharing them too), with what tend saw there.
    drifted: HashMap<String, Oid>,
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

    /// The name of the link readers follow, under the root.
    pub(super) fn link_name(&self) -> &str {
        &self.link.name
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

/// The trees' directory under `base`, made when `make` and missing.
fn revs_in(base: &Root, make: bool) -> Result<OwnedFd, Errno> {
    let dot = own_dir(base.fd(), ".tend", make)?;
    own_dir(dot.as_fd(), "revs", make)
}

fn open_tree_in(base: &Root, revs: &OwnedFd, name: &str) -> Result<Root, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = loop {
        match rfs::openat2(revs, name, flags, Mode::empty(), OWN) {
            Err(Errno::AGAIN | Errno::INTR) => {}
            other => break other?,
        }
    };
    Ok(Root::from_fd(fd, base.path().join(REVS).join(name)))
}

/// The published tree under `base`, when the link `name` names one of
/// tend's that is there.
fn published_in(base: &Root, name: &str) -> Option<(String, Root)> {
    let target = rfs::readlinkat(base.fd(), name, Vec::new()).ok()?;
    let hex = target
        .to_str()
        .ok()?
        .strip_prefix(REVS)?
        .strip_prefix('/')?;
    if !is_commit_name(hex.as_bytes()) {
        return None;
    }
    let tree = open_tree_in(base, &revs_in(base, false).ok()?, hex).ok()?;
    Some((hex.to_string(), tree))
}

/// The directory holding the live paths readers see: `base` itself, or
/// with a link named `link` the published tree (none before one is).
pub(super) fn live_root(base: &Root, link: Option<&str>) -> Option<PathBuf> {
    match link {
        Some(name) => published_in(base, name).map(|(_, tree)| tree.path().to_path_buf()),
        None => Some(base.path().to_path_buf()),
    }
}

impl FilesTarget {
    fn revs(&self, make: bool) -> Result<OwnedFd, Errno> {
        revs_in(&self.base, make)
    }

    /// The commits whose complete trees are kept under the root (the
    /// published one and those kept for a rollback).
    pub(super) fn kept_trees(&self) -> Vec<Oid> {
        let Ok(revs) = self.revs(false) else {
            return Vec::new();
        };
        entries(revs.as_fd())
            .into_iter()
            .filter(|(name, kind)| *kind == FileType::Directory && is_commit_name(name))
            .filter_map(|(name, _)| Oid::from_str(std::str::from_utf8(&name).ok()?).ok())
            .collect()
    }

    fn open_tree(&self, revs: &OwnedFd, name: &str) -> Result<Root, Errno> {
        open_tree_in(&self.base, revs, name)
    }

    /// The published tree, when the link names one of tend's that is there.
    pub(super) fn published(&self, trees: &Trees) -> Option<(String, Root)> {
        published_in(&self.base, &trees.link.name)
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
            let (carried, drifted) = self.carry_over(from, &tree, carried())?;
            st.drifted = drifted;
            tracing::debug!(target = %self.name, carried, revision = %rev, "new tree shares the published tree's files");
        }
        counted_fsync(&self.dir_syncs, revs.as_fd()).map_err(|e| transient(REVS, "fsync", e))?;
        self.set_view(View::Tree(Arc::new(tree)));
        st.writing = Some((rev, true));
        Ok(())
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
}

//! A correction in the published tree reaches every kept tree that shares
//! the drifted file. Trees share a file (a hard link) only where their
//! revisions declare it alike: a pass replaces by rename what differs. An
//! edit written in place changes that inode in every tree holding it, and
//! the correction, a new file renamed over, mends the published tree
//! alone; so each kept tree still holding the drifted inode at that path
//! is given the corrected file too, by a hard link renamed over its own.
//! Where the revision being built declares that file anew, the kept trees
//! are given what tend last saw there instead, one new file they share.
//! Sharing is kept (not traded for copies) so that a one-file change
//! still costs one file.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{self as rfs, AtFlags, FileType};
use rustix::io::Errno;

use super::super::at::{stat_at, Meta};
use super::super::temp::{create_temp_file, temp_name};
use super::super::write::fill;
use super::super::{counted_fsync, FilesTarget, Ops};
use super::dirs::{entries, is_commit_name};
use super::Trees;
use crate::model::RelPath;

impl FilesTarget {
    /// The blob tend last saw at `path` in the published tree, when the
    /// tree being built took that file from it edited in place and
    /// declares it as `blob`, another content: the kept trees sharing the
    /// edit are given that blob back (see [`FilesTarget::mend_kept`]).
    pub(in crate::target::files) fn kept_before_edit(
        &self,
        trees: &Trees,
        path: &RelPath,
        blob: git2::Oid,
    ) -> Option<git2::Oid> {
        let st = trees.state();
        match (st.writing, st.drifted.get(path.as_str())) {
            (Some((_, true)), Some(seen)) if *seen != blob => Some(*seen),
            _ => None,
        }
    }

    /// `path` in the tree being written, in `dir`, was `old` and is now
    /// `new`, of content `blob`. When that tree is the published one (a
    /// write there is a correction), every kept tree holding `old` at
    /// `path` is relinked to `new`; so too from a tree being built, when
    /// the file it took from the published tree had been edited in place
    /// and `new` holds what tend last saw there (the revisions agree on
    /// it). When they do not, `restore` holds what tend last saw, and the
    /// kept trees are given a file of it instead. Best effort: the write
    /// itself stands either way.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::target::files) fn mend_kept(
        &self,
        trees: &Trees,
        path: &RelPath,
        old: &Meta,
        dir: BorrowedFd,
        new: &File,
        blob: git2::Oid,
        restore: Option<&[u8]>,
        ops: &mut Ops,
    ) {
        let current = {
            let st = trees.state();
            match st.writing {
                Some((rev, false)) if st.published => rev.to_string(),
                Some((rev, true))
                    if restore.is_some() || st.drifted.get(path.as_str()) == Some(&blob) =>
                {
                    rev.to_string()
                }
                // Otherwise a tree being built replaces what its revision
                // changed: the old file is the kept tree's own.
                _ => return,
            }
        };
        let Ok(revs) = self.revs(false) else {
            return;
        };
        let (parent, name) = path.split_last();
        // The file the kept trees are given: `new`, or one of `restore`
        // made beside it under a temp name, removed once linked.
        let made = match restore {
            Some(bytes) => match made_beside(dir, path, bytes, old, ops) {
                Some(made) => Some(made),
                None => return,
            },
            None => None,
        };
        let (source, meta) = match &made {
            Some((temp, meta)) => (temp.as_str(), *meta),
            None => match rfs::fstat(new) {
                Ok(st) => (name, Meta::from_stat(&st)),
                Err(_) => return,
            },
        };
        for (tree, kind) in entries(revs.as_fd()) {
            if kind != FileType::Directory || !is_commit_name(&tree) {
                continue;
            }
            let tree = String::from_utf8_lossy(&tree).into_owned();
            if tree == current {
                continue;
            }
            let Ok(kept) = self.open_tree(&revs, &tree) else {
                continue;
            };
            let Ok(kdir) = kept.open_dir(parent, true) else {
                continue;
            };
            let shared =
                stat_at(kdir.as_fd(), name).is_ok_and(|m| (m.dev, m.ino) == (old.dev, old.ino));
            if !shared {
                continue;
            }
            match relink(dir, source, kdir.as_fd(), name, &meta, ops) {
                Ok(()) => {
                    let _ = counted_fsync(&self.dir_syncs, kdir.as_fd());
                    tracing::info!(target = %self.name, tree = %tree, path = %path, "the edit reached a kept tree; it holds the correction too");
                }
                Err(e) => {
                    tracing::warn!(target = %self.name, tree = %tree, path = %path, error = %e, "the edit reached a kept tree that cannot be corrected")
                }
            }
        }
        if let Some((temp, _)) = made {
            let _ = rfs::unlinkat(dir, temp.as_str(), AtFlags::empty());
        }
    }
}

/// A durable file of `bytes` in `dir` under a temp name, with the owner
/// and mode of `like`.
fn made_beside(
    dir: BorrowedFd,
    path: &RelPath,
    bytes: &[u8],
    like: &Meta,
    ops: &mut Ops,
) -> Option<(String, Meta)> {
    let (temp, mut file) = create_temp_file(dir, path.as_str(), ops).ok()?;
    let (uid, gid, mode) = (Some(like.uid), Some(like.gid), like.mode & 0o7777);
    let filled = fill(&mut file, bytes, uid, gid, mode, None, ops).and_then(|_| file.sync_data());
    match filled.and_then(|()| rfs::fstat(&file).map_err(Into::into)) {
        Ok(st) => Some((temp, Meta::from_stat(&st))),
        Err(_) => {
            let _ = rfs::unlinkat(dir, temp.as_str(), AtFlags::empty());
            None
        }
    }
}

/// Links `source` in `from` (checked to still be `new`) into `to` under a
/// temp name, renamed over `name` there: a reader of that tree finds the
/// old file or the new one, never none.
fn relink(
    from: BorrowedFd,
    source: &str,
    to: BorrowedFd,
    name: &str,
    new: &Meta,
    ops: &mut Ops,
) -> Result<(), Errno> {
    let temp = temp_name();
    rfs::linkat(from, source, to, temp.as_str(), AtFlags::empty())?;
    ops.writes += 1;
    // Another writer may have renamed something over `name` since.
    let linked = stat_at(to, &temp).is_ok_and(|m| (m.dev, m.ino) == (new.dev, new.ino));
    let renamed = match linked {
        true => rfs::renameat(to, temp.as_str(), to, name),
        false => Err(Errno::STALE),
    };
    if renamed.is_err() {
        let _ = rfs::unlinkat(to, temp.as_str(), AtFlags::empty());
    }
    ops.writes += 1;
    renamed
}

//! A new revision's tree starts as hard links to the published tree's
//! managed files: unchanged files cost nothing, and the stat cache vouches
//! for them still.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::AsFd;

use rustix::fs::{self as rfs, AtFlags, FileType};

use super::super::at::{open_regular, stat_at};
use super::super::durable::WholeFs;
use super::super::observe::hash_file;
use super::super::resolve::Root;
use super::super::{counted_fsync, transient, FilesTarget};
use super::dirs::make_dirs;
use super::REVS;
use crate::model::RelPath;
use crate::target::TargetError;

impl FilesTarget {
    /// Links each of `paths` that `from` holds (files and symlinks) into
    /// `to`, their stat cache entries carried across the link; the new
    /// tree's directories are synced before it can be called complete.
    /// Returns how many were linked (one that cannot be is left for the
    /// pass to write), and the files linked whose content is no longer
    /// what tend last saw, with the blob it saw: edited in place, the edit
    /// is in every tree sharing them.
    pub(super) fn carry_over(
        &self,
        from: &Root,
        to: &Root,
        paths: Vec<RelPath>,
    ) -> Result<(usize, HashMap<String, git2::Oid>), TargetError> {
        let mut drifted = HashMap::new();
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
                if file && !known {
                    // Edited in place only if its content is not what tend
                    // last saw: an entry the cache merely lost (a process
                    // killed before it was saved) is no edit.
                    let seen = self.cache.last_known(path.as_str());
                    if let Some(seen) = seen.filter(|s| content_of(src.as_fd(), name) != Some(*s)) {
                        drifted.insert(path.as_str().to_string(), seen);
                    }
                }
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
                .map(|()| (linked, drifted))
                .map_err(|e| transient(REVS, "syncfs", e));
        }
        for dir in dirs {
            let fd = to
                .open_dir(dir, true)
                .map_err(|e| transient(dir, "open", e))?;
            counted_fsync(&self.dir_syncs, fd.as_fd()).map_err(|e| transient(dir, "fsync", e))?;
        }
        Ok((linked, drifted))
    }
}

/// The blob id of the regular file `name` in `dir`, if it can be read.
fn content_of(dir: std::os::fd::BorrowedFd, name: &str) -> Option<git2::Oid> {
    let (mut file, meta) = open_regular(dir, name).ok()??;
    hash_file(&mut file, meta.size, &mut Vec::new()).ok()
}

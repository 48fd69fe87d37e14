//! Removal: deleting a pruned file or symlink (content backed up first), and
//! sweeping tend's own leftover temp files, nothing else.

use std::collections::BTreeSet;
use std::os::fd::AsFd;

use rustix::fs::{self as rfs, AtFlags, FileType};
use rustix::io::Errno;

use super::at::is_absent;
use super::at::{read_regular, stat_at};
use super::resolve::{resolve_error, type_name};
use super::temp::is_temp_name;
use super::{transient, FilesTarget, Ops};
use crate::model::{Change, RelPath};
use crate::target::{Swept, TargetError};

impl FilesTarget {
    pub(super) fn delete(&self, change: &Change, ops: &mut Ops) -> Result<(), TargetError> {
        let path = change.path.as_str();
        let (parent, name) = change.path.split_last();
        self.cache.forget(path);
        let tree = match self.view() {
            super::View::Tree(tree) => tree,
            super::View::Empty => return Ok(()),
            super::View::Broken(reason) => return Err(TargetError::Transient(reason)),
        };
        let dir = match tree.open_dir(parent, true) {
            Ok(dir) => dir,
            Err(e) if is_absent(e) => return Ok(()),
            Err(e) => return Err(resolve_error(parent, e)),
        };
        let meta = match stat_at(dir.as_fd(), name) {
            Ok(meta) => meta,
            Err(e) if is_absent(e) => return Ok(()),
            Err(e) => return Err(transient(path, "stat", e)),
        };
        match meta.file_type() {
            FileType::RegularFile => {
                if let Some(old) = read_regular(dir.as_fd(), name)
                    .map_err(|e| transient(path, "read for backup", e))?
                {
                    ops.save(path, &old)?;
                }
            }
            FileType::Symlink => {}
            other => {
                return Err(TargetError::Transient(format!(
                    "{path}: is a {}; tend deletes only files and symlinks, so it stays",
                    type_name(other)
                )))
            }
        }
        ops.writes += 1;
        match rfs::unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) => ops.left = Some(crate::target::Left::Absent),
            Err(e) if is_absent(e) => return Ok(()),
            Err(e) => return Err(transient(path, "unlink", e)),
        }
        ops.sync_dir(dir.as_fd())
            .map_err(|e| transient(path, "fsync directory", e))?;
        // A revision's tree is tend's own: a directory its deletes left
        // empty goes too, so the tree holds only what is declared.
        if self.trees.is_some() {
            remove_empty_parents(&tree, parent, ops);
        }
        Ok(())
    }

    pub(super) fn clean_temp_files(&self, paths: &[&RelPath]) -> Swept {
        let parents: BTreeSet<&str> = paths.iter().map(|p| p.split_last().0).collect();
        let mut swept = Swept::default();
        let tree = match self.view() {
            super::View::Tree(tree) => tree,
            super::View::Empty => return swept,
            super::View::Broken(_) => {
                swept.left += 1;
                return swept;
            }
        };
        for parent in parents {
            // A directory that is absent, or cannot be resolved inside the
            // root, holds nothing tend wrote: its writes fail the same way.
            let dir = match tree.open_dir(parent, true) {
                Ok(dir) => dir,
                Err(e) if is_absent(e) || e == Errno::LOOP || e == Errno::XDEV => continue,
                Err(_) => {
                    swept.left += 1;
                    continue;
                }
            };
            let Ok(mut entries) = rfs::Dir::read_from(&dir) else {
                swept.left += 1;
                continue;
            };
            let mut leftovers = Vec::new();
            while let Some(entry) = entries.read() {
                let Ok(entry) = entry else {
                    swept.left += 1;
                    break;
                };
                let name = entry.file_name().to_bytes();
                if is_temp_name(name) && entry.file_type() != FileType::Directory {
                    leftovers.push(name.to_vec());
                }
            }
            for name in leftovers {
                match rfs::unlinkat(&dir, name.as_slice(), AtFlags::empty()) {
                    Ok(()) => swept.removed += 1,
                    Err(e) if is_absent(e) => {}
                    Err(_) => swept.left += 1,
                }
            }
        }
        self.writes
            .fetch_add(swept.removed as u64, std::sync::atomic::Ordering::Relaxed);
        swept
    }
}

/// Removes `dir` and the directories above it, up to the tree's root,
/// while each is empty; best effort (an empty directory left is harmless).
fn remove_empty_parents(tree: &super::resolve::Root, dir: &str, ops: &mut Ops) {
    let mut dir = dir;
    while let Some((up, name)) = match dir {
        "" => None,
        d => Some(d.rsplit_once('/').unwrap_or(("", d))),
    } {
        let Ok(parent) = tree.open_dir(up, true) else {
            return;
        };
        if rfs::unlinkat(&parent, name, AtFlags::REMOVEDIR).is_err() {
            return;
        }
        ops.writes += 1;
        dir = up;
    }
}

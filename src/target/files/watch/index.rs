//! What a watch judges events against: the managed paths under the live
//! root, and what tend's own writes left at them. tend's own writes are
//! told by what they left at the path (inode, size, times, mode), never by
//! a time window: any other state is a change.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::managed::Managed;
use crate::model::ResourceId;
use crate::target::{Left, Recheck};

/// Stamps of tend's writes kept at most; past this many they are dropped
/// and begun again. A dropped stamp costs one keyed pass that finds the
/// path in sync, never a missed change.
const STAMPS_MAX: usize = 65_536;

/// Past this many files to look at again, a full pass looks at everything.
const RECHECK_KEYS_MAX: usize = 4096;

#[derive(Default)]
pub(super) struct Index {
    /// The directory the managed paths are under now (with `link`, the
    /// published tree); none before a tree is published, when no event
    /// names a managed path.
    pub(super) root: Option<PathBuf>,
    /// The managed paths, by their identities (an identity names its path).
    /// Shared, so a whole new set is worked out without holding the index.
    pub(super) files: Arc<Managed>,
    /// What tend's last write of each identity left at its path: an event
    /// after which the path shows just that is the echo of tend's own
    /// write; anything else is a change.
    left: HashMap<ResourceId, Left>,
    /// Identities being written now, each with whether events came for it
    /// meanwhile: they are judged once the write has ended.
    writing: HashMap<ResourceId, bool>,
}

/// Whether an event on `path`, the path of `id`, may be a change: not while
/// tend writes it (judged when the write ends), and not when the path shows
/// just what tend's last write left there.
fn may_have_changed(
    left: &mut HashMap<ResourceId, Left>,
    writing: &mut HashMap<ResourceId, bool>,
    id: &ResourceId,
    path: &Path,
) -> bool {
    if let Some(seen) = writing.get_mut(id) {
        *seen = true;
        return false;
    }
    match left.get(id) {
        Some(stamp) if Left::at(path).as_ref() == Some(stamp) => false,
        Some(_) => {
            left.remove(id);
            true
        }
        None => true,
    }
}

impl Index {
    /// Identities an event on `path` may concern: the file itself, or every
    /// managed file below a directory; tend's own echoes left out.
    pub(super) fn ids_for(&mut self, path: &Path) -> Vec<ResourceId> {
        let Index {
            root,
            files,
            left,
            writing,
        } = self;
        let mut ids = Vec::new();
        let Some(root) = root.as_deref() else {
            return ids;
        };
        let Some(rel) = path.strip_prefix(root).ok().and_then(|r| r.to_str()) else {
            return ids;
        };
        if let Some(id) = files.get(rel) {
            if may_have_changed(left, writing, id, path) {
                ids.push(id.clone());
            }
            return ids;
        }
        let prefix = if rel.is_empty() {
            String::new()
        } else {
            format!("{rel}/")
        };
        for id in files.under(&prefix) {
            if may_have_changed(left, writing, id, &root.join(id.key())) {
                ids.push(id.clone());
            }
        }
        ids
    }

    /// The full path of a managed identity.
    fn path_of(&self, id: &ResourceId) -> Option<PathBuf> {
        let root = self.root.as_ref()?;
        (self.files.get(id.key()) == Some(id)).then(|| root.join(id.key()))
    }

    /// tend is about to write `id`.
    pub(super) fn writing(&mut self, id: &ResourceId) {
        self.writing.insert(id.clone(), false);
    }

    /// tend's write of `id` ended, leaving `left` (when it wrote). Returns
    /// the identity when events that came meanwhile were not all its own:
    /// the path no longer shows what the write left.
    pub(super) fn wrote(&mut self, id: &ResourceId, left: Option<&Left>) -> Option<ResourceId> {
        let seen = self.writing.remove(id).unwrap_or(false);
        match left {
            Some(stamp) => {
                if self.left.len() >= STAMPS_MAX && !self.left.contains_key(id) {
                    self.left.clear();
                }
                self.left.insert(id.clone(), *stamp);
            }
            None => {
                self.left.remove(id);
            }
        }
        if !seen {
            return None;
        }
        let now = self.path_of(id).and_then(|p| Left::at(&p));
        (left.is_none() || now.as_ref() != left).then(|| id.clone())
    }

    /// What of `files` (identities with their full paths, in directories
    /// just watched) to look at again: the managed files there may have
    /// changed before the watch began, after the pass that observed them.
    /// Only those showing just what tend's own write left there are known
    /// not to have.
    pub(super) fn recheck<'a>(
        &self,
        files: impl Iterator<Item = (&'a ResourceId, PathBuf)>,
    ) -> Recheck {
        let mut keys = Vec::new();
        for (id, path) in files {
            let known = self
                .left
                .get(id)
                .is_some_and(|stamp| Left::at(&path).as_ref() == Some(stamp));
            if !known {
                if keys.len() == RECHECK_KEYS_MAX {
                    return Recheck::All;
                }
                keys.push(id.clone());
            }
        }
        match keys.is_empty() {
            true => Recheck::Nothing,
            false => Recheck::Keys(keys),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(root: &Path, paths: &[&str]) -> Index {
        let mut index = Index {
            root: Some(root.to_path_buf()),
            ..Index::default()
        };
        for p in paths {
            Arc::make_mut(&mut index.files).insert(id(p));
        }
        index
    }

    fn id(s: &str) -> ResourceId {
        ResourceId::new("files", "file", s)
    }

    #[test]
    fn events_map_to_files_and_directories() {
        let mut index = index(
            Path::new("/r"),
            &[
                "etc/a",
                "etc/app/b",
                "etc/app/c",
                "etc/apple",
                "etc/app.d/x",
            ],
        );
        assert_eq!(index.ids_for(Path::new("/r/etc/a")), vec![id("etc/a")]);
        assert_eq!(
            index.ids_for(Path::new("/r/etc/app")),
            vec![id("etc/app/b"), id("etc/app/c")]
        );
        assert_eq!(
            index.ids_for(Path::new("/r")).len(),
            5,
            "the root holds all"
        );
        assert!(index.ids_for(Path::new("/r/other")).is_empty());
        assert!(index.ids_for(Path::new("/elsewhere/etc/a")).is_empty());
        index.root = None;
        assert!(
            index.ids_for(Path::new("/r/etc/a")).is_empty(),
            "no root, nothing managed is there"
        );
    }

    #[test]
    fn own_writes_are_told_by_what_they_left_not_by_when() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir(root.join("etc")).unwrap();
        let mut index = index(&root, &["etc/a", "etc/b"]);
        let a = root.join("etc/a");
        // tend writes a: an event meanwhile waits for the write to end, and
        // the path then shows what tend left: its own echo.
        index.writing(&id("etc/a"));
        std::fs::write(&a, "tend\n").unwrap();
        assert!(index.ids_for(&a).is_empty());
        let stamp = Left::at(&a).unwrap();
        assert_eq!(index.wrote(&id("etc/a"), Some(&stamp)), None);
        // More events of that write, later: still its echo.
        assert!(index.ids_for(&a).is_empty());
        assert!(index.ids_for(&root.join("etc")).contains(&id("etc/b")));
        assert!(!index.ids_for(&root.join("etc")).contains(&id("etc/a")));
        // An edit right after, however soon, is a change.
        std::fs::write(&a, "hand\n").unwrap();
        assert_eq!(index.ids_for(&a), vec![id("etc/a")]);
        assert_eq!(index.ids_for(&a), vec![id("etc/a")], "and stays one");
        // An edit while tend writes: judged when the write ends.
        index.writing(&id("etc/a"));
        std::fs::write(&a, "tend again\n").unwrap();
        let stamp = Left::at(&a).unwrap();
        assert!(index.ids_for(&a).is_empty());
        std::fs::write(&a, "hand again\n").unwrap();
        assert_eq!(index.wrote(&id("etc/a"), Some(&stamp)), Some(id("etc/a")));
        // A write that failed or wrote nothing leaves no stamp: events
        // during it are changes.
        index.writing(&id("etc/b"));
        assert!(index.ids_for(&root.join("etc/b")).is_empty());
        assert_eq!(index.wrote(&id("etc/b"), None), Some(id("etc/b")));
        assert_eq!(index.ids_for(&root.join("etc/b")), vec![id("etc/b")]);
        // A delete leaves absence; a file put back is a change.
        std::fs::remove_file(&a).unwrap();
        index.writing(&id("etc/a"));
        assert_eq!(index.wrote(&id("etc/a"), Some(&Left::Absent)), None);
        assert!(index.ids_for(&a).is_empty());
        std::fs::write(&a, "back\n").unwrap();
        assert_eq!(index.ids_for(&a), vec![id("etc/a")]);
    }
}

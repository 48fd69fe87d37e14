//! File-system watching: non-recursive inotify watches on the directories
//! that hold managed paths (a recursive watch would follow symlinks out of
//! the root). Events only schedule keys in the loop's queue; on overflow or
//! watch errors the loop runs a full pass and leans on the resync timer.
//! tend's own writes are told by what they left at the path (inode, size,
//! times, mode), never by a time window: any other state is a change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

use super::Trigger;
use crate::model::{RelPath, ResourceId};
use crate::reconcile::WriteObserver;
use crate::target::Left;

/// Stamps of tend's writes kept at most; past this many they are dropped
/// and begun again. A dropped stamp costs one keyed pass that finds the
/// path in sync, never a missed change.
const STAMPS_MAX: usize = 65_536;

#[derive(Default)]
struct Index {
    /// Each watched root (target name, root directory) with its managed
    /// paths (path -> identity). The paths are the declaration's own, shared
    /// rather than copied: at 100k files they would be most of the index.
    roots: Vec<(String, PathBuf, BTreeMap<RelPath, ResourceId>)>,
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
    fn ids_for(&mut self, path: &Path) -> Vec<ResourceId> {
        let Index {
            roots,
            left,
            writing,
        } = self;
        let mut ids = Vec::new();
        for (_, root, files) in roots.iter() {
            let Some(rel) = path.strip_prefix(root).ok().and_then(|r| r.to_str()) else {
                continue;
            };
            if let Some(id) = files.get(rel) {
                if may_have_changed(left, writing, id, path) {
                    ids.push(id.clone());
                }
                continue;
            }
            let prefix = if rel.is_empty() {
                String::new()
            } else {
                format!("{rel}/")
            };
            let under = files
                .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                .take_while(|(p, _)| p.as_str().starts_with(&prefix));
            for (p, id) in under {
                if may_have_changed(left, writing, id, &root.join(p.as_str())) {
                    ids.push(id.clone());
                }
            }
        }
        ids
    }

    fn files_of(&mut self, target: &str) -> Option<&mut BTreeMap<RelPath, ResourceId>> {
        self.roots
            .iter_mut()
            .find(|(name, _, _)| name == target)
            .map(|(_, _, files)| files)
    }

    /// The path an identity names (its key), when it is indexed under it.
    fn indexed<'i>(
        &mut self,
        id: &'i ResourceId,
    ) -> Option<(&mut BTreeMap<RelPath, ResourceId>, &'i str)> {
        let path = id.key();
        let files = self.files_of(id.target())?;
        (files.get(path) == Some(id)).then_some((files, path))
    }

    /// The full path of an indexed identity.
    fn path_of(&self, id: &ResourceId) -> Option<PathBuf> {
        let (_, root, files) = self.roots.iter().find(|(n, _, _)| n == id.target())?;
        (files.get(id.key()) == Some(id)).then(|| root.join(id.key()))
    }

    /// tend is about to write `id`.
    fn writing(&mut self, id: &ResourceId) {
        self.writing.insert(id.clone(), false);
    }

    /// tend's write of `id` ended, leaving `left` (when it wrote). Returns
    /// the identity when events that came meanwhile were not all its own:
    /// the path no longer shows what the write left.
    fn wrote(&mut self, id: &ResourceId, left: Option<&Left>) -> Option<ResourceId> {
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
}

/// Past this many files to look at again, a full pass looks at everything.
const RECHECK_KEYS_MAX: usize = 4096;

/// What newly begun watches ask of the loop: the managed files in a
/// directory just watched may have changed before its watch began, after
/// the pass that observed them. Only those showing just what tend's own
/// write left there are known not to have.
#[derive(Debug, PartialEq, Eq)]
pub enum Recheck {
    Nothing,
    Keys(Vec<ResourceId>),
    All,
}

impl Index {
    fn recheck<'a>(&self, files: impl Iterator<Item = (&'a ResourceId, PathBuf)>) -> Recheck {
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

/// Whether the directory holding `path` under `root` is one of `dirs`.
fn parent_in(root: &Path, path: &RelPath, dirs: &HashSet<PathBuf>) -> bool {
    if dirs.is_empty() {
        return false;
    }
    let full = root.join(path.as_str());
    full.parent().is_some_and(|d| dirs.contains(d))
}

/// Whether an event can mean a managed path changed. Opens and read-only
/// closes cannot: a web server reading the files it serves, or tend
/// listing a directory, must not schedule passes.
fn changes_something(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    use notify::EventKind;
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Calls `visit` with each directory holding `path` under `root`, from its
/// parent up to the root itself, while `visit` returns true.
fn each_dir_up(root: &Path, path: &RelPath, mut visit: impl FnMut(&Path) -> bool) {
    let full = root.join(path.as_str());
    let mut dir = full.parent();
    while let Some(d) = dir {
        if !visit(d) || d == root {
            break;
        }
        dir = d.parent();
    }
}

fn is_own_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(".tend-") && n.ends_with(".tmp"))
}

pub struct Watch {
    watcher: Option<notify::RecommendedWatcher>,
    roots: BTreeMap<String, PathBuf>,
    watched: HashSet<PathBuf>,
    index: Arc<Mutex<Index>>,
    degraded: Arc<Mutex<Option<String>>>,
    /// Where events and the judgement of writes send their keys.
    tx: UnboundedSender<Trigger>,
}

impl Watch {
    /// Starts watching for the `files` targets in `roots` (target name ->
    /// root); events go to `tx`.
    pub fn start(roots: BTreeMap<String, PathBuf>, tx: UnboundedSender<Trigger>) -> Watch {
        let index = Arc::new(Mutex::new(Index::default()));
        let degraded = Arc::new(Mutex::new(None));
        let (idx, deg, keys) = (index.clone(), degraded.clone(), tx.clone());
        let handler = move |res: notify::Result<notify::Event>| match res {
            Ok(event) => {
                if event.need_rescan() {
                    let _ = tx.send(Trigger::FullPass);
                    return;
                }
                if !changes_something(&event.kind) {
                    return;
                }
                let mut ids = Vec::new();
                let mut index = idx.lock().expect("watch index");
                for p in event.paths.iter().filter(|p| !is_own_temp(p)) {
                    ids.extend(index.ids_for(p));
                }
                if !ids.is_empty() {
                    let _ = tx.send(Trigger::Keys(ids));
                }
            }
            Err(e) => {
                *deg.lock().expect("watch state") =
                    Some(format!("watch error: {e}; relying on the resync timer"));
                let _ = tx.send(Trigger::FullPass);
            }
        };
        let watcher = match notify::recommended_watcher(handler) {
            Ok(w) => Some(w),
            Err(e) => {
                *degraded.lock().expect("watch state") = Some(format!(
                    "cannot watch the file system ({e}); relying on the resync timer"
                ));
                None
            }
        };
        Watch {
            watcher,
            roots,
            watched: HashSet::new(),
            index,
            degraded,
            tx: keys,
        }
    }

    /// Watches these roots (target name -> directory) from now on; true
    /// when they changed (a newly published tree), so the caller updates
    /// the index for them.
    pub fn set_roots(&mut self, roots: BTreeMap<String, PathBuf>) -> bool {
        if roots == self.roots {
            return false;
        }
        self.roots = roots;
        true
    }

    /// Every managed folder is watched: drift is seen as it happens.
    pub fn healthy(&self) -> bool {
        self.watcher.is_some() && self.degraded.lock().expect("watch state").is_none()
    }

    /// A line for status: what is watched, or why watching is degraded.
    pub fn describe(&self) -> String {
        match &*self.degraded.lock().expect("watch state") {
            Some(reason) => reason.clone(),
            None => format!(
                "watching {}",
                crate::render::count(self.watched.len(), "directory", "directories")
            ),
        }
    }

    /// Watches the directories that hold `managed` paths (and their
    /// ancestors up to the root, so new directories are noticed), and drops
    /// watches no longer needed.
    pub fn update<'a>(
        &mut self,
        managed: impl IntoIterator<Item = (&'a ResourceId, &'a str, &'a RelPath)>,
    ) -> Recheck {
        let mut roots: Vec<(String, PathBuf, BTreeMap<RelPath, ResourceId>)> = self
            .roots
            .iter()
            .map(|(name, root)| (name.clone(), root.clone(), BTreeMap::new()))
            .collect();
        let mut dirs = HashSet::new();
        for (id, target, path) in managed {
            let Some((_, root, files)) = roots.iter_mut().find(|(name, _, _)| name == target)
            else {
                continue;
            };
            // Directories above one already added are added already.
            each_dir_up(root, path, |d| dirs.insert(d.to_path_buf()));
            files.insert(path.clone(), id.clone());
        }
        self.index.lock().expect("watch index").roots = roots;
        let Some(watcher) = self.watcher.as_mut() else {
            return Recheck::Nothing;
        };
        for gone in self
            .watched
            .iter()
            .filter(|d| !dirs.contains(*d))
            .cloned()
            .collect::<Vec<_>>()
        {
            let _ = watcher.unwatch(&gone);
            self.watched.remove(&gone);
        }
        let new = self.watch_dirs(dirs);
        let index = self.index.lock().expect("watch index");
        let under_new = index.roots.iter().flat_map(|(_, root, files)| {
            files
                .iter()
                .filter(|(p, _)| parent_in(root, p, &new))
                .map(move |(p, id)| (id, root.join(p.as_str())))
        });
        index.recheck(under_new)
    }

    /// Updates the index for a few identities only: each with its (target,
    /// path) now, or `None` when it is no longer managed. Directories they
    /// need are watched; watches no longer needed stay until the next
    /// [`Watch::update`] (an event there names no identity).
    pub fn patch<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a ResourceId, Option<(&'a str, &'a RelPath)>)>,
    ) -> Recheck {
        let mut dirs = Vec::new();
        let mut patched = Vec::new();
        {
            let mut index = self.index.lock().expect("watch index");
            for (id, now) in changes {
                if let Some((files, was)) = index.indexed(id) {
                    files.remove(was);
                }
                let Some((target, path)) = now else {
                    continue;
                };
                let Some((root, files)) = self.roots.get(target).zip(index.files_of(target)) else {
                    continue;
                };
                files.insert(path.clone(), id.clone());
                patched.push((id.clone(), root.join(path.as_str())));
                each_dir_up(root, path, |d| {
                    let new = !self.watched.contains(d);
                    if new {
                        dirs.push(d.to_path_buf());
                    }
                    new
                });
            }
        }
        let new = self.watch_dirs(dirs);
        let index = self.index.lock().expect("watch index");
        let under_new = patched
            .iter()
            .filter(|(_, full)| full.parent().is_some_and(|d| new.contains(d)))
            .map(|(id, full)| (id, full.clone()));
        index.recheck(under_new)
    }

    /// Watches each existing directory not watched yet.
    fn watch_dirs(&mut self, dirs: impl IntoIterator<Item = PathBuf>) -> HashSet<PathBuf> {
        let mut new = HashSet::new();
        let Some(watcher) = self.watcher.as_mut() else {
            return new;
        };
        for dir in dirs {
            if self.watched.contains(&dir) || !dir.is_dir() {
                continue;
            }
            match watcher.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir.clone());
                    new.insert(dir);
                }
                Err(e) => {
                    let limit = matches!(e.kind, notify::ErrorKind::MaxFilesWatch)
                        || matches!(&e.kind, notify::ErrorKind::Io(io) if matches!(io.raw_os_error(), Some(28) | Some(24)));
                    let reason = if limit {
                        format!("inotify watch limit reached ({e}); the rest is checked at every resync")
                    } else {
                        format!(
                            "cannot watch {} ({e}); it is checked at every resync",
                            dir.display()
                        )
                    };
                    *self.degraded.lock().expect("watch state") = Some(reason);
                    if limit {
                        break;
                    }
                }
            }
        }
        new
    }

    /// What tells this watcher of tend's own writes, so their events are
    /// not taken as drift while every other change still is.
    pub fn write_observer(&self) -> Arc<dyn WriteObserver> {
        Arc::new(Echoes {
            index: self.index.clone(),
            tx: self.tx.clone(),
        })
    }
}

/// The watcher's side of tend's writes.
struct Echoes {
    index: Arc<Mutex<Index>>,
    tx: UnboundedSender<Trigger>,
}

impl WriteObserver for Echoes {
    fn writing(&self, id: &ResourceId) {
        self.index.lock().expect("watch index").writing(id);
    }

    fn wrote(&self, id: &ResourceId, left: Option<&Left>) {
        let changed = self.index.lock().expect("watch index").wrote(id, left);
        if let Some(id) = changed {
            let _ = self.tx.send(Trigger::Keys(vec![id]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_map_to_files_and_directories() {
        let mut index = Index::default();
        let id = |s: &str| ResourceId::new("files", "file", s);
        let mut files = BTreeMap::new();
        for p in [
            "etc/a",
            "etc/app/b",
            "etc/app/c",
            "etc/apple",
            "etc/app.d/x",
        ] {
            files.insert(RelPath::parse(p).unwrap(), id(p));
        }
        index
            .roots
            .push(("files".into(), PathBuf::from("/r"), files));
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
        assert!(is_own_temp(Path::new("/r/etc/.tend-abc.tmp")));
        assert!(!is_own_temp(Path::new("/r/etc/tend.tmp")));
    }

    #[test]
    fn own_writes_are_told_by_what_they_left_not_by_when() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir(root.join("etc")).unwrap();
        let mut index = Index::default();
        let id = |s: &str| ResourceId::new("files", "file", s);
        let mut files = BTreeMap::new();
        for p in ["etc/a", "etc/b"] {
            files.insert(RelPath::parse(p).unwrap(), id(p));
        }
        index.roots.push(("files".into(), root.clone(), files));
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

    #[test]
    fn directories_are_visited_up_to_the_root_while_asked() {
        let path = RelPath::parse("a/b/c.txt").unwrap();
        let mut seen = Vec::new();
        each_dir_up(Path::new("/r"), &path, |d| {
            seen.push(d.to_path_buf());
            true
        });
        assert_eq!(seen, ["/r/a/b", "/r/a", "/r"].map(PathBuf::from));
        let mut seen = Vec::new();
        each_dir_up(Path::new("/r"), &path, |d| {
            seen.push(d.to_path_buf());
            d != Path::new("/r/a")
        });
        assert_eq!(seen, ["/r/a/b", "/r/a"].map(PathBuf::from));
    }

    #[test]
    fn reads_and_opens_are_not_changes() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind};
        use notify::EventKind;
        assert!(!changes_something(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!changes_something(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(changes_something(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes_something(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(changes_something(&EventKind::Create(CreateKind::File)));
    }
}

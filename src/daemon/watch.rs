//! File-system watching: non-recursive inotify watches on the directories
//! that hold managed paths (a recursive watch would follow symlinks out of
//! the root). Events only schedule keys in the loop's queue; on overflow or
//! watch errors the loop runs a full pass and leans on the resync timer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

use super::Trigger;
use crate::model::{RelPath, ResourceId};

/// How long an event on a path tend just wrote is taken as its own echo.
const OWN_WRITE_ECHO: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Index {
    /// Each watched root (target name, root directory) with its managed
    /// paths (path -> identity). The paths are the declaration's own, shared
    /// rather than copied: at 100k files they would be most of the index.
    roots: Vec<(String, PathBuf, BTreeMap<RelPath, ResourceId>)>,
    /// Identities tend wrote, until when events on them are ignored.
    own: HashMap<ResourceId, Instant>,
}

impl Index {
    /// Identities an event on `path` may concern: the file itself, or every
    /// managed file below a directory.
    fn ids_for(&mut self, path: &Path) -> Vec<ResourceId> {
        let mut ids = Vec::new();
        for (_, root, files) in &self.roots {
            let Some(rel) = path.strip_prefix(root).ok().and_then(|r| r.to_str()) else {
                continue;
            };
            if let Some(id) = files.get(rel) {
                if let Some(until) = self.own.get(id) {
                    if Instant::now() < *until {
                        continue;
                    }
                    self.own.remove(id);
                }
                ids.push(id.clone());
                continue;
            }
            let prefix = if rel.is_empty() {
                String::new()
            } else {
                format!("{rel}/")
            };
            ids.extend(
                files
                    .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                    .take_while(|(p, _)| p.as_str().starts_with(&prefix))
                    .map(|(_, id)| id.clone()),
            );
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

    /// Marks `id`, when it is indexed, as just written by tend.
    fn own_write(&mut self, id: &ResourceId) {
        if self.indexed(id).is_none() {
            return;
        }
        let now = Instant::now();
        if self.own.len() >= 4096 {
            self.own.retain(|_, until| *until > now);
        }
        self.own.insert(id.clone(), now + OWN_WRITE_ECHO);
    }
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
}

impl Watch {
    /// Starts watching for the `files` targets in `roots` (target name ->
    /// root); events go to `tx`.
    pub fn start(roots: BTreeMap<String, PathBuf>, tx: UnboundedSender<Trigger>) -> Watch {
        let index = Arc::new(Mutex::new(Index::default()));
        let degraded = Arc::new(Mutex::new(None));
        let (idx, deg) = (index.clone(), degraded.clone());
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
        }
    }

    /// Every managed folder is watched: drift is seen as it happens.
    pub fn healthy(&self) -> bool {
        self.watcher.is_some() && self.degraded.lock().expect("watch state").is_none()
    }

    /// A line for status: what is watched, or why watching is degraded.
    pub fn describe(&self) -> String {
        match &*self.degraded.lock().expect("watch state") {
            Some(reason) => reason.clone(),
            None => format!("watching {} directories", self.watched.len()),
        }
    }

    /// Watches the directories that hold `managed` paths (and their
    /// ancestors up to the root, so new directories are noticed), and drops
    /// watches no longer needed.
    pub fn update<'a>(
        &mut self,
        managed: impl IntoIterator<Item = (&'a ResourceId, &'a str, &'a RelPath)>,
    ) {
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
            return;
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
        self.watch_dirs(dirs);
    }

    /// Updates the index for a few identities only: each with its (target,
    /// path) now, or `None` when it is no longer managed. Directories they
    /// need are watched; watches no longer needed stay until the next
    /// [`Watch::update`] (an event there names no identity).
    pub fn patch<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a ResourceId, Option<(&'a str, &'a RelPath)>)>,
    ) {
        let mut dirs = Vec::new();
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
                each_dir_up(root, path, |d| {
                    let new = !self.watched.contains(d);
                    if new {
                        dirs.push(d.to_path_buf());
                    }
                    new
                });
            }
        }
        self.watch_dirs(dirs);
    }

    /// Watches each existing directory not watched yet.
    fn watch_dirs(&mut self, dirs: impl IntoIterator<Item = PathBuf>) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        for dir in dirs {
            if self.watched.contains(&dir) || !dir.is_dir() {
                continue;
            }
            match watcher.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir);
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
    }

    /// A callback that marks a path tend is about to write, so the events
    /// its own write causes are not taken as drift.
    pub fn write_observer(&self) -> crate::reconcile::WriteObserver {
        let index = self.index.clone();
        Arc::new(move |id: &ResourceId| {
            index.lock().expect("watch index").own_write(id);
        })
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
        index.own_write(&id("etc/a"));
        assert!(index.ids_for(Path::new("/r/etc/a")).is_empty());
        // A write of a path not indexed yet (a new file) is not marked: an
        // edit right after it is still seen once the index has it.
        index.own_write(&id("etc/new"));
        assert!(!index.own.contains_key(&id("etc/new")));
        assert!(is_own_temp(Path::new("/r/etc/.tend-abc.tmp")));
        assert!(!is_own_temp(Path::new("/r/etc/tend.tmp")));
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

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

use super::daemon::Trigger;
use crate::model::{RelPath, ResourceId};

/// How long an event on a path tend just wrote is taken as its own echo.
const OWN_WRITE_ECHO: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Index {
    /// Absolute managed path -> identity; the path is shared with `by_id`,
    /// not copied (at 100k files the paths are most of the index).
    files: BTreeMap<Arc<Path>, ResourceId>,
    by_id: HashMap<ResourceId, Arc<Path>>,
    /// Paths tend wrote, until when their events are ignored.
    own: HashMap<PathBuf, Instant>,
}

impl Index {
    /// Identities an event on `path` may concern: the file itself, or every
    /// managed file below a directory.
    fn ids_for(&mut self, path: &Path) -> Vec<ResourceId> {
        if let Some(until) = self.own.get(path) {
            if Instant::now() < *until {
                return Vec::new();
            }
            self.own.remove(path);
        }
        if let Some(id) = self.files.get(path) {
            return vec![id.clone()];
        }
        let mut prefix = path.as_os_str().to_owned();
        prefix.push("/");
        let prefix = PathBuf::from(prefix);
        self.files
            .range::<Path, _>((Bound::Included(prefix.as_path()), Bound::Unbounded))
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(_, id)| id.clone())
            .collect()
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
        let mut files = BTreeMap::new();
        let mut dirs = HashSet::new();
        for (id, target, path) in managed {
            let Some(root) = self.roots.get(target) else {
                continue;
            };
            let full = root.join(path.as_str());
            let mut dir = full.parent();
            while let Some(d) = dir {
                if !dirs.insert(d.to_path_buf()) || d == root.as_path() {
                    break;
                }
                dir = d.parent();
            }
            dirs.insert(root.clone());
            files.insert(Arc::<Path>::from(full), id.clone());
        }
        {
            let mut index = self.index.lock().expect("watch index");
            index.by_id = files
                .iter()
                .map(|(p, id)| (id.clone(), p.clone()))
                .collect();
            index.files = files;
        }
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
                if let Some(old) = index.by_id.remove(id) {
                    index.files.remove(&old);
                }
                let Some((root, path)) = now.and_then(|(t, p)| Some((self.roots.get(t)?, p)))
                else {
                    continue;
                };
                let full = root.join(path.as_str());
                let mut dir = full.parent();
                while let Some(d) = dir {
                    if self.watched.contains(d) {
                        break;
                    }
                    dirs.push(d.to_path_buf());
                    if d == root.as_path() {
                        break;
                    }
                    dir = d.parent();
                }
                let full = Arc::<Path>::from(full);
                index.by_id.insert(id.clone(), full.clone());
                index.files.insert(full, id.clone());
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
    pub fn write_observer(&self) -> super::control::WriteObserver {
        let index = self.index.clone();
        Arc::new(move |id: &ResourceId| {
            let mut index = index.lock().expect("watch index");
            if let Some(p) = index.by_id.get(id) {
                let p = p.to_path_buf();
                index.own.insert(p, Instant::now() + OWN_WRITE_ECHO);
            }
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
        for p in ["etc/a", "etc/app/b", "etc/app/c", "etc/apple"] {
            index
                .files
                .insert(PathBuf::from("/r").join(p).into(), id(p));
        }
        assert_eq!(index.ids_for(Path::new("/r/etc/a")), vec![id("etc/a")]);
        assert_eq!(
            index.ids_for(Path::new("/r/etc/app")),
            vec![id("etc/app/b"), id("etc/app/c")]
        );
        assert!(index.ids_for(Path::new("/r/other")).is_empty());
        index.own.insert(
            PathBuf::from("/r/etc/a"),
            Instant::now() + Duration::from_secs(60),
        );
        assert!(index.ids_for(Path::new("/r/etc/a")).is_empty());
        assert!(is_own_temp(Path::new("/r/etc/.tend-abc.tmp")));
        assert!(!is_own_temp(Path::new("/r/etc/tend.tmp")));
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

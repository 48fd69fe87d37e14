//! File-system watching for a `files` target: non-recursive inotify
//! watches on the directories that hold managed paths (a recursive watch
//! would follow symlinks out of the root), under the live root (with
//! `link`, the published tree, followed as it moves). Events only send
//! keys to the subscriber's sink; on overflow or watch errors they ask for
//! a full pass, and the daemon leans on the resync timer.

mod dirs;
mod echoes;
mod events;
mod index;
mod managed;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use notify::{RecursiveMode, Watcher};

use crate::model::ResourceId;
use crate::target::{ChangeSink, Recheck, Subscription};
use dirs::{each_dir_up, parent_in};
pub(super) use echoes::{Echoes, Hook};
use events::{changes_something, is_own_temp};
use index::Index;

/// Where the target's live paths are now; `None` before any tree is
/// published.
pub(super) type LiveRoot = Box<dyn Fn() -> Option<PathBuf> + Send>;

pub(super) struct FilesWatch {
    watcher: Option<notify::RecommendedWatcher>,
    live: LiveRoot,
    watched: HashSet<PathBuf>,
    index: Arc<Mutex<Index>>,
    degraded: Arc<Mutex<Option<String>>>,
    /// The target finds this through its [`Hook`] while the watch runs.
    echoes: Arc<Echoes>,
}

impl FilesWatch {
    /// Starts watching the paths under `live`; what may have drifted goes
    /// to `sink`. Nothing is watched until the managed set is told.
    pub(super) fn start(live: LiveRoot, sink: ChangeSink) -> FilesWatch {
        let index = Arc::new(Mutex::new(Index::default()));
        let degraded = Arc::new(Mutex::new(None));
        let (idx, deg, tx) = (index.clone(), degraded.clone(), sink.clone());
        let handler = move |res: notify::Result<notify::Event>| match res {
            Ok(event) => {
                if event.need_rescan() {
                    tx(Recheck::All);
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
                drop(index);
                if !ids.is_empty() {
                    tx(Recheck::Keys(ids));
                }
            }
            Err(e) => {
                *deg.lock().expect("watch state") =
                    Some(format!("watch error: {e}; relying on the resync timer"));
                tx(Recheck::All);
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
        let echoes = Arc::new(Echoes {
            index: index.clone(),
            sink,
        });
        FilesWatch {
            watcher,
            live,
            watched: HashSet::new(),
            index,
            degraded,
            echoes,
        }
    }

    /// What the target tells of its own writes.
    pub(super) fn echoes(&self) -> &Arc<Echoes> {
        &self.echoes
    }

    /// Follows the live root: true when it moved (a newly published tree),
    /// so every managed directory is watched again there.
    fn root_moved(&mut self) -> bool {
        let now = (self.live)();
        let mut index = self.index.lock().expect("watch index");
        if index.root == now {
            return false;
        }
        index.root = now;
        true
    }

    /// Watches the directories that hold the managed paths (and their
    /// ancestors up to the root, so new directories are noticed), and drops
    /// watches no longer needed.
    fn watch_all(&mut self) -> Recheck {
        let mut dirs = HashSet::new();
        {
            let index = self.index.lock().expect("watch index");
            if let Some(root) = &index.root {
                for path in index.files.iter().map(ResourceId::key) {
                    // Directories above one already added are added already.
                    each_dir_up(root, path, |d| dirs.insert(d.to_path_buf()));
                }
            }
        }
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
        let Some(root) = &index.root else {
            return Recheck::Nothing;
        };
        let under_new = index
            .files
            .iter()
            .filter(|id| parent_in(root, id.key(), &new))
            .map(|id| (id, root.join(id.key())));
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
}

impl Subscription for FilesWatch {
    fn manage(&mut self, managed: &mut dyn Iterator<Item = (&ResourceId, &str)>) -> Recheck {
        // An identity names its path: the path given beside it is its key.
        // Worked out beside the index: events are judged meanwhile.
        let now = self.index.lock().expect("watch index").files.clone();
        if let Some(files) = now.replaced_by(managed.map(|(id, _)| id)) {
            self.index.lock().expect("watch index").files = Arc::new(files);
        }
        self.root_moved();
        self.watch_all()
    }

    /// Directories the patched paths need are watched; watches no longer
    /// needed stay until the next [`Subscription::manage`] (an event there
    /// names no identity). A moved root is watched whole.
    fn patch(&mut self, changes: &mut dyn Iterator<Item = (&ResourceId, Option<&str>)>) -> Recheck {
        let mut patched = Vec::new();
        let mut told = Vec::new();
        for (id, now) in changes {
            told.push((id.clone(), now.is_some()));
            if let Some(path) = now {
                patched.push((id.clone(), path));
            }
        }
        {
            let mut index = self.index.lock().expect("watch index");
            Arc::make_mut(&mut index.files).patch(told);
        }
        if self.root_moved() {
            return self.watch_all();
        }
        let Some(root) = self.index.lock().expect("watch index").root.clone() else {
            return Recheck::Nothing;
        };
        let mut dirs = Vec::new();
        for (_, path) in &patched {
            each_dir_up(&root, path, |d| {
                let new = !self.watched.contains(d);
                if new {
                    dirs.push(d.to_path_buf());
                }
                new
            });
        }
        let new = self.watch_dirs(dirs);
        let index = self.index.lock().expect("watch index");
        let under_new = patched
            .iter()
            .map(|(id, path)| (id, root.join(path)))
            .filter(|(_, full)| full.parent().is_some_and(|d| new.contains(d)));
        index.recheck(under_new)
    }

    /// Every managed folder is watched: drift is seen as it happens.
    fn healthy(&self) -> bool {
        self.watcher.is_some() && self.degraded.lock().expect("watch state").is_none()
    }

    fn describe(&self) -> String {
        match &*self.degraded.lock().expect("watch state") {
            Some(reason) => reason.clone(),
            None => format!(
                "watching {}",
                crate::render::count(self.watched.len(), "directory", "directories")
            ),
        }
    }
}

//! Test fixtures for the files target: a sandbox (root, state dir and a
//! sentinel directory outside the root), a Vec-backed recorder implementing
//! Backup, and a map-backed ContentSource.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use git2::Oid;

use super::FilesTarget;
use crate::model::{
    blob_id, Action, Backup, Change, ContentSource, Desired, Field, FileSpec, Observed, RelPath,
    ResourceId, Spec,
};
use crate::target::{Applied, Target, TargetError};

pub(super) fn rel(path: &str) -> RelPath {
    RelPath::parse(path).expect("test paths are valid")
}

/// One call to [`RecordingBackup::save`].
pub(super) struct Saved {
    pub id: ResourceId,
    pub bytes: Vec<u8>,
    /// What the watched file held at the moment of the call.
    pub watched_then: Option<Vec<u8>>,
}

/// A Vec-backed recorder of backups; it can also note what a watched file
/// held when the backup was taken, to check the order of events.
#[derive(Default)]
pub(super) struct RecordingBackup {
    pub saved: Mutex<Vec<Saved>>,
    pub watch: Option<PathBuf>,
}

impl RecordingBackup {
    pub fn watching(path: PathBuf) -> Self {
        RecordingBackup {
            saved: Mutex::new(Vec::new()),
            watch: Some(path),
        }
    }
    pub fn count(&self) -> usize {
        self.saved.lock().unwrap().len()
    }
    pub fn bytes(&self) -> Vec<Vec<u8>> {
        self.saved
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.bytes.clone())
            .collect()
    }
}

impl Backup for RecordingBackup {
    fn save(&self, id: &ResourceId, bytes: &[u8]) -> std::io::Result<String> {
        let watched_then = self.watch.as_ref().and_then(|p| std::fs::read(p).ok());
        let mut saved = self.saved.lock().unwrap();
        saved.push(Saved {
            id: id.clone(),
            bytes: bytes.to_vec(),
            watched_then,
        });
        Ok(format!("backup-{}", saved.len()))
    }
}

/// Blob contents by id, like the Git object database gives them.
#[derive(Default)]
pub(super) struct MapContent(pub HashMap<Oid, Vec<u8>>);

impl MapContent {
    pub fn of(contents: &[&[u8]]) -> Self {
        MapContent(contents.iter().map(|c| (blob_id(c), c.to_vec())).collect())
    }
}

impl ContentSource for MapContent {
    fn read(&self, blob: Oid) -> std::io::Result<Vec<u8>> {
        self.0
            .get(&blob)
            .cloned()
            .ok_or_else(|| std::io::Error::other(format!("no blob {blob}")))
    }
}

/// A root, a state dir, and beside them (outside the root) a sentinel
/// directory that no test may ever change.
pub(super) struct Sandbox {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub state: PathBuf,
    pub sentinel: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let (root, state, sentinel) = (
            base.join("root"),
            base.join("state"),
            base.join("outside/sentinel"),
        );
        for dir in [&root, &state, &sentinel] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(sentinel.join("secret"), b"keep me").unwrap();
        std::fs::write(sentinel.join(".tend-0000000000000000.tmp"), b"not yours").unwrap();
        Sandbox {
            _tmp: tmp,
            root,
            state,
            sentinel,
        }
    }

    pub fn target(&self) -> FilesTarget {
        FilesTarget::new("files", &self.root, &self.state).unwrap()
    }

    /// `rel` under the root, on the real filesystem (for checks only).
    pub fn at(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Where an absolute path lands when resolved as if the root were `/`.
    pub fn inside(&self, absolute: &Path) -> PathBuf {
        self.root.join(absolute.strip_prefix("/").unwrap())
    }

    /// Everything in the sentinel: path -> (mode, content or link target).
    pub fn sentinel_state(&self) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.sentinel.clone()];
        while let Some(dir) = stack.pop() {
            out.insert(
                dir.clone(),
                (std::fs::symlink_metadata(&dir).unwrap().mode(), Vec::new()),
            );
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let body = if meta.is_dir() {
                    stack.push(path.clone());
                    Vec::new()
                } else if meta.is_symlink() {
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes()
                } else {
                    std::fs::read(&path).unwrap()
                };
                out.insert(path, (meta.mode(), body));
            }
        }
        out
    }
}

pub(super) fn file_spec(bytes: &[u8], mode: u32) -> FileSpec {
    FileSpec {
        blob: blob_id(bytes),
        size: bytes.len() as u64,
        mode,
        uid: None.into(),
        gid: None.into(),
        secret: false,
    }
}

pub(super) fn change(path: &str, action: Action, spec: Option<Spec>, fields: Vec<Field>) -> Change {
    let kind = spec.as_ref().map_or("file", |s| s.kind());
    let id = ResourceId::new("files", kind, path);
    let desired = spec.map(|spec| {
        Desired::new(
            id.clone(),
            rel(path).as_str(),
            spec,
            Default::default(),
            false,
            false,
        )
    });
    Change {
        id,
        target: "files".into(),
        path: rel(path),
        action,
        fields,
        desired,
        observed: Observed::Absent,
    }
}

/// Creates (or fully rewrites) a file at `path` through the target.
pub(super) fn put(
    t: &FilesTarget,
    path: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<Applied, TargetError> {
    let c = change(
        path,
        Action::Create,
        Some(Spec::File(file_spec(bytes, mode))),
        vec![],
    );
    t.apply(&c, &MapContent::of(&[bytes]), &RecordingBackup::default())
}

pub(super) fn observe(t: &FilesTarget, path: &str) -> Observed {
    t.observe_paths(&[&rel(path)]).pop().unwrap()
}

/// (inode, mtime ns, ctime ns) of a path, not following it.
pub(super) fn identity(path: &Path) -> (u64, i64, i64) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (
        m.ino(),
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ctime() * 1_000_000_000 + m.ctime_nsec(),
    )
}

pub(super) use crate::test_gate::is_root;

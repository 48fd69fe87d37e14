//! One revision of the repository, read straight from the mirror's object
//! database: looking up entries (listing them is in walk.rs), reading blobs,
//! and the paths that changed since another revision.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use git2::{ObjectType, Oid, Repository, Tree};

use super::names;
use super::sizes::Sizes;
use super::SourceError;
use crate::model::ContentSource;

pub(super) const MODE_TREE: i32 = 0o040000;
pub(super) const MODE_FILE: i32 = 0o100644;
/// Written by very old git versions; means a plain file.
pub(super) const MODE_FILE_GROUP_WRITABLE: i32 = 0o100664;
pub(super) const MODE_EXECUTABLE: i32 = 0o100755;
pub(super) const MODE_SYMLINK: i32 = 0o120000;
const MODE_SUBMODULE: i32 = 0o160000;
/// Largest `.gitattributes` read whole.
pub(super) const MAX_ATTRIBUTES: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryMode {
    File,
    Executable,
    Symlink,
    /// A commit of another repository (a gitlink); it has no content here.
    Submodule,
}

impl EntryMode {
    /// The permission bits Git implies for a regular file: 0644 or 0755.
    pub fn file_mode(self) -> Option<u32> {
        match self {
            EntryMode::File => Some(0o644),
            EntryMode::Executable => Some(0o755),
            EntryMode::Symlink | EntryMode::Submodule => None,
        }
    }
}

/// A non-directory entry of a revision's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Repository-relative, `/`-separated, without `.` or `..`.
    pub path: String,
    /// The blob (for a symlink, the blob holding its target; for a
    /// submodule, the commit it pins).
    pub oid: Oid,
    pub mode: EntryMode,
}

/// What a lookup found at a path, directories included.
pub(super) enum Found {
    Directory,
    Entry(Entry),
}

/// Whether a `.gitattributes` file's text routes some paths through Git
/// LFS (`filter=lfs`).
pub fn routes_through_lfs(attributes: &[u8]) -> bool {
    attributes.windows(10).any(|w| w == b"filter=lfs")
}

/// One revision. Owns its own handle on the mirror, so it can move to
/// another thread than the [`super::Mirror`] it came from.
pub struct Snapshot {
    pub(super) repo: Repository,
    dir: PathBuf,
    commit: Oid,
    tree: Oid,
    sizes: Sizes,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("commit", &self.commit)
            .finish()
    }
}

impl Snapshot {
    /// Reads `commit` through `repo`, a handle on the mirror at `dir`.
    pub(super) fn open(repo: Repository, dir: &Path, commit: Oid) -> Result<Snapshot, SourceError> {
        let tree = repo
            .find_commit(commit)
            .map_err(|e| SourceError::git(format!("reading commit {commit}"), e))?
            .tree_id();
        Ok(Snapshot {
            repo,
            dir: dir.to_path_buf(),
            commit,
            tree,
            sizes: Sizes::beside(dir),
        })
    }

    /// The commit id this snapshot reads.
    pub fn revision(&self) -> Oid {
        self.commit
    }

    pub(super) fn root(&self) -> Result<Tree<'_>, SourceError> {
        self.repo
            .find_tree(self.tree)
            .map_err(|e| SourceError::git(format!("reading tree {}", self.tree), e))
    }

    pub(super) fn subtree(&self, dir: &str) -> Result<Tree<'_>, SourceError> {
        let root = self.root()?;
        let item = root
            .get_path(Path::new(dir))
            .map_err(|e| SourceError::git(format!("reading {dir}"), e))?;
        self.repo
            .find_tree(item.id())
            .map_err(|e| SourceError::git(format!("reading {dir}"), e))
    }

    /// The entry at `path` exactly as stored: symlinks are not followed.
    /// `None` when nothing is there; a directory is an error.
    pub fn entry(&self, path: &str) -> Result<Option<Entry>, SourceError> {
        let path = normalize(path)?;
        match self.lookup(&path)? {
            Some(Found::Entry(entry)) => Ok(Some(entry)),
            Some(Found::Directory) => Err(SourceError::IsDirectory { path }),
            None => Ok(None),
        }
    }

    /// Looks up a normalized path (`""` is the root directory).
    pub(super) fn lookup(&self, path: &str) -> Result<Option<Found>, SourceError> {
        if path.is_empty() {
            return Ok(Some(Found::Directory));
        }
        let root = self.root()?;
        let item = match root.get_path(Path::new(path)) {
            Ok(item) => item,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(SourceError::git(format!("looking up {path}"), e)),
        };
        entry_name(item.name_bytes(), path)?;
        let symlink = item.filemode() == MODE_SYMLINK;
        let mut parts = path.split('/').peekable();
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            if let Some(reason) = names::refused(part.as_bytes(), symlink && last) {
                return Err(invalid(path, &reason));
            }
        }
        match item.filemode() {
            MODE_TREE => Ok(Some(Found::Directory)),
            mode => Ok(Some(Found::Entry(Entry {
                mode: entry_mode(mode, path)?,
                oid: item.id(),
                path: path.to_string(),
            }))),
        }
    }

    /// A blob's bytes.
    pub fn read(&self, oid: Oid) -> Result<Vec<u8>, SourceError> {
        read_blob(&self.repo, oid)
    }

    /// A blob's size from the object header, without reading its content
    /// (or from the sizes kept beside the mirror).
    pub fn size(&self, oid: Oid) -> Result<u64, SourceError> {
        if let Some(size) = self.sizes.get(oid) {
            return Ok(size);
        }
        let odb = self
            .repo
            .odb()
            .map_err(|e| SourceError::git("opening the object database", e))?;
        let (size, kind) = odb.read_header(oid).map_err(|e| {
            if e.code() == git2::ErrorCode::NotFound {
                super::damage::mark_damaged(&self.dir, oid);
            }
            SourceError::git(format!("reading object {oid}"), e)
        })?;
        if kind != ObjectType::Blob {
            return Err(SourceError::NotABlob {
                oid,
                kind: kind.str().to_string(),
            });
        }
        self.sizes.found(oid, size as u64);
        Ok(size as u64)
    }

    /// Keeps the blob sizes looked up so far (those of a whole declaration)
    /// for the next run, and lets go of them here.
    pub fn keep_sizes(&self) {
        self.sizes.save();
    }

    /// A thread-safe reader of this mirror's blobs, for target adapters.
    pub fn content_source(&self) -> Result<BlobReader, SourceError> {
        let repo = open_mirror(&self.dir)?;
        Ok(BlobReader {
            dir: self.dir.clone(),
            idle: Mutex::new(vec![repo]),
        })
    }

    /// Paths whose blob or mode differ between `old` and this revision,
    /// including added and deleted ones (every file of an added or deleted
    /// directory), sorted. Subtrees with the same id on both sides are not
    /// entered, so the cost follows the size of the change, not of the tree.
    pub fn changed_paths(&self, old: Oid) -> Result<Vec<String>, SourceError> {
        let old_tree = self
            .repo
            .find_commit(old)
            .map_err(|e| SourceError::git(format!("reading commit {old}"), e))?
            .tree_id();
        let mut paths = BTreeSet::new();
        // An explicit stack: a hostile repository may nest trees very deeply.
        let mut stack = vec![(Some(old_tree), Some(self.tree), String::new())];
        while let Some((a, b, prefix)) = stack.pop() {
            if a == b {
                continue;
            }
            let (a, b) = (self.entries_of(a, &prefix)?, self.entries_of(b, &prefix)?);
            let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for name in names {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}/{name}")
                };
                let (ea, eb) = (a.get(name).copied(), b.get(name).copied());
                let tree = |e: Option<(i32, Oid)>| e.filter(|(m, _)| *m == MODE_TREE).map(|e| e.1);
                let (ta, tb) = (tree(ea), tree(eb));
                if ta.is_some() || tb.is_some() {
                    stack.push((ta, tb, path.clone()));
                }
                let file = |e: Option<(i32, Oid)>| e.filter(|(m, _)| *m != MODE_TREE);
                let (fa, fb) = (file(ea), file(eb));
                if (fa.is_some() || fb.is_some()) && fa != fb {
                    paths.insert(path);
                }
            }
        }
        Ok(paths.into_iter().collect())
    }

    /// A tree's entries by name (mode, id); none for `None`.
    fn entries_of(
        &self,
        tree: Option<Oid>,
        prefix: &str,
    ) -> Result<std::collections::BTreeMap<String, (i32, Oid)>, SourceError> {
        let mut out = std::collections::BTreeMap::new();
        let Some(id) = tree else {
            return Ok(out);
        };
        let tree = self
            .repo
            .find_tree(id)
            .map_err(|e| SourceError::git(format!("reading tree {id} at {prefix:?}"), e))?;
        for item in tree.iter() {
            let name = entry_name(item.name_bytes(), prefix)?;
            out.insert(name, (item.filemode(), item.id()));
        }
        Ok(out)
    }
}

/// A new handle on the mirror at `dir`.
pub(super) fn open_mirror(dir: &Path) -> Result<Repository, SourceError> {
    Repository::open_bare(dir)
        .map_err(|e| SourceError::git(format!("opening {}", dir.display()), e))
}

/// Reads blobs for target adapters, from any thread: each read takes a
/// handle to the mirror no other read is using, opening one more when all
/// are busy, so threads staging files at once do not wait for each other.
pub struct BlobReader {
    dir: PathBuf,
    idle: Mutex<Vec<Repository>>,
}

impl BlobReader {
    fn take(&self) -> Result<Repository, SourceError> {
        // The lock only guards the list; a panic elsewhere cannot leave it
        // inconsistent, so a poisoned lock is still usable.
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        idle.map_or_else(|| open_mirror(&self.dir), Ok)
    }

    fn put_back(&self, repo: Repository) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(repo);
    }
}

impl ContentSource for BlobReader {
    fn read(&self, blob: Oid) -> std::io::Result<Vec<u8>> {
        // Not opening the mirror (out of descriptors, say) is no missing blob.
        let repo = self
            .take()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let read = read_blob(&repo, blob);
        self.put_back(repo);
        read.map_err(|e| match e {
            SourceError::NotABlob { .. } => {
                std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
            }
            other => std::io::Error::new(std::io::ErrorKind::NotFound, other.to_string()),
        })
    }
}

fn read_blob(repo: &Repository, oid: Oid) -> Result<Vec<u8>, SourceError> {
    let odb = repo
        .odb()
        .map_err(|e| SourceError::git("opening the object database", e))?;
    let object = odb.read(oid).map_err(|e| {
        if e.code() == git2::ErrorCode::NotFound {
            // The tree named it, so the mirror lost it: the next fetch
            // checks the whole revision and repairs the mirror.
            super::damage::mark_damaged(repo.path(), oid);
        }
        SourceError::git(format!("reading object {oid}"), e)
    })?;
    if object.kind() != ObjectType::Blob {
        return Err(SourceError::NotABlob {
            oid,
            kind: object.kind().str().to_string(),
        });
    }
    Ok(object.data().to_vec())
}

/// A caller's path in canonical form: `/`-separated, no empty or `.`
/// components. `..` is refused here; only [`Snapshot::resolve`] walks it.
pub(super) fn normalize(path: &str) -> Result<String, SourceError> {
    if path.contains('\0') {
        return Err(invalid(path, "contains a NUL byte"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid(path, "contains `..`")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

/// A tree entry's name, refusing what a crafted tree may hold but no
/// checkout could: names that would climb out or split into several paths.
fn entry_name(name: &[u8], parent: &str) -> Result<String, SourceError> {
    valid_name(name, parent).map(str::to_string)
}

/// [`entry_name`], borrowed.
fn valid_name<'a>(name: &'a [u8], parent: &str) -> Result<&'a str, SourceError> {
    let shown = || format!("{parent}/{}", String::from_utf8_lossy(name));
    let name = std::str::from_utf8(name).map_err(|_| invalid(&shown(), "not valid UTF-8"))?;
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(invalid(&shown(), "not a valid file name"));
    }
    Ok(name)
}

pub(super) fn entry_mode(mode: i32, path: &str) -> Result<EntryMode, SourceError> {
    match mode {
        MODE_FILE | MODE_FILE_GROUP_WRITABLE => Ok(EntryMode::File),
        MODE_EXECUTABLE => Ok(EntryMode::Executable),
        MODE_SYMLINK => Ok(EntryMode::Symlink),
        MODE_SUBMODULE => Ok(EntryMode::Submodule),
        other => Err(invalid(path, &format!("unknown file mode {other:o}"))),
    }
}

fn invalid(path: &str, reason: &str) -> SourceError {
    SourceError::InvalidPath {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}

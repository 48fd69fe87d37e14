//! Listing a revision's tree: every file, symlink and submodule below a
//! directory, with the entries no checkout would make set apart (one bad
//! name refuses only what is at and below it), and the directories whose
//! `.gitattributes` route paths through Git LFS.

use git2::Oid;

use super::names;
use super::snapshot::{
    entry_mode, normalize, Found, MAX_ATTRIBUTES, MODE_EXECUTABLE, MODE_FILE,
    MODE_FILE_GROUP_WRITABLE, MODE_SYMLINK, MODE_TREE,
};
use super::{routes_through_lfs, Entry, Snapshot, SourceError};

/// A path of the revision that is never applied: a name Git refuses to
/// check out (`.git` and the names file systems fold to it), a name that
/// is not valid UTF-8, an unknown file mode. A directory is refused whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Repository-relative; bytes that are not UTF-8 shown as `\xNN`.
    pub path: String,
    /// Names the path.
    pub reason: String,
    /// A directory, refused with all it holds.
    pub directory: bool,
}

/// What [`Snapshot::walk`] found below a directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Walk {
    pub entries: Vec<Entry>,
    pub refused: Vec<Refused>,
}

impl Snapshot {
    /// Every file, symlink and submodule below `dir` (`""` is the root),
    /// recursively, sorted by path, and apart from them the entries no
    /// checkout would make (see [`Refused`]): one bad name refuses only what
    /// is at and below it. Symlinks are listed, not followed.
    pub fn walk(&self, dir: &str) -> Result<Walk, SourceError> {
        let dir = normalize(dir)?;
        let start = if dir.is_empty() {
            self.root()?
        } else {
            match self.lookup(&dir)? {
                Some(Found::Directory) => self.subtree(&dir)?,
                Some(Found::Entry(_)) => return Err(SourceError::NotADirectory { path: dir }),
                None => {
                    return Err(SourceError::NotFound {
                        path: dir,
                        revision: self.revision(),
                    })
                }
            }
        };
        let mut out = Walk::default();
        // An explicit stack: a hostile repository may nest trees very deeply.
        // Each subtree is walked where its entry stands; Git orders a tree's
        // entries as if directory names ended in `/`, so this yields paths
        // already sorted, and the sort below is a pass that moves nothing.
        let mut stack = vec![(start, 0, dir)];
        while let Some((tree, next, prefix)) = stack.last_mut() {
            let Some(item) = tree.get(*next) else {
                stack.pop();
                continue;
            };
            *next += 1;
            let (mode, oid) = (item.filemode(), item.id());
            let join = |name: &str| {
                let mut path = String::with_capacity(prefix.len() + 1 + name.len());
                if !prefix.is_empty() {
                    path.push_str(prefix);
                    path.push('/');
                }
                path.push_str(name);
                path
            };
            let bytes = item.name_bytes();
            let why = match std::str::from_utf8(bytes) {
                Err(_) => Some("the file name is not valid UTF-8".to_string()),
                Ok(_) => names::refused(bytes, mode == MODE_SYMLINK),
            };
            if let Some(why) = why {
                let path = join(&names::escape_name(bytes));
                let reason = match mode {
                    MODE_TREE => format!("{path}: {why}; nothing in this directory is applied"),
                    _ => format!("{path}: {why}"),
                };
                out.refused.push(Refused {
                    path,
                    reason,
                    directory: mode == MODE_TREE,
                });
                continue;
            }
            let path = join(std::str::from_utf8(bytes).expect("checked above"));
            drop(item);
            if mode == MODE_TREE {
                let sub = self
                    .repo
                    .find_tree(oid)
                    .map_err(|e| SourceError::git(format!("reading {path}"), e))?;
                stack.push((sub, 0, path));
            } else {
                match entry_mode(mode, &path) {
                    Ok(mode) => out.entries.push(Entry { mode, oid, path }),
                    Err(e) => out.refused.push(Refused {
                        reason: e.to_string(),
                        path,
                        directory: false,
                    }),
                }
            }
        }
        out.entries.sort_by(|a, b| a.path.cmp(&b.path));
        out.refused.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The directories (`""` is the root) holding a `.gitattributes` that
    /// mentions `filter=lfs`: only paths at or below them can be Git LFS
    /// pointers. Reads every tree but allocates only for directories.
    pub fn lfs_attribute_dirs(&self) -> Result<Vec<String>, SourceError> {
        let mut out = Vec::new();
        let mut stack = vec![(self.root()?, String::new())];
        while let Some((tree, prefix)) = stack.pop() {
            for item in tree.iter() {
                let name = item.name_bytes();
                match item.filemode() {
                    MODE_TREE => {
                        // Nothing in a directory no checkout makes is read.
                        let Ok(name) = std::str::from_utf8(name) else {
                            continue;
                        };
                        if names::refused(name.as_bytes(), false).is_some() {
                            continue;
                        }
                        let path = if prefix.is_empty() {
                            name.to_string()
                        } else {
                            format!("{prefix}/{name}")
                        };
                        let sub = self
                            .repo
                            .find_tree(item.id())
                            .map_err(|e| SourceError::git(format!("reading {path}"), e))?;
                        stack.push((sub, path));
                    }
                    MODE_FILE | MODE_FILE_GROUP_WRITABLE | MODE_EXECUTABLE
                        if name == b".gitattributes" && self.routes_through_lfs(item.id())? =>
                    {
                        out.push(prefix.clone());
                    }
                    _ => {}
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Whether the `.gitattributes` blob `oid` routes paths through Git
    /// LFS. One too large to read (Git itself ignores attribute files over
    /// 100 MB) is taken to: pointers are then still refused.
    pub fn routes_through_lfs(&self, oid: Oid) -> Result<bool, SourceError> {
        if self.size(oid)? > MAX_ATTRIBUTES {
            return Ok(true);
        }
        Ok(routes_through_lfs(&self.read(oid)?))
    }
}

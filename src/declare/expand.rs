//! Turns parsed declarations (or mirrored files) into [`Desired`] resources:
//! target selection, `source:` resolution inside the repository, content
//! checks, owner lookup, and conflict detection.

use crate::declare::DeclError;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use git2::Oid;

mod clash;
mod fields;
mod files;
mod key;
mod mirrored;
mod sealed;
mod select;
mod structured;

use super::yaml::{self, Decl, Parsed};
use super::{Declared, Options, Problem};
use crate::model::{Desired, FileSpec, Origin, RelPath, ResourceId, Resources, SharedStr};
use crate::source::{Entry, EntryMode, Refused, Snapshot, SourceError};
pub(super) use clash::same_when_folded;
use fields::{parent_dir, repo_join};

const LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/";

pub(super) struct Builder<'a> {
    snap: &'a Snapshot,
    opts: &'a Options<'a>,
    resources: BTreeMap<ResourceId, Desired>,
    by_path: HashMap<(SharedStr, RelPath), ResourceId>,
    conflicted: HashSet<(SharedStr, RelPath)>,
    blocked: BTreeMap<ResourceId, String>,
    problems: Vec<Problem>,
    /// What is left out without blocking anything (submodules).
    notes: Vec<Problem>,
    inline: HashMap<Oid, Vec<u8>>,
    secrets: HashMap<Oid, crate::secrets::Plaintext>,
    /// Directories whose `.gitattributes` route paths through Git LFS.
    lfs_dirs: Vec<String>,
    /// Mirrored files, in walk order: their paths are unique, so they skip
    /// the conflict index and are indexed all at once in `finish`. Held as
    /// the map's entries, so building the map reuses this vector.
    mirrored: Vec<Desired>,
    /// What declares mirrored files, one for each source path and suffix.
    mirror_declarations: Vec<Arc<crate::model::Declaration>>,
    /// The target of every mirrored file, picked once.
    mirror_target: Option<Result<String, DeclError>>,
    owners: BTreeMap<ResourceId, crate::declare::WrittenOwner>,
    /// A decryption failed on an identity file that could not be read.
    reread: bool,
    /// What is blocked only until an identity file unreadable now can be
    /// read: retried, not held.
    waiting: BTreeSet<ResourceId>,
}

impl<'a> Builder<'a> {
    pub(super) fn new(snap: &'a Snapshot, opts: &'a Options<'a>, lfs_dirs: Vec<String>) -> Self {
        Builder {
            snap,
            opts,
            resources: BTreeMap::new(),
            by_path: HashMap::new(),
            conflicted: HashSet::new(),
            blocked: BTreeMap::new(),
            problems: Vec::new(),
            notes: Vec::new(),
            inline: HashMap::new(),
            secrets: HashMap::new(),
            lfs_dirs,
            mirrored: Vec::new(),
            mirror_declarations: Vec::new(),
            mirror_target: None,
            owners: BTreeMap::new(),
            reread: false,
            waiting: BTreeSet::new(),
        }
    }

    /// Whether Git LFS may have replaced the content at `path`: some
    /// `.gitattributes` at or above it mentions `filter=lfs`.
    fn lfs_may_apply(&self, path: &str) -> bool {
        self.lfs_dirs.iter().any(|dir| {
            dir.is_empty()
                || path
                    .strip_prefix(dir.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    fn problem(&mut self, file: &str, line: usize, message: impl Into<String>) {
        self.problems.push(Problem {
            file: file.to_string(),
            line,
            message: message.into(),
        });
    }

    fn block(&mut self, id: ResourceId, origin: &Origin, reason: impl Into<DeclError>) {
        let reason = reason.into();
        self.problem(&origin.file, origin.line, format!("{id}: {reason}"));
        match reason.waits() {
            true => self.waiting.insert(id.clone()),
            false => self.waiting.remove(&id),
        };
        self.blocked.insert(id, reason.to_string());
    }

    /// Blocks what stands at one path of the repository (a name no
    /// checkout makes, an LFS pointer, a file over the size limit): its
    /// identity is known, so it is kept as it is and nothing else waits for
    /// it; pruning goes on. Only invalid documents hold prune back.
    fn refuse(&mut self, id: ResourceId, reason: impl Into<DeclError>) {
        let reason = reason.into();
        match reason.waits() {
            true => self.waiting.insert(id.clone()),
            false => self.waiting.remove(&id),
        };
        self.blocked.insert(id, reason.to_string());
    }

    /// A content file's spec, after following repository symlinks and
    /// checking size and LFS pointers.
    fn content_spec(&self, entry: &Entry) -> Result<FileSpec, DeclError> {
        let followed;
        let resolved = match entry.mode {
            EntryMode::Symlink => {
                followed = self.snap.resolve(&entry.path)?;
                &followed
            }
            EntryMode::Submodule => {
                return Err(
                    format!("{} is a submodule; submodules are not applied", entry.path).into(),
                )
            }
            _ => entry,
        };
        let size = self.snap.size(resolved.oid)?;
        if size > self.opts.max_file_size {
            return Err(format!(
                "{} is {size} bytes, over the {} byte limit",
                resolved.path, self.opts.max_file_size
            )
            .into());
        }
        if size < 1024 && (self.lfs_may_apply(&entry.path) || self.lfs_may_apply(&resolved.path)) {
            let bytes = self.snap.read(resolved.oid)?;
            if bytes.starts_with(LFS_POINTER) {
                return Err(format!(
                    "{} is a Git LFS pointer; LFS content is not fetched",
                    resolved.path
                )
                .into());
            }
        }
        let mode = if matches!(resolved.mode, EntryMode::Executable) {
            0o755
        } else {
            0o644
        };
        Ok(FileSpec {
            blob: resolved.oid,
            size,
            mode,
            uid: None.into(),
            gid: None.into(),
            secret: false,
        })
    }

    fn add(&mut self, d: Desired) {
        let key = (d.id.target_shared(), d.path());
        if self.conflicted.contains(&key) {
            let reason = format!("{} is declared more than once", d.path_str());
            self.block(d.id.clone(), &d.origin(), reason);
            return;
        }
        if let Some(prev_id) = self.by_path.get(&key).cloned() {
            let prev = self
                .resources
                .remove(&prev_id)
                .expect("indexed resource exists");
            self.conflicted.insert(key);
            let reason = format!(
                "declared twice, at {} and {}; neither is applied",
                prev.origin(),
                d.origin()
            );
            self.block(prev.id.clone(), &prev.origin(), reason.clone());
            self.block(d.id.clone(), &d.origin(), reason);
            return;
        }
        self.by_path.insert(key, d.id.clone());
        self.resources.insert(d.id.clone(), d);
    }

    /// Declaration mode: an entry no checkout would make. One named as a
    /// declaration is a problem (what it declares is unknown, so nothing is
    /// pruned); a directory, which may hold some, is a note; other files
    /// are content only a `source:` would read, and that read fails.
    pub(super) fn unread(&mut self, refused: Refused, is_declaration: fn(&str) -> bool) {
        if is_declaration(&refused.path) {
            self.problem(&refused.path, 1, refused.reason);
        } else if refused.directory {
            self.notes.push(Problem {
                file: refused.path,
                line: 0,
                message: format!("{}; not read for declarations", refused.reason),
            });
        }
    }

    pub(super) fn declaration_file(&mut self, entry: &Entry) {
        let file = entry.path.clone();
        let size = match self.snap.size(entry.oid) {
            Ok(s) => s,
            Err(e) => return self.problem(&file, 1, e.to_string()),
        };
        if size > yaml::MAX_DECL_FILE {
            return self.problem(
                &file,
                1,
                format!(
                    "declaration file is {size} bytes, over the {} limit",
                    yaml::MAX_DECL_FILE
                ),
            );
        }
        let bytes = match self.snap.read(entry.oid) {
            Ok(b) => b,
            Err(e) => return self.problem(&file, 1, e.to_string()),
        };
        for parsed in yaml::parse(&bytes) {
            match parsed {
                Parsed::Problem { line, message } => self.problem(&file, line, message),
                Parsed::Decl { line, decl } => {
                    let origin = Origin {
                        file: file.as_str().into(),
                        line,
                    };
                    if let Err(message) = self.decl(*decl, &origin) {
                        self.problem(&file, line, message.to_string());
                    }
                }
            }
        }
    }

    /// One document. Errors before an identity is known are returned;
    /// errors after it block that identity (a `file` or `symlink` whose
    /// target and path are known; a `directory` names no one identity).
    fn decl(&mut self, d: Decl, origin: &Origin) -> Result<(), DeclError> {
        // For other hosts: left out, as if not declared here (so pruned
        // where it was applied before).
        if let (Some(sel), Some(host)) = (&d.hosts, self.opts.host) {
            if !sel.picks(host) {
                return Ok(());
            }
        }
        let kind = d.kind.clone();
        let serves = match kind.as_str() {
            "file" | "directory" => "file",
            "symlink" => "symlink",
            crate::model::KEY_KIND => return self.key(d, origin),
            _ => return self.structured(d, origin),
        };
        let target = self.pick_target(d.target.as_deref(), serves)?;
        let raw = d
            .path
            .as_deref()
            .ok_or_else(|| format!("kind {kind} needs `path`"))?;
        let path = RelPath::parse(raw)?;
        let id = match kind.as_str() {
            "directory" => None,
            _ => Some(ResourceId::new(&target, &kind, path.as_str())),
        };
        match (self.file_like(d, origin, target, path), id) {
            (Err(reason), Some(id)) => {
                self.block(id, origin, reason);
                Ok(())
            }
            (result, _) => result,
        }
    }

    fn source_file(&self, decl_file: &str, src: &str) -> Result<FileSpec, DeclError> {
        let path = repo_join(parent_dir(decl_file), src)?;
        let entry = match self.snap.entry(&path) {
            Ok(Some(e)) => e,
            Ok(None) => {
                // The path may run through a symlinked directory.
                self.snap.resolve(&path).map_err(|e| match e {
                    SourceError::NotFound { .. } => {
                        format!("source {path:?} does not exist in the repository")
                    }
                    other => other.to_string(),
                })?
            }
            Err(e) => return Err(e.to_string().into()),
        };
        self.content_spec(&entry)
    }

    pub(super) fn finish(mut self) -> Declared {
        let mirrored = std::mem::take(&mut self.mirrored);
        let unique = mirrored.windows(2).all(|w| w[0].id < w[1].id);
        let mut resources = if unique && self.resources.is_empty() {
            Resources::from_vec(mirrored)
        } else {
            for d in mirrored {
                self.add(d);
            }
            // Taken entry by entry: the map's nodes go as the vector grows.
            let declared = std::mem::take(&mut self.resources);
            let mut all = Vec::with_capacity(declared.len());
            all.extend(declared.into_values());
            Resources::from_vec(all)
        };
        self.nested_conflicts(&mut resources);
        self.case_clashes(&resources);
        // An identity also declared by an invalid document is not applied:
        // which of the two was meant is for a human to say.
        resources.retain(|d| !self.blocked.contains_key(&d.id));
        self.notes.sort_by(|a, b| a.file.cmp(&b.file));
        let mut waiting = self.waiting;
        waiting.retain(|id| self.blocked.contains_key(id));
        Declared {
            resources,
            blocked: self.blocked,
            waiting,
            reread: self.reread,
            problems: self.problems,
            notes: self.notes,
            inline: self.inline,
            secrets: self.secrets,
            owners: self.owners,
            ..Declared::default()
        }
    }
}

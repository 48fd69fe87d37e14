//! Turns parsed declarations (or mirrored files) into [`Desired`] resources:
//! target selection, `source:` resolution inside the repository, content
//! checks, owner lookup, and conflict detection.

use crate::declare::DeclError;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use git2::Oid;

mod clash;
mod fields;
mod key;
mod mirrored;
mod sealed;
mod select;
mod structured;

use super::yaml::{self, Decl, Parsed};
use super::{Declared, Options, Problem};
use crate::model::{blob_id, Desired, FileSpec, Origin, RelPath, ResourceId, SharedStr, Spec};
use crate::source::{refused_name, Entry, EntryMode, Refused, Snapshot, SourceError};
pub(super) use clash::same_when_folded;
use fields::{decrypts, parent_dir, parse_mode, repo_join, resolve_principal};

const LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/";

/// An owner or group as written in the declaration.
fn written_principal(p: &yaml::IdOrName) -> String {
    match p {
        yaml::IdOrName::Id(n) => n.to_string(),
        yaml::IdOrName::Name(s) => s.clone(),
    }
}

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
    mirrored: Vec<(ResourceId, Desired)>,
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
            uid: None,
            gid: None,
            secret: false,
        })
    }

    fn add(&mut self, d: Desired) {
        let key = (d.id.target_shared(), d.path.clone());
        if self.conflicted.contains(&key) {
            let reason = format!("{} is declared more than once", d.path);
            self.block(d.id.clone(), &d.origin.clone(), reason);
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
                prev.origin, d.origin
            );
            self.block(prev.id.clone(), &prev.origin, reason.clone());
            self.block(d.id.clone(), &d.origin.clone(), reason);
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

    /// The rest of a `file`, `symlink` or `directory` document, once its
    /// target and path are known.
    fn file_like(
        &mut self,
        d: Decl,
        origin: &Origin,
        target: String,
        path: RelPath,
    ) -> Result<(), DeclError> {
        let kind = d.kind.as_str();
        for part in path.components() {
            if let Some(why) = refused_name(part.as_bytes(), kind == "symlink") {
                return Err(format!("path {path}: {part:?}: {why}").into());
            }
        }
        let misplaced = |field: &str, present: bool| -> Result<(), DeclError> {
            if present {
                return Err(format!("`{field}` does not apply to kind {kind}").into());
            }
            Ok(())
        };
        misplaced("name", d.name.is_some())?;
        misplaced("spec", d.spec.is_some())?;
        misplaced("ignore", d.ignore.is_some())?;
        misplaced("key", d.key.is_some())?;
        misplaced("value", d.value.is_some())?;
        misplaced("json", d.json.is_some())?;
        match kind {
            "symlink" => {
                misplaced("source", d.source.is_some())?;
                misplaced("content", d.content.is_some())?;
                misplaced("mode", d.mode.is_some())?;
                misplaced("sensitive", d.sensitive.is_some())?;
                misplaced("decrypt", d.decrypt.is_some())?;
            }
            "directory" => {
                misplaced("target_path", d.target_path.is_some())?;
                misplaced("decrypt", d.decrypt.is_some())?;
            }
            _ => misplaced("target_path", d.target_path.is_some())?,
        }
        let decrypt = decrypts(&d)?;
        let mode = d.mode.as_deref().map(parse_mode).transpose()?;
        let resolve = |p: &Option<yaml::IdOrName>, group| match p {
            Some(p) if !self.opts.as_written => resolve_principal(p, group).map(Some),
            _ => Ok(None),
        };
        let (uid, gid) = (resolve(&d.owner, false)?, resolve(&d.group, true)?);
        let written = crate::declare::WrittenOwner {
            owner: d.owner.as_ref().map(written_principal),
            group: d.group.as_ref().map(written_principal),
        };
        let written = (self.opts.as_written && written != Default::default()).then_some(written);
        let common = |id: ResourceId, path: RelPath, spec: Spec| Desired {
            id,
            path,
            spec,
            on_change: d.on_change.clone(),
            self_heal: d.self_heal,
            sensitive: decrypt || d.sensitive.unwrap_or(false),
            decrypted: decrypt,
            origin: origin.clone(),
        };
        let hook_missing = d
            .on_change
            .as_ref()
            .filter(|h| !self.opts.as_written && !self.opts.hooks.contains(h))
            .map(|h| format!("hook {h:?} is not defined in the local config"));

        match kind {
            "symlink" => {
                let link = d
                    .target_path
                    .clone()
                    .filter(|t| !t.is_empty() && !t.contains('\0'));
                let link = link.ok_or("kind symlink needs a non-empty `target_path`")?;
                let id = ResourceId::new(&target, "symlink", path.as_str());
                if let Some(reason) = hook_missing {
                    self.block(id, origin, reason);
                    return Ok(());
                }
                self.add(common(id, path, Spec::Symlink { target: link }));
            }
            "file" => {
                let id = ResourceId::new(&target, "file", path.as_str());
                let spec = match (&d.source, &d.content) {
                    (Some(_), Some(_)) => {
                        return Err("give either `source` or `content`, not both".into())
                    }
                    (None, None) => return Err("kind file needs `source` or `content`".into()),
                    (None, Some(text)) => {
                        let bytes = text.as_bytes().to_vec();
                        let blob = blob_id(&bytes);
                        let size = bytes.len() as u64;
                        self.inline.insert(blob, bytes);
                        Ok(FileSpec {
                            blob,
                            size,
                            mode: 0o644,
                            uid: None,
                            gid: None,
                            secret: false,
                        })
                    }
                    (Some(src), None) if decrypt => {
                        let file = repo_join(parent_dir(&origin.file), src)?;
                        self.source_file(&origin.file, src)
                            .and_then(|sealed| self.unsealed(&file, sealed))
                    }
                    (Some(src), None) => self.source_file(&origin.file, src),
                };
                let reason = hook_missing
                    .map(DeclError::from)
                    .or_else(|| spec.as_ref().err().cloned());
                match (spec, reason) {
                    (Ok(mut spec), None) => {
                        spec.mode = mode.unwrap_or(spec.mode);
                        (spec.uid, spec.gid) = (uid, gid);
                        if let Some(w) = &written {
                            self.owners.insert(id.clone(), w.clone());
                        }
                        self.add(common(id, path, Spec::File(spec)));
                    }
                    (_, Some(reason)) => self.block(id, origin, reason),
                    (Err(_), None) => unreachable!("an error always has a reason"),
                }
            }
            _ => {
                misplaced("content", d.content.is_some())?;
                let src = d.source.as_deref().ok_or("kind directory needs `source`")?;
                let dir = repo_join(parent_dir(&origin.file), src)?;
                let walk = match self.snap.walk(&dir) {
                    Ok(w) if !w.entries.is_empty() || !w.refused.is_empty() => w,
                    Ok(_) => {
                        return Err(format!(
                            "source directory {dir:?} is empty or missing in the repository"
                        )
                        .into())
                    }
                    Err(e) => return Err(e.to_string().into()),
                };
                for refused in &walk.refused {
                    let rel = refused.path[dir.len()..].trim_start_matches('/');
                    let fpath = path.join(rel)?;
                    let id = ResourceId::new(&target, "file", fpath.as_str());
                    self.refuse(id, refused.reason.clone());
                }
                for entry in &walk.entries {
                    let rel = entry.path[dir.len()..].trim_start_matches('/');
                    let fpath = path.join(rel)?;
                    let id = ResourceId::new(&target, "file", fpath.as_str());
                    if let Some(reason) = &hook_missing {
                        self.block(id, origin, reason.clone());
                        continue;
                    }
                    if entry.mode == EntryMode::Submodule {
                        self.notes.push(Problem {
                            file: entry.path.clone(),
                            line: 0,
                            message: format!(
                                "submodule at commit {} left out of {} (source.submodules: skip)",
                                entry.oid, origin
                            ),
                        });
                        continue;
                    }
                    match self.content_spec(entry) {
                        Ok(mut spec) => {
                            spec.mode = mode.unwrap_or(spec.mode);
                            (spec.uid, spec.gid) = (uid, gid);
                            if let Some(w) = &written {
                                self.owners.insert(id.clone(), w.clone());
                            }
                            self.add(common(id, fpath, Spec::File(spec)));
                        }
                        Err(reason) => self.refuse(id, reason),
                    }
                }
            }
        }
        Ok(())
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
        let unique = mirrored.windows(2).all(|w| w[0].0 < w[1].0);
        if unique && self.resources.is_empty() {
            self.resources = mirrored.into_iter().collect();
        } else {
            for (_, d) in mirrored {
                self.add(d);
            }
        }
        self.nested_conflicts();
        self.case_clashes();
        // An identity also declared by an invalid document is not applied:
        // which of the two was meant is for a human to say.
        for id in self.blocked.keys() {
            self.resources.remove(id);
        }
        self.notes.sort_by(|a, b| a.file.cmp(&b.file));
        let mut waiting = self.waiting;
        waiting.retain(|id| self.blocked.contains_key(id));
        Declared {
            resources: self.resources,
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

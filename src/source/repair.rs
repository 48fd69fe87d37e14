//! Mirror self-repair. A mirror can lose objects (a disk error, a
//! hand-deleted pack, an interrupted copy of the state dir); libgit2 never
//! notices, since a fetch only asks for what the refs lack, so every pass
//! would fail on the same missing blob and blame the declarations. After
//! each fetch every object the resolved commit needs is checked present
//! (all of them when a read found one missing or the object store changed
//! shape since the last check was recorded (stamp.rs), else only the
//! subtrees that changed since the last commit checked). When any
//! is missing, the repository is fetched again into a new mirror, checked,
//! and swapped in with one atomic rename; the old one is removed.

use std::collections::HashSet;
use std::path::Path;

use git2::{ObjectType, Oid, Repository};

use super::damage::DAMAGED;
use super::mirror::Mirror;
use super::mirror_dir::{init_temp, temp_name};
use super::snapshot::open_mirror;
use super::SourceError;

const GITLINK: i32 = 0o160000;

/// The first object `commit` needs that `repo` lacks, if any. `since` is a
/// commit checked complete before: subtrees it shares are not entered.
pub(super) fn first_missing(
    repo: &Repository,
    commit: Oid,
    since: Option<Oid>,
) -> Result<Option<String>, SourceError> {
    let odb = repo
        .odb()
        .map_err(|e| SourceError::git("opening the object database", e))?;
    let tree_of = |c: Oid| repo.find_commit(c).map(|c| c.tree_id());
    let tree = match tree_of(commit) {
        Ok(t) => t,
        Err(e) => return Ok(Some(format!("commit {commit}: {}", e.message()))),
    };
    let old = since.filter(|s| *s != commit).and_then(|s| tree_of(s).ok());
    if since == Some(commit) {
        return Ok(None);
    }
    let mut seen: HashSet<Oid> = HashSet::new();
    let mut stack = vec![(old, tree, String::new())];
    while let Some((old, id, path)) = stack.pop() {
        if old == Some(id) || !seen.insert(id) {
            continue;
        }
        let tree = match repo.find_tree(id) {
            Ok(t) => t,
            Err(e) => return Ok(Some(format!("tree {id} at {path:?}: {}", e.message()))),
        };
        let old = old.and_then(|o| repo.find_tree(o).ok());
        for item in tree.iter() {
            let name = String::from_utf8_lossy(item.name_bytes());
            let before = old
                .as_ref()
                .and_then(|o| o.get_name_bytes(item.name_bytes()).map(|e| e.id()));
            if before == Some(item.id()) {
                continue;
            }
            let at = if path.is_empty() {
                name.into_owned()
            } else {
                format!("{path}/{name}")
            };
            match item.kind() {
                Some(ObjectType::Tree) => stack.push((before, item.id(), at)),
                _ if item.filemode() == GITLINK => {}
                _ => {
                    if !odb.exists(item.id()) {
                        return Ok(Some(format!("object {} ({at}) is missing", item.id())));
                    }
                }
            }
        }
    }
    Ok(None)
}

impl Mirror {
    /// After a fetch resolved `commit`: what the mirror lacks of it, if
    /// anything.
    pub(super) fn check(
        &self,
        repo: &Repository,
        commit: Oid,
    ) -> Result<Option<String>, SourceError> {
        let marker = self.dir().join(DAMAGED);
        let damaged = marker.exists();
        // Found whole in this process, or by an earlier one whose record
        // still matches the objects: only what differs from it is checked.
        let since = match damaged {
            true => None,
            false => self
                .verified_lock()
                .or_else(|| super::stamp::verified(self.dir())),
        };
        let missing = first_missing(repo, commit, since)?;
        if damaged && missing.is_none() {
            let _ = std::fs::remove_file(&marker);
        }
        Ok(missing)
    }

    /// Fetches the repository whole into a new mirror, checks it, and
    /// swaps it in for this one, which lacks `missing`. Returns the commit
    /// the configured ref resolved to there.
    pub(super) fn repair(&self, missing: &str) -> Result<Oid, SourceError> {
        tracing::warn!(mirror = %self.dir().display(), %missing, "the mirror lost objects; fetching the repository again into a new mirror");
        let dir = self.dir();
        let mirrors = dir.parent().expect("a mirror lives in the mirrors dir");
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("mirror names are UTF-8")
            .to_string();
        let temp = init_temp(mirrors, &name, self.repo_url())?;
        let result = (|| {
            let fresh = open_mirror(&temp)?;
            let commit = self.fetch_into(&fresh)?;
            if let Some(still) = first_missing(&fresh, commit, None)? {
                return Err(SourceError::Git {
                    context: "repairing the mirror".into(),
                    message: format!("a new fetch still lacks objects: {still}"),
                });
            }
            keep_tend_refs(dir, &fresh);
            // Sizes are by object id: still true in the new mirror.
            let sizes = "tend-blob-sizes";
            let _ = std::fs::copy(dir.join(sizes), temp.join(sizes));
            drop(fresh);
            swap(&temp, dir)?;
            Ok(commit)
        })();
        // After the swap the temp path holds the old mirror.
        let _ = std::fs::remove_dir_all(&temp);
        let commit = result?;
        let _ = std::fs::remove_file(dir.join(DAMAGED));
        let note = format!(
            "at {}: {missing}; the repository was fetched again into a new mirror",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        );
        tracing::warn!(mirror = %dir.display(), "mirror repaired");
        *self.repaired_lock() = Some(note);
        Ok(commit)
    }
}

/// Copies the refs tend keeps under `refs/tend/` whose objects the new
/// mirror has (what other parts of tend recorded there survives a repair).
fn keep_tend_refs(old_dir: &Path, fresh: &Repository) {
    let Ok(old) = open_mirror(old_dir) else {
        return;
    };
    let Ok(refs) = old.references_glob("refs/tend/*") else {
        return;
    };
    for r in refs.flatten() {
        let (Some(name), Some(target)) = (r.name(), r.target()) else {
            continue;
        };
        let present = fresh.odb().is_ok_and(|odb| odb.exists(target));
        if present && fresh.find_reference(name).is_err() {
            let _ = fresh.reference(name, target, false, "tend: kept through a repair");
        }
    }
}

/// Puts the mirror at `new` in place of the one at `dir` in one atomic
/// exchange (readers see the old or the new one, never none); the old one
/// is then at `new`. Where the file system cannot exchange, the old one is
/// renamed aside first.
fn swap(new: &Path, dir: &Path) -> Result<(), SourceError> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, new, CWD, dir, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            let aside = temp_name(dir.parent().expect("a parent"), "old");
            std::fs::rename(dir, &aside).map_err(|e| SourceError::io(dir, e))?;
            std::fs::rename(new, dir).map_err(|e| SourceError::io(dir, e))?;
            std::fs::rename(&aside, new).map_err(|e| SourceError::io(new, e))
        }
        Err(e) => Err(SourceError::io(dir, e.into())),
    }
}

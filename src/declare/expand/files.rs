//! Path declarations (`kind: file`, `symlink` and `directory`, with
//! `path:`) into [`Desired`] resources with identity
//! `<target>/<kind>/<path>`: a file's content from `content:` or a
//! `source:` in the repository (decrypted with `decrypt: age`), a
//! directory's files from the tree under its `source:`.

use super::fields::{decrypts, parent_dir, parse_mode, repo_join, resolve_principal};
use super::Builder;
use crate::declare::yaml::{self, Decl};
use crate::declare::{DeclError, Problem};
use crate::model::{blob_id, Declaration, Desired, FileSpec, Origin, RelPath, ResourceId, Spec};
use crate::source::{refused_name, EntryMode};

/// An owner or group as written in the declaration.
fn written_principal(p: &yaml::IdOrName) -> String {
    match p {
        yaml::IdOrName::Id(n) => n.to_string(),
        yaml::IdOrName::Name(s) => s.clone(),
    }
}

impl Builder<'_> {
    /// The rest of a `file`, `symlink` or `directory` document, once its
    /// target and path are known.
    pub(super) fn file_like(
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
        // One for all the files a `directory` declares.
        let declaration = Declaration::written(origin, d.on_change.clone(), d.self_heal);
        let common = |id: ResourceId, path: RelPath, spec: Spec| {
            Desired::new(
                id,
                path.as_str(),
                spec,
                declaration.clone(),
                decrypt || d.sensitive.unwrap_or(false),
                decrypt,
            )
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
                            uid: None.into(),
                            gid: None.into(),
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
                        (spec.uid, spec.gid) = (uid.into(), gid.into());
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
                            (spec.uid, spec.gid) = (uid.into(), gid.into());
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
}

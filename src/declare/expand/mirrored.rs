//! Mirror mode: every entry under the source path becomes a `file`
//! resource at its relative path; repository symlinks are published as
//! links when they stay inside the mirrored tree, submodules are left out
//! with a note, and refused entries are Blocked at their own path.

use super::Builder;
use crate::declare::DeclError;
use crate::declare::Problem;
use std::sync::Arc;

use crate::model::{Declaration, Desired, RelPath, Spec};
use crate::source::{Entry, EntryMode, Refused};

impl Builder<'_> {
    /// Room for `n` more mirrored files.
    pub(in crate::declare) fn reserve_mirrored(&mut self, n: usize) {
        self.mirrored.reserve_exact(n);
    }

    pub(in crate::declare) fn mirror_entry(&mut self, entry: Entry) {
        let rel = entry
            .path
            .strip_prefix(self.opts.source_path)
            .unwrap_or(&entry.path)
            .trim_start_matches('/');
        // `source.decrypt`: NAME.age is published as NAME, decrypted.
        let sealed = self
            .opts
            .decrypt_suffix
            .filter(|_| matches!(entry.mode, EntryMode::File | EntryMode::Executable))
            .and_then(|suffix| rel.strip_suffix(suffix))
            .filter(|name| !name.is_empty() && !name.ends_with('/'));
        let decrypting = sealed.is_some();
        let rel = sealed.unwrap_or(rel);
        if self.opts.decrypt_suffix.is_none() && rel.ends_with(".age") {
            self.notes.push(Problem {
                file: entry.path.clone(),
                line: 0,
                message: "looks like an age file, and no source.decrypt covers it: it is published as it is, encrypted".into(),
            });
        }
        if self.mirror_target.is_none() {
            self.mirror_target = Some(self.pick_target(None, "file"));
        }
        let identified = match self.mirror_target.as_ref().expect("picked above") {
            Ok(target) => RelPath::identify(rel, target, "file").map_err(DeclError::from),
            // A bad path is reported before a missing target.
            Err(e) => Err(RelPath::parse(rel)
                .err()
                .map_or_else(|| e.clone(), DeclError::from)),
        };
        let (id, path) = match identified {
            Ok(found) => found,
            Err(e) => return self.problem(&entry.path, 1, e.to_string()),
        };
        let spec = match entry.mode {
            EntryMode::Submodule => {
                let note = format!(
                    "submodule at commit {} left out (source.submodules: skip)",
                    entry.oid
                );
                self.notes.push(Problem {
                    file: entry.path,
                    line: 0,
                    message: note,
                });
                return;
            }
            EntryMode::Symlink => self.mirrored_link(&entry),
            _ if decrypting => self
                .content_spec(&entry)
                .and_then(|spec| self.unsealed(&entry.path, spec))
                .map(Spec::File),
            _ => self.content_spec(&entry).map(Spec::File),
        };
        let declaration = self.mirrored_by(&entry.path, path.as_str());
        match spec {
            Ok(spec) => self.mirrored.push(Desired::new(
                id,
                path.as_str(),
                spec,
                declaration,
                decrypting,
                decrypting,
            )),
            Err(e) => self.refuse(id, e),
        }
    }

    /// What declares a mirrored file: itself, at its repository path
    /// (`file`), line 1. Its path is that but for the source path before
    /// it and a decrypted file's suffix after it; the mirror's files share
    /// one declaration for each such pair.
    fn mirrored_by(&mut self, file: &str, path: &str) -> Arc<Declaration> {
        // The file is `under` + `path` + `suffix`: the suffix a decrypted
        // file's name ends with, or none, and the source path before it.
        let decrypted = self.opts.decrypt_suffix.filter(|s| !s.is_empty());
        let parts = [decrypted, Some("")]
            .into_iter()
            .flatten()
            .find_map(|suffix| {
                let under = file.strip_suffix(suffix)?.strip_suffix(path)?;
                (under.is_empty() || under.ends_with('/')).then_some((under, suffix))
            });
        let Some((under, suffix)) = parts else {
            // Not its path in any form: named as it is.
            return Arc::new(Declaration {
                file: Some(file.into()),
                line: 1,
                ..Declaration::default()
            });
        };
        let known = self
            .mirror_declarations
            .iter()
            .find(|d| d.under.as_str() == under && d.suffix.as_str() == suffix);
        if let Some(d) = known {
            return d.clone();
        }
        let declaration = Arc::new(Declaration {
            under: under.into(),
            suffix: suffix.into(),
            line: 1,
            ..Declaration::default()
        });
        self.mirror_declarations.push(declaration.clone());
        declaration
    }

    /// A mirrored symlink: published as the link itself when it resolves
    /// inside the mirrored tree all the way (to a file, a directory, or
    /// nothing: a dangling link is kept dangling); otherwise replaced by
    /// the file it leads to elsewhere in the repository, as a `source:`
    /// would be. Never a link leading out of the tree it is published in.
    fn mirrored_link(&self, entry: &Entry) -> Result<Spec, DeclError> {
        match self.snap.link_inside(entry, self.opts.source_path) {
            Ok(Some(target)) => Ok(Spec::Symlink { target }),
            Ok(None) => self.content_spec(entry).map(Spec::File).map_err(|e| {
                format!("{e}; a symlink is published as a link only when it stays inside the mirrored path").into()
            }),
            Err(e) => Err(e.to_string().into()),
        }
    }

    /// An entry of the mirrored path that no checkout would make: Blocked
    /// under the identity its path would have, shown escaped.
    pub(in crate::declare) fn mirror_refused(&mut self, refused: Refused) {
        let rel = refused
            .path
            .strip_prefix(self.opts.source_path)
            .unwrap_or(&refused.path)
            .trim_start_matches('/');
        if self.mirror_target.is_none() {
            self.mirror_target = Some(self.pick_target(None, "file"));
        }
        let identified = match self.mirror_target.as_ref().expect("picked above") {
            Ok(target) => RelPath::identify(rel, target, "file").map_err(DeclError::from),
            Err(e) => Err(e.clone()),
        };
        match identified {
            Ok((id, _)) => self.refuse(id, refused.reason),
            Err(e) => self.problem(&refused.path, 1, format!("{}: {e}", refused.reason)),
        }
    }
}

//! etcd key declarations (`kind: key`, `key:`, and one of `value:`,
//! `source:` or `json:` with `ignore:`) into [`Desired`] resources with
//! identity `<target>/key/<key>`. A plain value is content named by its
//! blob, like a file's; a `json:` value is a structured object whose
//! declared fields alone are tend's.

use super::fields::{decrypts, parent_dir, repo_join};
use super::Builder;
use crate::declare::yaml::Decl;
use crate::declare::DeclError;
use crate::model::{
    blob_id, Declaration, Desired, FileSpec, Origin, RelPath, Spec, StructuredSpec,
    KEY_KIND as KIND, VALUE_MODE,
};
use crate::ownership;

impl Builder<'_> {
    pub(super) fn key(&mut self, d: Decl, origin: &Origin) -> Result<(), DeclError> {
        let misplaced = [
            ("path", d.path.is_some()),
            ("name", d.name.is_some()),
            ("spec", d.spec.is_some()),
            ("content", d.content.is_some()),
            ("mode", d.mode.is_some()),
            ("owner", d.owner.is_some()),
            ("group", d.group.is_some()),
            ("target_path", d.target_path.is_some()),
        ];
        if let Some((field, _)) = misplaced.iter().find(|(_, present)| *present) {
            return Err(format!(
                "`{field}` does not apply to kind key; a key has `key` and one of `value`, `source` or `json` (with `ignore`)"
            ).into());
        }
        let target = self.pick_target(d.target.as_deref(), KIND)?;
        let raw = d.key.as_deref().ok_or("kind key needs `key`")?;
        let path = RelPath::parse(raw).map_err(|e| format!("key {raw:?}: {e}"))?;
        if path.as_str() != raw {
            // etcd keys are bytes: `a//b` is not `a/b`, so only the written
            // form is taken, never a normalised one.
            return Err(format!(
                "key {raw:?} must be written as {:?} (relative to the prefix, no empty, `.` or `..` parts)",
                path.as_str()
            ).into());
        }
        let id = crate::model::ResourceId::new(&target, KIND, path.as_str());
        let hook_missing = d
            .on_change
            .as_ref()
            .filter(|h| !self.opts.as_written && !self.opts.hooks.contains(h))
            .map(|h| format!("hook {h:?} is not defined in the local config"));
        let decrypt = decrypts(&d)?;
        let spec = match hook_missing {
            Some(reason) => Err(reason.into()),
            None => self.key_spec(&d, origin, path.as_str(), decrypt),
        };
        match spec {
            Ok(spec) => self.add(Desired::new(
                id,
                path.as_str(),
                spec,
                Declaration::written(origin, d.on_change, d.self_heal),
                decrypt || d.sensitive.unwrap_or(false),
                decrypt,
            )),
            Err(reason) => self.block(id, origin, reason),
        }
        Ok(())
    }

    /// The value a key declares.
    fn key_spec(
        &mut self,
        d: &Decl,
        origin: &Origin,
        key: &str,
        decrypt: bool,
    ) -> Result<Spec, DeclError> {
        if d.ignore.is_some() && d.json.is_none() {
            return Err("`ignore` needs a `json` value".into());
        }
        match (&d.value, &d.source, &d.json) {
            (Some(text), None, None) => {
                let bytes = text.as_bytes().to_vec();
                let blob = blob_id(&bytes);
                let size = bytes.len() as u64;
                self.inline.insert(blob, bytes);
                Ok(Spec::File(value_spec(blob, size)))
            }
            (None, Some(src), None) if decrypt => {
                let file = repo_join(parent_dir(&origin.file), src)?;
                let sealed = self.key_source(&origin.file, src)?;
                self.unsealed(&file, sealed).map(Spec::File)
            }
            (None, Some(src), None) => self.key_source(&origin.file, src).map(Spec::File),
            (None, None, Some(json)) => {
                if !json.is_object() {
                    return Err("`json` must be a mapping".into());
                }
                let ignore = d.ignore.clone().unwrap_or_default();
                for pointer in &ignore {
                    ownership::check_ignore(pointer)?;
                }
                Ok(Spec::Structured(Box::new(StructuredSpec {
                    kind: KIND.into(),
                    name: key.into(),
                    spec: ownership::strip_ignored(json, &ignore),
                    ignore,
                })))
            }
            (None, None, None) => Err("kind key needs one of `value`, `source` or `json`".into()),
            _ => Err("give one of `value`, `source` or `json`, not several".into()),
        }
    }

    /// A key's value read from a repository file (`source:`). The bytes
    /// put are the blob's as stored: a source that must be transformed
    /// first (decrypted) is resolved here, into the blob to put.
    fn key_source(&self, decl_file: &str, src: &str) -> Result<FileSpec, DeclError> {
        let file = self.source_file(decl_file, src)?;
        Ok(value_spec(file.blob, file.size))
    }
}

/// A value as content: a key has no mode or owner, so they are fixed.
fn value_spec(blob: git2::Oid, size: u64) -> FileSpec {
    FileSpec {
        blob,
        size,
        mode: VALUE_MODE,
        uid: None.into(),
        gid: None.into(),
        secret: false,
    }
}

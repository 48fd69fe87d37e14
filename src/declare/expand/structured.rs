//! Structured declarations (`kind: <plugin kind>`, `name:`, `spec:`,
//! `ignore:`) into [`Desired`] resources with identity
//! `<target>/<kind>/<name>`.

use super::Builder;
use crate::declare::DeclError;
use crate::declare::{valid_kind, yaml::Decl};
use crate::model::{Declaration, Desired, Origin, RelPath, ResourceId, Spec, StructuredSpec};
use crate::ownership;

/// Longest name accepted; plugins' stores often cap names near this.
const MAX_NAME: usize = 253;

/// A name is one path segment of the identity: no `/`, no control
/// characters, not `.` or `..`.
fn check_name(name: &str) -> Result<(), DeclError> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("`name` must have 1 to {MAX_NAME} bytes").into());
    }
    if name == "." || name == ".." || name.contains('/') || name.chars().any(char::is_control) {
        return Err(format!(
            "name {name:?} may not be `.` or `..` or contain `/` or control characters"
        )
        .into());
    }
    Ok(())
}

impl Builder<'_> {
    pub(super) fn structured(&mut self, d: Decl, origin: &Origin) -> Result<(), DeclError> {
        let kind = d.kind.clone();
        // A misspelt built-in kind (`filez`) is named as such, not told
        // what fields a plugin's objects take.
        let served = self
            .opts
            .targets
            .iter()
            .any(|t| t.kinds_unknown.is_some() || t.kinds.contains(&kind));
        if !served {
            return Err(format!(
                "unknown kind {kind:?}: no configured target serves it (built in: file, directory, symlink, key; other kinds come from exec targets' plugins)"
            ).into());
        }
        let misplaced = [
            ("path", d.path.is_some()),
            ("source", d.source.is_some()),
            ("content", d.content.is_some()),
            ("mode", d.mode.is_some()),
            ("owner", d.owner.is_some()),
            ("group", d.group.is_some()),
            ("target_path", d.target_path.is_some()),
            // A plugin's secret is a value: `{decrypt: age, source: FILE}`.
            ("decrypt", d.decrypt.is_some()),
            ("key", d.key.is_some()),
            ("value", d.value.is_some()),
            ("json", d.json.is_some()),
        ];
        if let Some((field, _)) = misplaced.iter().find(|(_, present)| *present) {
            return Err(format!(
                "`{field}` does not apply to kind {kind}; an object of a plugin kind has `name`, `spec` and `ignore`"
            ).into());
        }
        if !valid_kind(&kind) {
            return Err(format!(
                "unknown kind {kind:?} (built in: file, directory, symlink; plugin kinds use letters, digits, `.`, `_` and `-`)"
            ).into());
        }
        let target = self.pick_target(d.target.as_deref(), &kind)?;
        let name = d.name.ok_or_else(|| format!("kind {kind} needs `name`"))?;
        check_name(&name)?;
        let spec = d.spec.unwrap_or_else(|| serde_json::json!({}));
        if !spec.is_object() {
            return Err("`spec` must be a mapping".into());
        }
        let ignore = d.ignore.unwrap_or_default();
        for pointer in &ignore {
            ownership::check_ignore(pointer)?;
        }
        let id = ResourceId::new(&target, &kind, &name);
        let path = RelPath::parse(&format!("{kind}/{name}"))?;
        if let Some(h) = d
            .on_change
            .as_ref()
            .filter(|h| !self.opts.as_written && !self.opts.hooks.contains(h))
        {
            let reason = format!("hook {h:?} is not defined in the local config");
            self.block(id, origin, reason);
            return Ok(());
        }
        let (spec, decrypted) = match self.unsealed_values(&origin.file, spec) {
            Ok(found) => found,
            Err(reason) => {
                self.block(id, origin, reason);
                return Ok(());
            }
        };
        let spec = ownership::strip_ignored(&spec, &ignore);
        self.add(Desired::new(
            id,
            path.as_str(),
            Spec::Structured(Box::new(StructuredSpec {
                kind,
                name,
                spec,
                ignore,
            })),
            Declaration::written(origin, d.on_change, d.self_heal),
            decrypted || d.sensitive.unwrap_or(false),
            decrypted,
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn names_are_one_segment() {
        assert!(check_name("web").is_ok());
        assert!(check_name("web.v2:blue").is_ok());
        for bad in ["", ".", "..", "a/b", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"x".repeat(254)).is_err());
    }
}

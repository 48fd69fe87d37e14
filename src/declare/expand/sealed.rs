//! `decrypt: age` (SPEC §13): a source read as an age file. On a host the
//! plaintext is decrypted into memory and the resource declared with its
//! blob id; read as written (no host, no key) the ciphertext is checked
//! for its form and its SSH recipients instead, and stands for the secret.

use super::fields::{parent_dir, repo_join};
use super::Builder;
use crate::declare::DeclError;
use crate::declare::Problem;
use crate::model::{blob_id, FileSpec};
use crate::secrets;

impl Builder<'_> {
    /// The spec of the age file at repository path `file`, whose own
    /// (ciphertext) spec is `sealed`: that of its plaintext on a host.
    pub(super) fn unsealed(&mut self, file: &str, sealed: FileSpec) -> Result<FileSpec, DeclError> {
        let bytes = self.snap.read(sealed.blob)?;
        if self.opts.as_written {
            secrets::check_format(file, &bytes)?;
            let missing = secrets::check_recipients(file, &bytes, self.opts.recipients);
            return match missing.is_empty() {
                true => Ok(sealed),
                false => Err(missing.join("; ").into()),
            };
        }
        let keyring = self.opts.keyring.unwrap_or(&secrets::NO_KEYS);
        let plain = secrets::decrypt(keyring, file, &bytes).map_err(|e| {
            self.reread |= e.rereads();
            match e.transient() {
                true => DeclError::Waits(e.to_string()),
                false => DeclError::Invalid(e.to_string()),
            }
        })?;
        // This host reads it; another one may not.
        for message in secrets::check_recipients(file, &bytes, self.opts.recipients) {
            self.notes.push(Problem {
                file: file.to_string(),
                line: 0,
                message,
            });
        }
        let blob = blob_id(plain.as_bytes());
        let size = plain.as_bytes().len() as u64;
        self.secrets.insert(blob, plain);
        Ok(FileSpec {
            blob,
            size,
            secret: true,
            ..sealed
        })
    }
}

impl Builder<'_> {
    /// A plugin object's `spec` with each value written
    /// `{decrypt: age, source: FILE}` replaced by FILE's plaintext as text
    /// (one final newline dropped, as `echo` adds); read as written, by
    /// `age:` and the age file's blob id. Also says whether any was found.
    pub(super) fn unsealed_values(
        &mut self,
        decl_file: &str,
        mut spec: serde_json::Value,
    ) -> Result<(serde_json::Value, bool), DeclError> {
        let mut found = false;
        self.unseal_in(decl_file, &mut spec, &mut found)?;
        Ok((spec, found))
    }

    fn unseal_in(
        &mut self,
        decl_file: &str,
        value: &mut serde_json::Value,
        found: &mut bool,
    ) -> Result<(), DeclError> {
        use serde_json::Value;
        let sealed_source = match &*value {
            Value::Object(map) if map.len() == 2 && map.get("decrypt") == Some(&"age".into()) => {
                map.get("source")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            }
            _ => None,
        };
        if let Some(src) = sealed_source {
            let file = repo_join(parent_dir(decl_file), &src)?;
            let sealed = self.source_file(decl_file, &src)?;
            *found = true;
            if self.opts.as_written {
                let blob = sealed.blob;
                self.unsealed(&file, sealed)?;
                *value = Value::String(format!("age:{blob}"));
                return Ok(());
            }
            let plain = self.unsealed(&file, sealed)?;
            let bytes = self
                .secrets
                .get(&plain.blob)
                .map(|p| p.as_bytes())
                .unwrap_or_default();
            let text = std::str::from_utf8(bytes)
                .map_err(|_| format!("{file}: a decrypted value must be UTF-8 text"))?;
            *value = Value::String(text.strip_suffix('\n').unwrap_or(text).to_string());
            return Ok(());
        }
        match value {
            Value::Object(map) => map
                .values_mut()
                .try_for_each(|v| self.unseal_in(decl_file, v, found)),
            Value::Array(items) => items
                .iter_mut()
                .try_for_each(|v| self.unseal_in(decl_file, v, found)),
            _ => Ok(()),
        }
    }
}

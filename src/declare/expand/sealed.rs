//! `decrypt: age` (SPEC §13): a source read as an age file. On a host the
//! plaintext is decrypted into memory and the resource declared with its
//! blob id; read as written (no host, no key) the ciphertext is checked
//! for its form and its SSH recipients instead, and stands for the secret.

use super::Builder;
use crate::declare::Problem;
use crate::model::{blob_id, FileSpec};
use crate::secrets;

impl Builder<'_> {
    /// The spec of the age file at repository path `file`, whose own
    /// (ciphertext) spec is `sealed`: that of its plaintext on a host.
    pub(super) fn unsealed(&mut self, file: &str, sealed: FileSpec) -> Result<FileSpec, String> {
        let bytes = self.snap.read(sealed.blob).map_err(|e| e.to_string())?;
        if self.opts.as_written {
            secrets::check_format(file, &bytes).map_err(|e| e.to_string())?;
            let missing = secrets::check_recipients(file, &bytes, self.opts.recipients);
            return match missing.is_empty() {
                true => Ok(sealed),
                false => Err(missing.join("; ")),
            };
        }
        let keyring = self.opts.keyring.unwrap_or(&secrets::NO_KEYS);
        let plain = secrets::decrypt(keyring, file, &bytes).map_err(|e| e.to_string())?;
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

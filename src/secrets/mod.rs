//! Secrets kept in the repository as age files (SPEC §13): the identities
//! that open them, decryption into memory that is wiped when dropped, and
//! the checks that need no private key (`validate`, `diff --against`).
//! Every adapter that takes a `decrypt: age` value decrypts through here.

mod identity;
mod stanzas;

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use zeroize::Zeroizing;

pub use identity::{Keyring, Unread, NO_KEYS};
pub use stanzas::{check_recipients, parse_recipient, Recipient, RecipientError};

/// `secrets.age` as settled from flags, environment and the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgeSettings {
    /// Identity files: age X25519 identities or SSH private keys.
    pub identities: Vec<PathBuf>,
    /// Public keys the sources must be encrypted to, for checks without a
    /// private key.
    pub recipients: Vec<String>,
}

/// Decrypted bytes. Shared, not copied, and wiped when the last holder
/// drops them; printed as their length only.
#[derive(Clone)]
pub struct Plaintext(Arc<Zeroizing<Vec<u8>>>);

impl Plaintext {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Plaintext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plaintext({} bytes)", self.0.len())
    }
}

impl PartialEq for Plaintext {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Plaintext {}

/// Why an age file was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The file itself is wrong: not an age file, truncated, altered, or
    /// sealed with a passphrase.
    #[error("{file} is not a usable age file: {why}")]
    Damaged { file: String, why: String },
    /// No configured identity opens it; each identity file's answer, and
    /// the worst of them when one could not be read at all.
    #[error("{file}: no identity decrypts it (tried {}){}", tried_text(.tried), unread_text(*.unread))]
    NoIdentity {
        file: String,
        tried: Vec<String>,
        unread: Unread,
    },
}

impl SecretError {
    /// An identity file could not be read: reading the keys again (the
    /// next pass does) may open it without a new revision.
    pub fn rereads(&self) -> bool {
        matches!(self, SecretError::NoIdentity { unread, .. } if *unread != Unread::No)
    }

    /// The failure may pass by itself (an identity file there but
    /// unreadable now): retried with backoff, not held for a human.
    pub fn transient(&self) -> bool {
        matches!(
            self,
            SecretError::NoIdentity {
                unread: Unread::Unreadable,
                ..
            }
        )
    }
}

fn unread_text(unread: Unread) -> &'static str {
    match unread {
        Unread::Unreadable => "; retried, as an identity file that cannot be read may come back",
        Unread::Missing | Unread::No => "",
    }
}

fn tried_text(tried: &[String]) -> String {
    match tried.is_empty() {
        true => "none: configure secrets.age.identities, --age-identity or TEND_AGE_IDENTITY"
            .to_string(),
        false => tried.join("; "),
    }
}

/// An age file's header, read without any key: binary or armored.
fn open<'a>(file: &str, bytes: &'a [u8]) -> Result<age::Decryptor<impl Read + 'a>, SecretError> {
    let damaged = |why: String| SecretError::Damaged {
        file: file.to_string(),
        why,
    };
    let reader = age::armor::ArmoredReader::new(bytes);
    let decryptor = age::Decryptor::new(reader).map_err(|e| damaged(describe(&e)))?;
    if decryptor.is_scrypt() {
        return Err(damaged(
            "it is sealed with a passphrase; tend opens age files with identity files only".into(),
        ));
    }
    Ok(decryptor)
}

/// Words of tend's own for the age crate's errors, which it renders
/// through its translations.
fn describe(e: &age::DecryptError) -> String {
    use age::DecryptError as E;
    match e {
        E::DecryptionFailed => "its content fails authentication (truncated or altered)".into(),
        E::InvalidHeader => "its header is malformed".into(),
        E::InvalidMac => "its header fails authentication (altered)".into(),
        E::Io(io) => format!("it cannot be read to its end: {io}"),
        E::UnknownFormat => "it is not an age file (no age header)".into(),
        E::KeyDecryptionFailed => "the identity is passphrase-protected".into(),
        E::NoMatchingKeys => "no matching key".into(),
        E::ExcessiveWork { .. } => "its passphrase work factor is too high".into(),
        other => format!("{other}"),
    }
}

/// Checks that `bytes` is a well-formed age file, without decrypting it.
pub fn check_format(file: &str, bytes: &[u8]) -> Result<(), SecretError> {
    open(file, bytes).map(|_| ())
}

/// Decrypts `bytes` (the age file at repository path `file`) whole into
/// memory, trying each identity file in turn: nothing is handed on until
/// the last chunk has been authenticated.
pub fn decrypt(keyring: &Keyring, file: &str, bytes: &[u8]) -> Result<Plaintext, SecretError> {
    open(file, bytes)?;
    let mut tried = Vec::new();
    let mut unread = Unread::No;
    for key in keyring.files() {
        let identities = match key.identities() {
            Ok(ids) => ids,
            Err(why) => {
                tried.push(format!("{}: {why}", key.path().display()));
                unread = unread.max(key.unread());
                continue;
            }
        };
        let decryptor = open(file, bytes)?;
        let mut reader = match decryptor.decrypt(identities.iter().map(|i| i.as_ref() as _)) {
            Ok(reader) => reader,
            Err(e) => {
                tried.push(format!("{}: {}", key.path().display(), describe(&e)));
                continue;
            }
        };
        let mut out = Zeroizing::new(Vec::with_capacity(bytes.len()));
        return match reader.read_to_end(&mut out) {
            Ok(_) => Ok(Plaintext(Arc::new(out))),
            Err(e) => Err(SecretError::Damaged {
                file: file.to_string(),
                why: format!("its content fails authentication (truncated or altered): {e}"),
            }),
        };
    }
    Err(SecretError::NoIdentity {
        file: file.to_string(),
        tried,
        unread,
    })
}

#[cfg(test)]
mod tests;

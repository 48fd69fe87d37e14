//! Whether a revision's signature comes from a trusted key (SPEC §9): the
//! trust anchors (git's `allowed_signers` for SSH signatures, an armored
//! OpenPGP keyring), what a refusal says, and the check of one signed
//! object. Reading the signature out of a commit or tag is in `signed.rs`.

mod allowed_signers;
mod openpgp;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use allowed_signers::{AllowedSigner, AllowedSigners};
pub use openpgp::Keyring;

/// What must be signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Require {
    /// The revision's commit.
    #[default]
    Commit,
    /// The ref is an annotated tag, and the tag is signed.
    Tag,
}

/// A `require` that names neither.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("require {0:?}: use commit or tag")]
pub struct UnknownRequire(pub String);

impl Require {
    pub fn parse(s: &str) -> Result<Require, UnknownRequire> {
        match s {
            "commit" => Ok(Require::Commit),
            "tag" => Ok(Require::Tag),
            other => Err(UnknownRequire(other.to_string())),
        }
    }
}

/// `source.verify` as configured: paths, read by [`TrustAnchors::load`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifySpec {
    pub allowed_signers: Option<PathBuf>,
    pub keyring: Option<PathBuf>,
    pub require: Require,
}

/// Why a revision is refused; the names are those of the metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    Unsigned,
    Untrusted,
    BadSignature,
    Expired,
    Revoked,
    Rewind,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::Unsigned,
        Reason::Untrusted,
        Reason::BadSignature,
        Reason::Expired,
        Reason::Revoked,
        Reason::Rewind,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unsigned => "unsigned",
            Reason::Untrusted => "untrusted",
            Reason::BadSignature => "bad_signature",
            Reason::Expired => "expired",
            Reason::Revoked => "revoked",
            Reason::Rewind => "rewind",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A revision that may not be applied, and why in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub detail: String,
}

impl Refusal {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail)
    }
}

/// Who signed: the key's kind and fingerprint, and for SSH the principals
/// the allowed_signers entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub kind: &'static str,
    pub fingerprint: String,
    pub principal: Option<String>,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.fingerprint)?;
        if let Some(p) = &self.principal {
            write!(f, " ({p})")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{}{}: {message}", .path.display(), .line.map(|l| format!(":{l}")).unwrap_or_default())]
    File {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{}:{line}: {source}", .path.display())]
    Line {
        path: PathBuf,
        line: usize,
        source: allowed_signers::LineError,
    },
}

/// A signature and the bytes it signs, as read from a commit or tag.
pub struct Signed {
    pub signature: String,
    pub payload: Vec<u8>,
    /// The committer's (or tagger's) time: keys are judged valid then.
    pub at: SystemTime,
}

/// The keys a signature may come from.
#[derive(Debug)]
pub struct TrustAnchors {
    pub ssh: Option<AllowedSigners>,
    pub openpgp: Option<Keyring>,
    pub require: Require,
}

const SSH_ARMOR: &str = "-----BEGIN SSH SIGNATURE-----";
const PGP_ARMOR: &str = "-----BEGIN PGP SIGNATURE-----";
/// git signs in this namespace; a signature made for another is refused.
const NAMESPACE: &str = "git";

impl TrustAnchors {
    /// Reads the configured files; `None` when nothing is to be verified.
    pub fn load(spec: &VerifySpec) -> Result<Option<TrustAnchors>, VerifyError> {
        if spec.allowed_signers.is_none() && spec.keyring.is_none() {
            return Ok(None);
        }
        Ok(Some(TrustAnchors {
            ssh: spec
                .allowed_signers
                .as_deref()
                .map(AllowedSigners::load)
                .transpose()?,
            openpgp: spec.keyring.as_deref().map(Keyring::load).transpose()?,
            require: spec.require,
        }))
    }

    /// Checks one signature; `what` names the object in messages.
    pub fn check(&self, signed: &Signed, what: &str) -> Result<Signer, Refusal> {
        let sig = signed.signature.trim_start();
        if sig.starts_with(SSH_ARMOR) {
            return match &self.ssh {
                Some(allowed) => check_ssh(allowed, signed, what),
                None => Err(Refusal::new(
                    Reason::Untrusted,
                    format!(
                        "{what} has an SSH signature, and no allowed_signers file is configured"
                    ),
                )),
            };
        }
        if sig.starts_with(PGP_ARMOR) {
            return match &self.openpgp {
                Some(keyring) => keyring
                    .check(sig, &signed.payload, signed.at)
                    .map_err(|r| Refusal::new(r.reason, format!("{what}: {}", r.detail))),
                None => Err(Refusal::new(
                    Reason::Untrusted,
                    format!("{what} has an OpenPGP signature, and no keyring is configured"),
                )),
            };
        }
        Err(Refusal::new(
            Reason::Untrusted,
            format!("{what} has a signature of a kind tend does not verify (only SSH and OpenPGP)"),
        ))
    }
}

fn check_ssh(allowed: &AllowedSigners, signed: &Signed, what: &str) -> Result<Signer, Refusal> {
    let sig = ::ssh_key::SshSig::from_pem(signed.signature.trim()).map_err(|e| {
        Refusal::new(
            Reason::BadSignature,
            format!("{what}: unreadable SSH signature: {e}"),
        )
    })?;
    let key = sig.public_key().clone();
    let fingerprint = ::ssh_key::PublicKey::from(key.clone())
        .fingerprint(::ssh_key::HashAlg::Sha256)
        .to_string();
    let entries: Vec<&AllowedSigner> = allowed
        .entries_for(&key)
        .filter(|e| e.allows_namespace(NAMESPACE))
        .collect();
    if entries.is_empty() {
        return Err(Refusal::new(
            Reason::Untrusted,
            format!(
                "{what} is signed by SSH key {fingerprint}, which {} does not allow for namespace \"git\"",
                allowed.path.display()
            ),
        ));
    }
    if sig.namespace() != NAMESPACE {
        return Err(Refusal::new(
            Reason::BadSignature,
            format!(
                "{what}: signature made for namespace {:?}, not \"git\"",
                sig.namespace()
            ),
        ));
    }
    let public = ::ssh_key::PublicKey::from(key.clone());
    if let Err(e) = public.verify(NAMESPACE, &signed.payload, &sig) {
        return Err(Refusal::new(
            Reason::BadSignature,
            format!("{what}: the signature by SSH key {fingerprint} does not match the signed content ({e})"),
        ));
    }
    match entries.iter().find(|e| e.valid_at(signed.at)) {
        Some(entry) => Ok(Signer {
            kind: "ssh",
            fingerprint,
            principal: Some(entry.principals.clone()),
        }),
        None => Err(Refusal::new(
            Reason::Expired,
            format!(
                "{what} is signed by SSH key {fingerprint}, which {}:{} allows only outside the signing time {}",
                allowed.path.display(),
                entries[0].line,
                humantime::format_rfc3339_seconds(signed.at)
            ),
        )),
    }
}

/// Reads a trust file whole, refusing one larger than `max`.
fn read_small(path: &Path, max: u64) -> Result<String, VerifyError> {
    let err = |message: String| VerifyError::File {
        path: path.to_path_buf(),
        line: None,
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(err(format!("larger than {max} bytes")));
    }
    String::from_utf8(bytes).map_err(|e| {
        err(format!(
            "not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

//! OpenPGP: an armored keyring of trusted public keys (what `gpg --export
//! --armor` writes, several blocks allowed) and the check of a detached
//! signature, as git makes them with gpg, against it: the key's window
//! (creation, expiry) and its revocations.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::{RevocationCode, Signature, SignatureType};
use pgp::types::{KeyDetails, PublicKeyTrait};

use super::{Reason, Refusal, Signer, VerifyError};

const BLOCK_START: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
const MAX_FILE: u64 = 16 << 20;

pub struct Keyring {
    pub path: PathBuf,
    keys: Vec<SignedPublicKey>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("path", &self.path)
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// A signing key of the keyring: the primary key or one of its subkeys,
/// with the window its self-signatures give it.
struct Candidate<'a> {
    key: &'a dyn Verify,
    fingerprint: String,
    created: SystemTime,
    expires: Option<SystemTime>,
    revoked: Option<Revoked>,
}

/// A revocation on a key (its own, or its primary key's). A key superseded
/// or retired stops signing at the revocation's date, and what it signed
/// before still stands, as GnuPG has it; any other reason (compromised, or
/// none given) may mean someone else holds the key, so nothing it ever
/// signed is trusted.
#[derive(Clone)]
struct Revoked {
    at: SystemTime,
    soft: bool,
    why: String,
}

impl Revoked {
    /// The revocation of `sig` (of type `typ`), if it is one. The keyring's
    /// load checked that each revocation is made by the key's primary key.
    fn of(sig: &Signature, typ: SignatureType) -> Option<Revoked> {
        if sig.typ() != Some(typ) {
            return None;
        }
        let code = sig.revocation_reason_code().copied();
        let soft = matches!(
            code,
            Some(RevocationCode::KeySuperseded | RevocationCode::KeyRetired)
        );
        let mut why = match code {
            None | Some(RevocationCode::NoReason) => "no reason given".to_string(),
            Some(RevocationCode::KeySuperseded) => "superseded".to_string(),
            Some(RevocationCode::KeyRetired) => "retired".to_string(),
            Some(RevocationCode::KeyCompromised) => "compromised".to_string(),
            Some(other) => format!("reason code {}", u8::from(other)),
        };
        if let Some(text) = sig.revocation_reason_string().filter(|t| !t.is_empty()) {
            why = format!("{why}: {}", crate::render::quote::name(text));
        }
        Some(Revoked {
            at: sig
                .created()
                .map(|t| time_of(t.timestamp()))
                .unwrap_or(UNIX_EPOCH),
            soft,
            why,
        })
    }

    /// Of two revocations, the one that refuses more: a hard one over a
    /// soft one, else the earlier.
    fn stronger(a: Option<Revoked>, b: Option<Revoked>) -> Option<Revoked> {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some(a), Some(b)) => Some(match (a.soft, b.soft) {
                (false, true) => a,
                (true, false) => b,
                _ if a.at <= b.at => a,
                _ => b,
            }),
        }
    }

    fn voids(&self, signed_at: SystemTime) -> bool {
        !self.soft || signed_at >= self.at
    }
}

/// What the check needs of a primary key or subkey.
trait Verify {
    fn verify_detached(&self, sig: &DetachedSignature, data: &[u8]) -> pgp::errors::Result<()>;
}

impl<T: PublicKeyTrait + pgp::ser::Serialize> Verify for T {
    fn verify_detached(&self, sig: &DetachedSignature, data: &[u8]) -> pgp::errors::Result<()> {
        sig.verify(self, data)
    }
}

fn time_of(unix_seconds: i64) -> SystemTime {
    match u64::try_from(unix_seconds) {
        Ok(s) => UNIX_EPOCH + Duration::from_secs(s),
        Err(_) => UNIX_EPOCH,
    }
}

impl Keyring {
    pub fn load(path: &Path) -> Result<Keyring, VerifyError> {
        let text = super::read_small(path, MAX_FILE)?;
        let bad = |message: String| VerifyError::File {
            path: path.to_path_buf(),
            line: None,
            message,
        };
        let mut keys = Vec::new();
        let starts: Vec<usize> = text.match_indices(BLOCK_START).map(|(i, _)| i).collect();
        if starts.is_empty() {
            return Err(bad(format!(
                "no armored public key ({BLOCK_START}); export one with `gpg --export --armor KEYID`"
            )));
        }
        for (n, start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(text.len());
            let line = text[..*start].lines().count() + 1;
            let block = &text[*start..end];
            let parsed = SignedPublicKey::from_armor_many(block.as_bytes())
                .map_err(|e| bad(format!("line {line}: {e}")))?;
            for key in parsed.0 {
                let key = key.map_err(|e| bad(format!("line {line}: {e}")))?;
                key.verify()
                    .map_err(|e| bad(format!("line {line}: key self-signature: {e}")))?;
                keys.push(key);
            }
        }
        Ok(Keyring {
            path: path.to_path_buf(),
            keys,
        })
    }

    fn candidates(&self) -> Vec<Candidate<'_>> {
        let mut out = Vec::new();
        for key in &self.keys {
            let created = time_of(key.primary_key.created_at().timestamp());
            let expires = key
                .details
                .key_expiration_time()
                .filter(|d| d.num_seconds() > 0)
                .map(|d| created + Duration::from_secs(d.num_seconds() as u64));
            let primary_revoked = key
                .details
                .revocation_signatures
                .iter()
                .map(|s| Revoked::of(s, SignatureType::KeyRevocation))
                .fold(None, Revoked::stronger);
            out.push(Candidate {
                key: &key.primary_key,
                fingerprint: format!("{:X}", key.primary_key.fingerprint()),
                created,
                expires,
                revoked: primary_revoked.clone(),
            });
            for sub in &key.public_subkeys {
                let created = time_of(sub.key.created_at().timestamp());
                let expires = sub
                    .signatures
                    .iter()
                    .filter_map(|s| s.key_expiration_time())
                    .max()
                    .filter(|d| d.num_seconds() > 0)
                    .map(|d| created + Duration::from_secs(d.num_seconds() as u64));
                // Revoking the primary key revokes its subkeys with it.
                let revoked = sub
                    .signatures
                    .iter()
                    .map(|s| Revoked::of(s, SignatureType::SubkeyRevocation))
                    .fold(primary_revoked.clone(), Revoked::stronger);
                out.push(Candidate {
                    key: &sub.key,
                    fingerprint: format!("{:X}", sub.key.fingerprint()),
                    created,
                    expires,
                    revoked,
                });
            }
        }
        out
    }

    /// Checks an armored detached signature over `payload`, made at `at`.
    pub fn check(&self, armored: &str, payload: &[u8], at: SystemTime) -> Result<Signer, Refusal> {
        let sig = match DetachedSignature::from_string(armored) {
            Ok((sig, _)) => sig,
            Err(e) => {
                return Err(Refusal::new(
                    Reason::BadSignature,
                    format!("unreadable OpenPGP signature: {e}"),
                ))
            }
        };
        let issuers: Vec<String> = sig
            .signature
            .issuer_fingerprint()
            .iter()
            .map(|f| format!("{f:X}"))
            .chain(
                sig.signature
                    .issuer()
                    .iter()
                    .map(|k| hex::encode_upper(k.as_ref())),
            )
            .collect();
        let named = |fp: &str| issuers.iter().any(|i| fp.ends_with(i.as_str()));
        // A revocation is judged at the later of the signature's own time
        // and the committer's: a signer may set either.
        let signed_at = sig
            .signature
            .created()
            .map(|t| time_of(t.timestamp()))
            .map_or(at, |t| t.max(at));
        let (mut outside, mut valid) = (None, None);
        // Every copy of the key in the keyring is looked at: a revocation
        // in any of them holds.
        for c in self
            .candidates()
            .into_iter()
            .filter(|c| named(&c.fingerprint))
        {
            if c.key.verify_detached(&sig, payload).is_err() {
                return Err(Refusal::new(
                    Reason::BadSignature,
                    format!(
                        "the signature by OpenPGP key {} does not match the signed content",
                        c.fingerprint
                    ),
                ));
            }
            if let Some(r) = c.revoked.as_ref().filter(|r| r.voids(signed_at)) {
                return Err(Refusal::new(
                    Reason::Revoked,
                    format!(
                        "OpenPGP key {} was revoked on {} ({})",
                        c.fingerprint,
                        humantime::format_rfc3339_seconds(r.at),
                        r.why
                    ),
                ));
            }
            if at < c.created || c.expires.is_some_and(|e| at >= e) {
                outside = Some(c.fingerprint.clone());
            } else {
                valid.get_or_insert(c.fingerprint);
            }
        }
        if let Some(fingerprint) = valid {
            return Ok(Signer {
                kind: "openpgp",
                fingerprint,
                principal: None,
            });
        }
        match outside {
            Some(fp) => Err(Refusal::new(
                Reason::Expired,
                format!("OpenPGP key {fp} was not valid at the signing time"),
            )),
            None => Err(Refusal::new(
                Reason::Untrusted,
                format!(
                    "signed by OpenPGP key {}, which is not in {}",
                    issuers.first().map(String::as_str).unwrap_or("(unnamed)"),
                    self.path.display()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revoked(secs: u64, soft: bool) -> Option<Revoked> {
        Some(Revoked {
            at: UNIX_EPOCH + Duration::from_secs(secs),
            soft,
            why: String::new(),
        })
    }

    #[test]
    fn a_soft_revocation_spares_what_was_signed_before_it_and_a_hard_one_nothing() {
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        let soft = revoked(100, true).unwrap();
        assert!(!soft.voids(at(99)));
        assert!(soft.voids(at(100)) && soft.voids(at(101)));
        let hard = revoked(100, false).unwrap();
        assert!(hard.voids(at(1)) && hard.voids(at(200)));
    }

    #[test]
    fn of_two_revocations_the_one_refusing_more_holds() {
        let pick = |a, b| Revoked::stronger(a, b).map(|r| (r.at, r.soft));
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(pick(None, None), None);
        assert_eq!(pick(revoked(5, true), None), Some((at(5), true)));
        // A hard one, however late, over a soft one.
        assert_eq!(
            pick(revoked(5, true), revoked(9, false)),
            Some((at(9), false))
        );
        assert_eq!(
            pick(revoked(9, false), revoked(5, true)),
            Some((at(9), false))
        );
        // Of two soft ones, the earlier.
        assert_eq!(
            pick(revoked(9, true), revoked(5, true)),
            Some((at(5), true))
        );
    }
}

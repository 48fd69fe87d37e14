//! What an age file's header says without a private key: the type of each
//! recipient stanza and, for SSH keys, the tag of the key it is sealed to.
//! X25519 stanzas name no recipient, so only SSH recipients can be checked.

use std::io::{BufRead, BufReader, Read};

use base64::Engine;
use sha2::{Digest, Sha256};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD_NO_PAD;

/// A configured recipient, as far as a header can be checked against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipient {
    /// `ssh-ed25519 ...` or `ssh-rsa ...`: its stanza type and key tag.
    Ssh {
        kind: String,
        tag: String,
        shown: String,
    },
    /// `age1...`: its stanzas carry no trace of it.
    X25519(String),
}

/// Why a configured recipient is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipientError {
    #[error("recipient {text:?} is not an age public key: {why}")]
    NotAge { text: String, why: &'static str },
    #[error(
        "recipient {0:?} is neither an age public key (age1...) nor an ssh-ed25519 or ssh-rsa key"
    )]
    Kind(String),
    #[error("recipient {0:?}: its key is not base64")]
    NotBase64(String),
}

/// A recipient as written in `secrets.age.recipients`.
pub fn parse_recipient(text: &str) -> Result<Recipient, RecipientError> {
    let text = text.trim();
    if text.starts_with("age1") {
        return text
            .parse::<age::x25519::Recipient>()
            .map(|_| Recipient::X25519(text.to_string()))
            .map_err(|why| RecipientError::NotAge {
                text: text.to_string(),
                why,
            });
    }
    let mut parts = text.split_whitespace();
    let (kind, body) = match (parts.next(), parts.next()) {
        (Some(k @ ("ssh-ed25519" | "ssh-rsa")), Some(body)) => (k, body),
        _ => return Err(RecipientError::Kind(text.to_string())),
    };
    let wire = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| RecipientError::NotBase64(text.to_string()))?;
    let digest = Sha256::digest(&wire);
    let comment = parts.collect::<Vec<_>>().join(" ");
    let shown = match comment.is_empty() {
        true => format!("{kind} {}...", &body[..body.len().min(24)]),
        false => format!("{kind} ... {comment}"),
    };
    Ok(Recipient::Ssh {
        kind: kind.to_string(),
        tag: B64.encode(&digest[..4]),
        shown,
    })
}

/// The stanza lines (`-> type args...`) of an age file's header.
fn stanza_heads(bytes: &[u8]) -> Vec<Vec<String>> {
    let mut reader = BufReader::new(age::armor::ArmoredReader::new(bytes).take(1 << 20));
    let mut heads = Vec::new();
    let mut line = Vec::new();
    while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
        let text = String::from_utf8_lossy(&line);
        if text.starts_with("---") {
            break;
        }
        if let Some(rest) = text.strip_prefix("-> ") {
            heads.push(rest.split_whitespace().map(str::to_string).collect());
        }
        line.clear();
    }
    heads
}

/// Each SSH recipient `bytes` has no stanza for, as a sentence naming
/// `file`; X25519 recipients are not checked (their stanzas are anonymous).
pub fn check_recipients(file: &str, bytes: &[u8], recipients: &[Recipient]) -> Vec<String> {
    let heads = stanza_heads(bytes);
    recipients
        .iter()
        .filter_map(|r| match r {
            Recipient::Ssh { kind, tag, shown } => {
                let found = heads
                    .iter()
                    .any(|h| h.first() == Some(kind) && h.get(1) == Some(tag));
                (!found).then(|| {
                    format!(
                        "{file} is not encrypted to recipient {shown}: a host holding only that key cannot decrypt it"
                    )
                })
            }
            Recipient::X25519(_) => None,
        })
        .collect()
}

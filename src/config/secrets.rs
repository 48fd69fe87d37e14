//! `secrets.age` (SPEC §13) and mirror mode's `source.decrypt`: the config
//! file as written, merged with `--age-identity` / `--age-recipient` and
//! their environment variables.

use std::path::PathBuf;

use serde::Deserialize;

use super::problem::Problems;
use crate::cli::Flags;
use crate::secrets::{parse_recipient, AgeSettings};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    pub age: Option<AgeConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgeConfig {
    pub identities: Option<Vec<PathBuf>>,
    pub recipients: Option<Vec<String>>,
}

/// `source.decrypt`: which mirrored files are age files to publish
/// decrypted, under their name less the suffix.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecryptConfig {
    pub suffix: String,
}

/// The identities and recipients in force: flags (and their environment
/// variables) replace the config's lists. Each recipient that is not a
/// public key is a problem of `secrets.age.recipients`.
pub fn resolve(args: &Flags, file: Option<SecretsConfig>, problems: &mut Problems) -> AgeSettings {
    let age = file.and_then(|s| s.age).unwrap_or_default();
    let identities = match args.age_identities.is_empty() {
        true => age.identities.unwrap_or_default(),
        false => args.age_identities.clone(),
    };
    let from_flags = !args.age_recipients.is_empty();
    let recipients = match from_flags {
        false => age.recipients.unwrap_or_default(),
        true => args.age_recipients.clone(),
    };
    for m in recipients.iter().filter_map(|r| parse_recipient(r).err()) {
        match from_flags {
            true => problems.general("--age-recipient", m.to_string()),
            false => problems.at("secrets.age.recipients", m.to_string()),
        }
    }
    let identities = identities
        .into_iter()
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    AgeSettings {
        identities,
        recipients,
    }
}

/// A `source.decrypt.suffix` that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a file name suffix such as \".age\"")]
pub struct NotASuffix(pub String);

/// The suffix of `source.decrypt`, refused when empty or a whole name.
pub fn suffix(decrypt: Option<DecryptConfig>) -> Result<Option<String>, NotASuffix> {
    match decrypt {
        None => Ok(None),
        Some(d) if d.suffix.len() < 2 || !d.suffix.starts_with('.') || d.suffix.contains('/') => {
            Err(NotASuffix(d.suffix))
        }
        Some(d) => Ok(Some(d.suffix)),
    }
}

//! `host:` (SPEC §12): this host's name and labels, from `--host`/`--label`,
//! the config file, or the machine's host name; and `source.path` with its
//! placeholders filled in.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::host::{self, Host};

/// `host:` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub name: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
}

/// A problem with this host's identity: the config key and what is wrong.
pub struct HostProblem {
    pub key: String,
    pub message: String,
}

/// The host this run acts as, and whether it was named (by a flag or the
/// config) rather than taken from the machine.
pub fn resolve(
    name_flag: Option<&str>,
    label_flags: &[String],
    file: Option<HostConfig>,
) -> Result<(Host, bool), Vec<HostProblem>> {
    let file = file.unwrap_or_default();
    let mut problems = Vec::new();
    let named = name_flag.is_some() || file.name.is_some();
    let name = match name_flag.map(str::to_string).or(file.name) {
        Some(n) => n,
        None => machine_name(),
    };
    if !host::valid_name(&name) {
        problems.push(HostProblem {
            key: "host.name".into(),
            message: format!("{name:?} is not a host name (letters, digits, `.`, `_`, `-`)"),
        });
    }
    // Labels given as flags stand for the whole set, as a test of what
    // another host would get.
    let labels = if label_flags.is_empty() {
        file.labels.unwrap_or_default()
    } else {
        let mut given = BTreeMap::new();
        for l in label_flags {
            match l.split_once('=') {
                Some((k, v)) => {
                    given.insert(k.to_string(), v.to_string());
                }
                None => problems.push(HostProblem {
                    key: "--label".into(),
                    message: format!("{l:?}: expected KEY=VALUE"),
                }),
            }
        }
        given
    };
    for (k, v) in &labels {
        if !host::valid_name(k) || !host::valid_name(v) {
            problems.push(HostProblem {
                key: "host.labels".into(),
                message: format!(
                    "{k:?}: {v:?}: keys and values are letters, digits, `.`, `_`, `-`"
                ),
            });
        }
    }
    if problems.is_empty() {
        Ok((Host { name, labels }, named))
    } else {
        Err(problems)
    }
}

/// The machine's host name, its first label (`web-1` of
/// `web-1.example.com`), or `localhost` when it has none.
fn machine_name() -> String {
    let full = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    match full.split('.').next() {
        Some(first) if host::valid_name(first) => first.to_string(),
        _ => "localhost".into(),
    }
}

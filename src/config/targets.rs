//! The `targets:` section: one typed block per adapter, chosen by `type`,
//! each refusing the keys of other adapters. Adding an adapter is its folder
//! under src/target/ (with its config type) plus one variant here.

use std::collections::BTreeMap;

use serde_yaml::Value;

use super::load::typed;
use super::problem::Problems;

use crate::target::etcd::EtcdConfig;
use crate::target::exec::ExecConfig;
use crate::target::files::FilesConfig;

/// A target's adapter and that adapter's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    Files(FilesConfig),
    Exec(ExecConfig),
    Etcd(EtcdConfig),
}

/// The adapter types, as `type:` names them.
pub const TYPES: &str = "files, exec, etcd";

#[derive(Debug, Clone)]
pub struct TargetSettings {
    pub name: String,
    pub kind: TargetKind,
}

/// Why the config alone does not tell a target's kinds: a plugin says
/// its own once started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not started: declarations are read as written")]
pub struct NotStarted;

impl TargetKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            TargetKind::Files(_) => "files",
            TargetKind::Exec(_) => "exec",
            TargetKind::Etcd(_) => "etcd",
        }
    }

    /// The kinds the adapter serves, as far as the config tells without
    /// starting it (a plugin's are its own to say); what a built target's
    /// `kinds` answers for the others.
    pub fn kinds(&self) -> Result<Vec<String>, NotStarted> {
        match self {
            TargetKind::Files(_) => Ok(crate::target::files::KINDS.map(String::from).to_vec()),
            TargetKind::Exec(_) => Err(NotStarted),
            TargetKind::Etcd(_) => Ok(vec![crate::target::etcd::KIND.to_string()]),
        }
    }

    /// The path inside this target that `what` names for `tend explain`:
    /// for files, relative to the root or absolute under it; for etcd, a
    /// key relative to the prefix or the whole key; a plugin's objects are
    /// named by identity alone.
    pub fn locate(&self, what: &str) -> Option<String> {
        match self {
            TargetKind::Files(c) => Some(match std::path::Path::new(what).strip_prefix(&c.root) {
                Ok(rel) if what.starts_with('/') => rel.to_string_lossy().into_owned(),
                _ => what.trim_start_matches('/').to_string(),
            }),
            TargetKind::Exec(_) => None,
            TargetKind::Etcd(c) => Some(what.strip_prefix(&c.prefix).unwrap_or(what).to_string()),
        }
    }

    fn validate(&self) -> Vec<(&'static str, String)> {
        match self {
            TargetKind::Files(c) => c.validate(),
            TargetKind::Exec(c) => c.validate(),
            TargetKind::Etcd(c) => c.validate(),
        }
    }
}

/// Every sound target of the section; each problem of the others goes to
/// `problems` under its key (`targets.NAME.KEY`).
pub(super) fn resolve(
    section: BTreeMap<String, Value>,
    problems: &mut Problems,
) -> Vec<TargetSettings> {
    let mut targets = Vec::new();
    for (name, block) in section {
        let at = format!("targets.{name}");
        if name.is_empty() || name.contains('/') {
            problems.at(at, "a target name may not be empty or contain `/`");
            continue;
        }
        let Value::Mapping(mut fields) = block else {
            problems.at(at, format!("needs a block with `type` ({TYPES})"));
            continue;
        };
        let type_name = match fields.remove("type") {
            Some(Value::String(t)) => t,
            Some(_) => {
                problems.at(
                    format!("{at}.type"),
                    format!("`type` must be one of {TYPES}"),
                );
                continue;
            }
            None => {
                problems.at(at, format!("needs `type` ({TYPES})"));
                continue;
            }
        };
        let rest = serde_yaml::to_string(&Value::Mapping(fields)).unwrap_or_default();
        let mut refused = |key: String, serde: String| {
            let (key, message) = explain(&type_name, &key, &serde);
            problems.at(format!("{at}{key}"), message);
        };
        let kind = match type_name.as_str() {
            "files" => typed(&rest, &mut refused).map(TargetKind::Files),
            "exec" => typed(&rest, &mut refused).map(TargetKind::Exec),
            "etcd" => typed(&rest, &mut refused).map(TargetKind::Etcd),
            other => {
                problems.at(
                    format!("{at}.type"),
                    format!("unknown type {other:?} (known: {TYPES})"),
                );
                continue;
            }
        };
        let Some(kind) = kind else { continue };
        let found = kind.validate();
        if found.is_empty() {
            targets.push(TargetSettings { name, kind });
        }
        for (key, message) in found {
            problems.at(format!("{at}.{key}"), message);
        }
    }
    targets
}

/// serde's words for a key of a block, in the config's terms: the key
/// (`.KEY`, or empty for the block) and the message.
fn explain(type_name: &str, key: &str, serde: &str) -> (String, String) {
    let dotted = match key.is_empty() {
        true => String::new(),
        false => format!(".{key}"),
    };
    let quoted = |prefix: &str| {
        serde
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    if let Some(field) = quoted("unknown field `") {
        let accepted = serde.split_once("expected ").map(|(_, e)| e).unwrap_or("");
        let message = format!("`{field}` does not apply to type {type_name} (it takes {accepted})");
        return (dotted, message);
    }
    if let Some(field) = quoted("missing field `") {
        return (dotted, format!("type {type_name} needs `{field}`"));
    }
    (dotted, serde.to_string())
}

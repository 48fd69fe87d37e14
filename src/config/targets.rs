//! The `targets:` section: one typed block per adapter, chosen by `type`,
//! each refusing the keys of other adapters. Adding an adapter is its folder
//! under src/target/ (with its config type) plus one variant here.

use std::collections::BTreeMap;

use serde_yaml::Value;

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

/// A problem of the section, with the dotted key whose line it names.
pub struct Problem {
    pub key: String,
    pub message: String,
}

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
    pub fn kinds(&self) -> Result<Vec<String>, String> {
        match self {
            TargetKind::Files(_) => Ok(crate::target::files::KINDS.map(String::from).to_vec()),
            TargetKind::Exec(_) => Err("not started: declarations are read as written".into()),
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

    fn validate(&self) -> Vec<String> {
        match self {
            TargetKind::Files(c) => c.validate(),
            TargetKind::Exec(c) => c.validate(),
            TargetKind::Etcd(c) => c.validate(),
        }
    }
}

/// Every target of the section, and every problem found in it.
pub fn resolve(section: BTreeMap<String, Value>) -> (Vec<TargetSettings>, Vec<Problem>) {
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    for (name, block) in section {
        let mut problem = |key: Option<&str>, message: String| {
            problems.push(Problem {
                key: match key {
                    Some(k) => format!("targets.{name}.{k}"),
                    None => format!("targets.{name}"),
                },
                message: format!("target {name}: {message}"),
            })
        };
        if name.is_empty() || name.contains('/') {
            problem(None, "a target name may not be empty or contain `/`".into());
            continue;
        }
        let Value::Mapping(mut fields) = block else {
            problem(None, format!("needs a block with `type` ({TYPES})"));
            continue;
        };
        let type_name = match fields.remove("type") {
            Some(Value::String(t)) => t,
            Some(_) => {
                problem(Some("type"), format!("`type` must be one of {TYPES}"));
                continue;
            }
            None => {
                problem(None, format!("needs `type` ({TYPES})"));
                continue;
            }
        };
        let rest = Value::Mapping(fields);
        let parsed = match type_name.as_str() {
            "files" => serde_yaml::from_value(rest).map(TargetKind::Files),
            "exec" => serde_yaml::from_value(rest).map(TargetKind::Exec),
            "etcd" => serde_yaml::from_value(rest).map(TargetKind::Etcd),
            other => {
                problem(
                    Some("type"),
                    format!("unknown type {other:?} (known: {TYPES})"),
                );
                continue;
            }
        };
        match parsed {
            Ok(kind) => {
                let found = kind.validate();
                for message in found.iter() {
                    problem(None, message.clone());
                }
                if found.is_empty() {
                    targets.push(TargetSettings { name, kind });
                }
            }
            Err(e) => {
                let (key, message) = explain(&type_name, &e.to_string());
                problem(key.as_deref(), message);
            }
        }
    }
    (targets, problems)
}

/// serde's words for a block, in the config's terms, with the key they
/// are about when they name one.
fn explain(type_name: &str, serde: &str) -> (Option<String>, String) {
    let quoted = |prefix: &str| {
        serde
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    if let Some(field) = quoted("unknown field `") {
        let accepted = serde.split_once("expected ").map(|(_, e)| e).unwrap_or("");
        let message = format!("`{field}` does not apply to type {type_name} (it takes {accepted})");
        return (Some(field), message);
    }
    if let Some(field) = quoted("missing field `") {
        return (None, format!("type {type_name} needs `{field}`"));
    }
    (None, serde.to_string())
}

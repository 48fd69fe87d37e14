//! Reading a config file: its text parsed once, then typed with every key
//! serde refuses (unknown, of the wrong type, missing) reported with its
//! line and left out, so that one mistake hides none of the others.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;
use serde_yaml::Value;

use super::file::FileConfig;
use super::problem::{ConfigError, Problem, Problems};

/// Largest config file read.
const MAX_SIZE: usize = 1 << 20;
/// Most keys refused in one block before the rest of it is given up.
const MAX_REFUSED: usize = 100;

/// Reads and types a config file; any problem fails it, every one named.
pub fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let file = path.display().to_string();
    let text = read(path)?;
    let mut problems = Problems::new(Some(&file), &text);
    let config = parse(&file, &text, &mut problems)?;
    problems.finish(config)
}

/// The file's text: readable, not too large, UTF-8.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    let file = path.display().to_string();
    let refuse = |message: String| {
        ConfigError::one(Problem {
            file: Some(file.clone()),
            line: None,
            key: String::new(),
            message,
        })
    };
    let text = std::fs::read(path).map_err(|e| refuse(format!("cannot read: {e}")))?;
    if text.len() > MAX_SIZE {
        return Err(refuse("larger than 1 MiB".into()));
    }
    String::from_utf8(text).map_err(|e| {
        refuse(format!(
            "not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The config as written. Text that is not YAML fails at once (nothing
/// after the mistake can be read); each key serde refuses is a problem in
/// `problems`, and the rest of the file is still typed.
pub fn parse(file: &str, text: &str, problems: &mut Problems) -> Result<FileConfig, ConfigError> {
    let value: Value = serde_yaml::from_str(text).map_err(|e| {
        ConfigError::one(Problem {
            file: Some(file.to_string()),
            line: e.location().map(|l| l.line()),
            key: String::new(),
            message: at_line(&e),
        })
    })?;
    if value.is_null() {
        return Ok(FileConfig::default());
    }
    let config = typed(text, |path, message| problems.at(path, phrase(&message)));
    Ok(config.unwrap_or_default())
}

/// `text` (YAML) typed as `T`. Each key serde refuses is given to
/// `refused` (its dotted path, serde's words) and taken out, and the rest
/// typed again; `None` when what is left still cannot be (the block as a
/// whole is wrong: a missing field of the top, a list where a map goes).
/// Typed from text, not from a [`Value`], so that a scalar is read as the
/// field wants it (`ref: 2024` a string) as everywhere else in tend.
pub fn typed<T: DeserializeOwned>(
    text: &str,
    mut refused: impl FnMut(String, String),
) -> Option<T> {
    let mut text = text.to_string();
    let mut left: Option<Value> = None;
    for _ in 0..MAX_REFUSED {
        let read = serde_yaml::Deserializer::from_str(&text);
        let e = match serde_path_to_error::deserialize::<_, T>(read) {
            Ok(typed) => return Some(typed),
            Err(e) => e,
        };
        let path: Vec<Segment> = e.path().iter().cloned().collect();
        refused(dotted(&path), bare(&path, e.inner()));
        let value = left.get_or_insert_with(|| serde_yaml::from_str(&text).unwrap_or_default());
        if !take_out(value, &path) {
            return None;
        }
        text = serde_yaml::to_string(value).ok()?;
    }
    None
}

/// `policy.contested`, `hooks.a.run.0`.
fn dotted(path: &[Segment]) -> String {
    path.iter()
        .map(|s| match s {
            Segment::Map { key } => key.clone(),
            Segment::Seq { index } => index.to_string(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".into(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// serde_yaml's message without the path and the position it adds (the
/// problem names the key and its line).
fn bare(path: &[Segment], e: &serde_yaml::Error) -> String {
    let mut text = e.to_string();
    if let Some(l) = e.location() {
        let suffix = format!(" at line {} column {}", l.line(), l.column());
        if let Some(stripped) = text.strip_suffix(&suffix) {
            text = stripped.to_string();
        }
    }
    // serde_yaml's own spelling of the path: `a.b[0].c`.
    let mut prefixes = Vec::new();
    let mut at = String::new();
    for s in path {
        match s {
            Segment::Seq { index } => at.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !at.is_empty() {
                    at.push('.');
                }
                at.push_str(key);
            }
            Segment::Unknown => at.push_str(".?"),
        }
        prefixes.push(format!("{at}: "));
    }
    for prefix in prefixes.iter().rev() {
        if let Some(rest) = text.strip_prefix(prefix.as_str()) {
            return rest.to_string();
        }
    }
    text
}

/// Removes what `path` names from `value`; false when it names nothing
/// that can be removed.
fn take_out(value: &mut Value, path: &[Segment]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match (segment, at) {
            (Segment::Map { key }, Value::Mapping(m)) => m.get_mut(key.as_str()),
            (Segment::Seq { index }, Value::Sequence(s)) => s.get_mut(*index),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    match (last, at) {
        (Segment::Map { key }, Value::Mapping(m)) => m.remove(key.as_str()).is_some(),
        (Segment::Seq { index }, Value::Sequence(s)) if *index < s.len() => {
            s.remove(*index);
            true
        }
        _ => false,
    }
}

/// serde_yaml's words for a syntax error already headed `file:line:`.
fn at_line(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(l) => {
            let suffix = format!(" at line {} column {}", l.line(), l.column());
            let bare = text.strip_suffix(&suffix).unwrap_or(&text);
            format!("column {}: {bare}", l.column())
        }
        None => text,
    }
}

/// serde's words in the config's terms: an unknown field is an unknown key
/// (the key itself is already named).
fn phrase(serde: &str) -> String {
    match serde
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once("`, "))
    {
        Some((_, expected)) => format!("unknown key, {expected}"),
        None => serde.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> (FileConfig, Vec<String>) {
        let mut problems = Problems::new(Some("tend.yaml"), text);
        let config = parse("tend.yaml", text, &mut problems).unwrap();
        let found = match problems.finish(()) {
            Ok(()) => Vec::new(),
            Err(e) => e.problems().iter().map(|p| p.to_string()).collect(),
        };
        (config, found)
    }

    #[test]
    fn every_unknown_key_is_named_with_its_line_and_the_rest_is_kept() {
        let (config, found) = parse_text(
            "source:\n  repo: /x\n  intervall: 5m\npolicy:\n  prun: false\n  resync: 1m\nextra: 1\n",
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0]
                .starts_with("tend.yaml:3: source.intervall: unknown key, expected one of `repo`"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with("tend.yaml:5: policy.prun: unknown key"),
            "{found:?}"
        );
        assert!(
            found[2].starts_with("tend.yaml:7: extra: unknown key"),
            "{found:?}"
        );
        assert_eq!(config.source.unwrap().repo.as_deref(), Some("/x"));
        assert!(config.policy.unwrap().resync.is_some());
    }

    #[test]
    fn values_of_the_wrong_type_and_missing_fields_are_named_and_left_out() {
        let (config, found) = parse_text(
            "source:\n  interval: soon\n  repo: /x\npolicy:\n  contested: {corrections: 3}\nserver: [1]\n",
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].starts_with("tend.yaml:2: source.interval:"),
            "{found:?}"
        );
        assert!(
            found[1].contains("tend.yaml:5: policy.contested: missing field `window`"),
            "{found:?}"
        );
        assert!(
            found[2].starts_with("tend.yaml:6: server: invalid type"),
            "{found:?}"
        );
        assert_eq!(config.source.unwrap().repo.as_deref(), Some("/x"));
    }

    #[test]
    fn text_that_is_not_yaml_fails_at_once_with_its_line() {
        let text = "source:\n  repo: [\n";
        let mut problems = Problems::new(Some("tend.yaml"), text);
        let e = parse("tend.yaml", text, &mut problems)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tend.yaml:"), "{e}");
        let (config, found) = parse_text("# nothing\n");
        assert!(config.source.is_none() && found.is_empty());
    }
}

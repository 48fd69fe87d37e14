//! The only place YAML is read for declarations: one file's documents into
//! typed [`Decl`]s, each with the line it starts on, or a problem with a line.

use serde::Deserialize;

/// One declaration document as written (SPEC §4). Unknown keys are errors.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decl {
    pub kind: String,
    pub path: Option<String>,
    /// Structured resources (plugin kinds): the object's name, its declared
    /// fields, and the pointers owned by someone else.
    pub name: Option<String>,
    pub spec: Option<serde_json::Value>,
    pub ignore: Option<Vec<String>>,
    pub target: Option<String>,
    pub source: Option<String>,
    pub content: Option<String>,
    pub mode: Option<String>,
    pub owner: Option<IdOrName>,
    pub group: Option<IdOrName>,
    pub on_change: Option<String>,
    pub self_heal: Option<bool>,
    pub sensitive: Option<bool>,
    /// `age`: `source:` is an age file, applied decrypted (SPEC §13).
    pub decrypt: Option<String>,
    pub target_path: Option<String>,
    /// The hosts of a fleet this declaration is for (SPEC §12).
    pub hosts: Option<crate::model::host::HostSelector>,
    /// etcd keys (`kind: key`): the key under the target's prefix, and its
    /// value, inline or structured (`source:` reads it from a file).
    pub key: Option<String>,
    pub value: Option<String>,
    pub json: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum IdOrName {
    Id(u32),
    Name(String),
}

/// Largest declaration file read; bigger ones are refused before parsing.
pub const MAX_DECL_FILE: u64 = 16 << 20;
/// Most documents read from one file.
const MAX_DOCS: usize = 100_000;
/// Most problems reported for one file; the rest are counted in one line.
const MAX_PROBLEMS: usize = 100;

/// A parse outcome for one document.
pub enum Parsed {
    Decl { line: usize, decl: Box<Decl> },
    Problem { line: usize, message: String },
}

/// `line N column M: message`, from a serde_yaml error.
pub fn message(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(loc) => {
            let suffix = format!(" at line {} column {}", loc.line(), loc.column());
            let bare = text.strip_suffix(&suffix).unwrap_or(&text);
            format!("line {} column {}: {bare}", loc.line(), loc.column())
        }
        None => text,
    }
}

/// [`message`] for a problem already headed `file:line:`: the column only.
fn message_at_line(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(loc) => {
            let suffix = format!(" at line {} column {}", loc.line(), loc.column());
            let bare = text.strip_suffix(&suffix).unwrap_or(&text);
            format!("column {}: {bare}", loc.column())
        }
        None => text,
    }
}

fn line_of(e: &serde_yaml::Error, fallback: usize) -> usize {
    e.location().map(|l| l.line()).unwrap_or(fallback)
}

/// The first line of each document, in the order serde_yaml yields them:
/// a `---` line at column 0 opens a document on the next line; text before
/// the first separator is a document only if it has content.
fn document_starts(text: &str) -> Vec<usize> {
    let is_separator =
        |l: &str| l.starts_with("---") && (l.len() == 3 || l[3..].starts_with([' ', '\t']));
    let first_content = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#') && !l.starts_with('%'));
    let mut starts = match first_content {
        Some(l) if is_separator(l) => Vec::new(),
        _ => vec![1],
    };
    for (i, line) in text.lines().enumerate() {
        if is_separator(line) {
            starts.push(i + 2);
        }
    }
    starts
}

/// Parses every document of one declaration file.
pub fn parse(bytes: &[u8]) -> Vec<Parsed> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1;
            return vec![Parsed::Problem {
                line,
                message: "not valid UTF-8".into(),
            }];
        }
    };
    if let Some(line) = super::depth::too_deep(text) {
        return vec![Parsed::Problem {
            line,
            message: format!(
                "collections nested deeper than {} levels; the file is not read",
                super::depth::MAX_DEPTH
            ),
        }];
    }
    let starts = document_starts(text);
    let mut out = Vec::new();
    let mut problems = 0;
    let mut unlisted: Option<usize> = None;
    let mut last_error: Option<String> = None;
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        if i >= MAX_DOCS {
            out.push(Parsed::Problem {
                line: 1,
                message: format!("more than {MAX_DOCS} documents"),
            });
            break;
        }
        let start = starts.get(i).copied().unwrap_or(1);
        match Option::<Decl>::deserialize(doc) {
            Ok(Some(decl)) => out.push(Parsed::Decl {
                line: start,
                decl: Box::new(decl),
            }),
            Ok(None) => {}
            Err(e) => {
                // A syntax error leaves the stream unusable: the parser
                // gives the same error for every document after it, and
                // later documents cannot be located reliably.
                let text = e.to_string();
                if last_error.as_deref() == Some(text.as_str()) {
                    break;
                }
                let fatal = e.location().is_none() || text.contains("recursion limit");
                problems += 1;
                if problems > MAX_PROBLEMS {
                    // Valid documents further on still count; only the
                    // listing stops.
                    unlisted.get_or_insert(line_of(&e, start));
                    last_error = Some(text);
                    if fatal {
                        break;
                    }
                    continue;
                }
                out.push(Parsed::Problem {
                    line: line_of(&e, start),
                    message: message_at_line(&e),
                });
                if fatal {
                    break;
                }
                last_error = Some(text);
            }
        }
    }
    if let Some(line) = unlisted {
        out.push(Parsed::Problem {
            line,
            message: format!(
                "{} more problems in this file from here on are not listed",
                problems - MAX_PROBLEMS
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(usize, bool)> {
        parse(text.as_bytes())
            .into_iter()
            .map(|p| match p {
                Parsed::Decl { line, .. } => (line, true),
                Parsed::Problem { line, .. } => (line, false),
            })
            .collect()
    }

    #[test]
    fn documents_carry_their_lines() {
        let t = "kind: file\npath: a\ncontent: x\n---\nkind: file\npath: b\nbogus: 1\n---\n\nkind: symlink\npath: c\ntarget_path: d\n";
        assert_eq!(lines(t), vec![(1, true), (7, false), (9, true)]);
    }

    #[test]
    fn leading_separator_and_empty_documents() {
        let t = "---\nkind: file\npath: a\n---\n---\nkind: file\npath: b\n";
        assert_eq!(lines(t), vec![(2, true), (6, true)]);
    }

    #[test]
    fn alias_bomb_is_refused() {
        let mut t = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
        for (p, c) in ('a'..='h').zip('b'..='i') {
            t.push_str(&format!(
                "{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            ));
        }
        assert!(matches!(parse(t.as_bytes())[..], [Parsed::Problem { .. }]));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let t = "[".repeat(20_000) + &"]".repeat(20_000);
        match &parse(t.as_bytes())[..] {
            [Parsed::Problem { line, .. }] => assert_eq!(*line, 1),
            _ => panic!("expected one problem"),
        }
    }

    #[test]
    fn deep_nesting_inside_a_field_is_refused() {
        let t = format!(
            "kind: file\npath: a\ncontent: {}{}\n",
            "[".repeat(20_000),
            "]".repeat(20_000)
        );
        assert!(matches!(
            parse(t.as_bytes())[..],
            [Parsed::Problem { line: 3, .. }]
        ));
        let t = format!(
            "kind: file\npath: a\nx: {}{}\n",
            "{a: ".repeat(20_000),
            "}".repeat(20_000)
        );
        assert!(matches!(parse(t.as_bytes())[..], [Parsed::Problem { .. }]));
    }

    #[test]
    fn a_syntax_error_is_reported_once() {
        let t = "kind: file\npath: a\ncontent: x\n---\nkind: file\npath: b\ncontent: \"unclosed\n";
        match &parse(t.as_bytes())[..] {
            [Parsed::Decl { line: 1, .. }, Parsed::Problem { line, message }] => {
                assert!(*line >= 5, "{line}: {message}");
                assert!(
                    message.contains("end of stream") || message.contains("quoted"),
                    "{message}"
                );
            }
            other => panic!(
                "expected one declaration and one problem, got {} items",
                other.len()
            ),
        }
    }

    #[test]
    fn problems_of_one_file_are_bounded_and_later_documents_still_read() {
        let t = "kind: file\npath: a\nbogus: 1\n---\n".repeat(1000)
            + "kind: file\npath: ok\ncontent: x\n";
        let parsed = parse(t.as_bytes());
        assert_eq!(parsed.len(), MAX_PROBLEMS + 2);
        assert!(matches!(
            parsed[MAX_PROBLEMS],
            Parsed::Decl { line: 4001, .. }
        ));
        match parsed.last() {
            Some(Parsed::Problem { message, line }) => {
                assert!(message.contains("900 more problems"), "{message}");
                assert_eq!(*line, 4 * MAX_PROBLEMS + 3);
            }
            _ => panic!("expected a closing problem"),
        }
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let t = b"kind: file\npath: a\ncontent: \xff\n";
        match &parse(t)[..] {
            [Parsed::Problem { line, message }] => {
                assert_eq!(*line, 3);
                assert!(message.contains("UTF-8"));
            }
            _ => panic!("expected one problem"),
        }
    }
}

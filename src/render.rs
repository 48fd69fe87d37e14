//! How changes are shown: unified diffs per file (via `similar`) headed
//! `--- live/<id>` / `+++ desired/<id>`, one line per non-content change, the
//! JSON of `diff -o json`, and (in [`markdown`]) a pull-request comment.
//! Sensitive content shows only a keyed hash.

use similar::{ChangeTag, TextDiff};

use crate::model::{Action, Change, Field, Live, Observed, Spec};

pub mod markdown;
pub mod quote;

/// Content larger than this is not diffed line by line.
const MAX_DIFF_BYTES: usize = 1 << 20;

/// What rendering needs besides the change itself.
pub struct Shown<'a> {
    pub live: Option<&'a [u8]>,
    pub desired: Option<&'a [u8]>,
    /// Keyed hash for sensitive content.
    pub hash: &'a dyn Fn(&[u8]) -> String,
    pub sensitive: bool,
    pub color: bool,
}

fn paint(color: bool, code: &str, text: &str) -> String {
    if color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn is_text(b: &[u8]) -> bool {
    b.len() <= MAX_DIFF_BYTES && !b.contains(&0) && std::str::from_utf8(b).is_ok()
}

/// The content part: a unified diff, or a one-line summary for sensitive,
/// binary or huge content. Empty when content does not change.
pub fn content_diff(change: &Change, shown: &Shown) -> String {
    let content_changes = match change.action {
        Action::Create => true,
        Action::Delete => false,
        Action::Update => change
            .fields
            .iter()
            .any(|f| matches!(f, Field::Content | Field::Type { .. })),
    };
    let structured = matches!(
        change.desired.as_ref().map(|d| &d.spec),
        Some(Spec::Structured(_))
    ) || matches!(change.observed, Observed::Present(Live::Structured { .. }));
    if !content_changes || structured {
        return String::new();
    }
    let (old, new) = (
        shown.live.unwrap_or_default(),
        shown.desired.unwrap_or_default(),
    );
    let id = quote::name(change.id.as_str());
    // A decrypted secret shows no hash at all: even a keyed one would tell
    // which of two secrets is on the host to whoever holds the key.
    if change.desired.as_ref().is_some_and(|d| d.decrypted) {
        return format!("{id}: secret changed\n");
    }
    if shown.sensitive {
        let h = |b: Option<&[u8]>| b.map(|b| (shown.hash)(b)).unwrap_or_else(|| "none".into());
        return format!(
            "{id}: content {} -> {} (sensitive)\n",
            h(shown.live),
            h(shown.desired)
        );
    }
    if !is_text(old) || !is_text(new) {
        return format!(
            "{id}: binary or large content differs ({} -> {} bytes)\n",
            old.len(),
            new.len()
        );
    }
    let (old, new) = (
        std::str::from_utf8(old).unwrap_or(""),
        std::str::from_utf8(new).unwrap_or(""),
    );
    let diff = TextDiff::from_lines(old, new);
    let mut out = String::new();
    out.push_str(&paint(
        shown.color,
        "1",
        &format!(
            "--- {}\n+++ {}\n",
            quote::name(&format!("live/{}", change.id)),
            quote::name(&format!("desired/{}", change.id))
        ),
    ));
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        out.push_str(&paint(shown.color, "36", &format!("{}\n", hunk.header())));
        for c in hunk.iter_changes() {
            let (sign, code) = match c.tag() {
                ChangeTag::Delete => ("-", "31"),
                ChangeTag::Insert => ("+", "32"),
                ChangeTag::Equal => (" ", "0"),
            };
            let mut line = format!("{sign}{}", c.value());
            if c.missing_newline() {
                line.push_str("\n\\ No newline at end of file");
            }
            if !line.ends_with('\n') {
                line.push('\n');
            }
            out.push_str(&if c.tag() == ChangeTag::Equal {
                line
            } else {
                paint(shown.color, code, &line)
            });
        }
    }
    out
}

/// `1 problem`, `2 problems`: a count and a noun that agree in number.
pub fn count(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

fn mode(m: u32) -> String {
    format!("{m:04o}")
}

/// A structured field's value in a diff line: compact JSON, or `absent`.
fn value(v: &Option<serde_json::Value>) -> String {
    v.as_ref()
        .map_or_else(|| "absent".into(), |v| v.to_string())
}

/// One line per non-content change; a structured resource's fields show as
/// `/spec/replicas: 2 -> 3` (values hidden when sensitive).
pub fn field_lines(change: &Change, sensitive: bool) -> Vec<String> {
    let id = quote::name(change.id.as_str());
    field_texts(change, sensitive)
        .into_iter()
        .map(|t| format!("{id}: {t}"))
        .collect()
}

/// [`field_lines`] without the identity: `create`, `mode 0644 -> 0600`.
pub fn field_texts(change: &Change, sensitive: bool) -> Vec<String> {
    let json = |f: &Field| match f {
        Field::Json { pointer, .. } if sensitive => Some(format!("{pointer}: changed (sensitive)")),
        Field::Json { pointer, from, to } => {
            Some(format!("{pointer}: {} -> {}", value(from), value(to)))
        }
        _ => None,
    };
    match change.action {
        Action::Create => {
            let mut lines = vec!["create".to_string()];
            lines.extend(change.fields.iter().filter_map(json));
            return lines;
        }
        Action::Delete => return vec!["delete".to_string()],
        Action::Update => {}
    }
    change
        .fields
        .iter()
        .filter_map(|f| match f {
            Field::Json { .. } => json(f),
            Field::Content => None,
            Field::Type { from, to } => Some(format!("type {from} -> {to}")),
            Field::Mode { from, to } => Some(format!("mode {} -> {}", mode(*from), mode(*to))),
            Field::Owner { from, to } => Some(format!("owner {from} -> {to}")),
            Field::Group { from, to } => Some(format!("group {from} -> {to}")),
            Field::LinkTarget { from, to } => Some(format!(
                "target {} -> {}",
                quote::name(from),
                quote::name(to)
            )),
        })
        .collect()
}

/// The text form of one change.
pub fn text(change: &Change, shown: &Shown) -> String {
    text_with(change, shown, &[])
}

/// [`text`], with more lines about the change (fields a declaration has
/// beyond what a target observes: a hook, an owner as written) before its
/// content diff.
pub fn text_with(change: &Change, shown: &Shown, more: &[String]) -> String {
    let mut out = String::new();
    let id = quote::name(change.id.as_str());
    let more = more.iter().map(|m| format!("{id}: {m}"));
    for line in field_lines(change, shown.sensitive).into_iter().chain(more) {
        let code = match change.action {
            Action::Create => "32",
            Action::Delete => "31",
            Action::Update => "33",
        };
        out.push_str(&paint(shown.color, code, &line));
        out.push('\n');
    }
    out.push_str(&content_diff(change, shown));
    out
}

/// The JSON object of one change: `{id, action, fields, diff}`.
pub fn json(change: &Change, shown: &Shown) -> serde_json::Value {
    json_with(change, shown, &[])
}

/// [`json`], with more field names (those of [`text_with`]'s lines).
pub fn json_with(change: &Change, shown: &Shown, more: &[&str]) -> serde_json::Value {
    let plain = Shown {
        color: false,
        ..*shown
    };
    let mut fields: Vec<&str> = change.fields.iter().map(|f| f.name()).collect();
    if change.action == Action::Create {
        fields.push("exists");
    }
    fields.extend(more);
    serde_json::json!({
        "id": change.id.as_str(),
        "action": change.action.as_str(),
        "fields": fields,
        "diff": content_diff(change, &plain),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RelPath, ResourceId};

    fn change(action: Action, fields: Vec<Field>) -> Change {
        Change {
            id: ResourceId::new("files", "file", "etc/motd"),
            target: "files".into(),
            path: RelPath::parse("etc/motd").unwrap(),
            action,
            fields,
            desired: None,
            observed: Observed::Absent,
        }
    }

    #[test]
    fn unified_diff_with_headers_and_mode_line() {
        let c = change(
            Action::Update,
            vec![
                Field::Content,
                Field::Mode {
                    from: 0o644,
                    to: 0o600,
                },
            ],
        );
        let hash = |_: &[u8]| "h".to_string();
        let s = Shown {
            live: Some(b"a\nb\n"),
            desired: Some(b"a\nc\n"),
            hash: &hash,
            sensitive: false,
            color: false,
        };
        let t = text(&c, &s);
        assert!(
            t.contains("files/file/etc/motd: mode 0644 -> 0600\n"),
            "{t}"
        );
        assert!(
            t.contains("--- live/files/file/etc/motd\n+++ desired/files/file/etc/motd\n"),
            "{t}"
        );
        assert!(t.contains("-b\n+c\n"), "{t}");
    }

    #[test]
    fn sensitive_content_shows_only_hashes() {
        let c = change(Action::Update, vec![Field::Content]);
        let hash = |b: &[u8]| format!("hmac:{}", b.len());
        let s = Shown {
            live: Some(b"old-secret"),
            desired: Some(b"new-secret!"),
            hash: &hash,
            sensitive: true,
            color: false,
        };
        let t = text(&c, &s);
        assert!(!t.contains("secret"), "{t}");
        assert!(t.contains("hmac:10 -> hmac:11"), "{t}");
        let j = json(&c, &s).to_string();
        assert!(!j.contains("secret"), "{j}");
    }
}

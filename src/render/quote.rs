//! How a name from the repository or the machine (a path, an identity, a
//! key's comment) is shown in text meant for a terminal or a log: as git
//! shows paths, so that a file named with escape sequences can neither
//! retitle nor clear the terminal, nor overwrite earlier lines of a CI log.
//! The one rule for every text output; Markdown escapes with it too.

use std::borrow::Cow;

/// Whether a character cannot be shown as itself: C0 and C1 controls and
/// DEL (C1's CSI, U+009B, starts an escape sequence on some terminals just
/// as ESC does).
fn is_control(c: char) -> bool {
    c.is_control()
}

/// Appends the C escape of one byte: `\n` and its kin, else octal `\NNN`.
fn push_byte(out: &mut String, b: u8) {
    match b {
        0x07 => out.push_str("\\a"),
        0x08 => out.push_str("\\b"),
        b'\t' => out.push_str("\\t"),
        b'\n' => out.push_str("\\n"),
        0x0b => out.push_str("\\v"),
        0x0c => out.push_str("\\f"),
        b'\r' => out.push_str("\\r"),
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        _ => out.push_str(&format!("\\{b:03o}")),
    }
}

/// `s` with its control characters C-escaped and nothing else changed: for
/// a context that does its own quoting (a Markdown code span).
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                push_byte(&mut out, b);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A name as git prints a path: as it is when it holds no control
/// character, double quote, backslash or invalid UTF-8; else in double
/// quotes with C escapes (`\t`, `\"`, `\\`, octal `\033`). Valid UTF-8
/// beyond ASCII stays readable.
pub fn name(raw: &(impl AsRef<[u8]> + ?Sized)) -> Cow<'_, str> {
    let raw = raw.as_ref();
    let plain = std::str::from_utf8(raw)
        .ok()
        .filter(|s| !s.chars().any(|c| is_control(c) || c == '"' || c == '\\'));
    if let Some(s) = plain {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(raw.len() + 8);
    out.push('"');
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_control(c) || c == '"' || c == '\\' {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    push_byte(&mut out, b);
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            push_byte(&mut out, *b);
        }
    }
    out.push('"');
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_as_they_are() {
        assert_eq!(
            name("files/file/etc/nginx.conf"),
            "files/file/etc/nginx.conf"
        );
        assert_eq!(name("files/file/été/ü.txt"), "files/file/été/ü.txt");
        assert!(matches!(name("a b"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_bytes_quotes_and_backslashes_are_quoted_as_git_does() {
        assert_eq!(
            name("evil\x1b]0;PWNED\x07\x1b[2J\r.txt"),
            r#""evil\033]0;PWNED\a\033[2J\r.txt""#
        );
        assert_eq!(name("a\"b\\c\td\ne"), r#""a\"b\\c\td\ne""#);
        assert_eq!(name("\x08\x0b\x0c\x7f\x01"), r#""\b\v\f\177\001""#);
        // C1 CSI, valid UTF-8, still a control.
        assert_eq!(name("a\u{9b}2J"), r#""a\302\2332J""#);
    }

    #[test]
    fn invalid_utf8_is_octal_and_valid_utf8_beside_it_is_kept() {
        assert_eq!(name(&b"caf\xe9/\xc3\xa9"[..]), r#""caf\351/é""#);
    }

    #[test]
    fn markdown_escapes_controls_alike_without_quotes() {
        assert_eq!(escape_controls("a\x1b[2J\"b\""), "a\\033[2J\"b\"");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
    }
}

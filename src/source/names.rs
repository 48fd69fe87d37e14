//! Which tree entry names are never checked out, decided as Git's
//! `verify_path` decides them (read.c, path.c), and how a name that is
//! not valid UTF-8 is shown. A crafted tree may hold `www/.git/config`, or
//! a name some file system folds to `.git` (`.GIT`, `git~1`, `.git. `,
//! `.git::$INDEX_ALLOCATION`, `.g\u{200c}it`); applied, it would make a
//! working repository under the root whose config runs commands for anyone
//! who runs `git` there. Git refuses every one of them on every platform
//! (`core.protectNTFS` is on by default; HFS+ folding is refused here too).

/// Why Git would refuse to check out the tree entry `name` (one component)
/// of the given kind, or `None` when it would not.
pub(crate) fn refused(name: &[u8], symlink: bool) -> Option<String> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Some("not a valid file name".into());
    }
    if name.contains(&0) {
        return Some("the name contains a NUL byte".into());
    }
    // Backslash separates components on NTFS, so each part is checked.
    if name
        .split(|b| *b == b'\\')
        .any(|part| is_dot_git(part) || is_ntfs_dot_git(part))
        || is_hfs_dot(name, b"git")
    {
        return Some(
            "a name that is `.git` on some file system; Git never checks it out, \
             and tend never applies it"
                .into(),
        );
    }
    let gitmodules = name
        .split(|b| *b == b'\\')
        .any(|part| is_ntfs_dot_generic(part, b"gitmodules", b"gi7eba"))
        || is_hfs_dot(name, b"gitmodules");
    if symlink && gitmodules {
        return Some("`.gitmodules` as a symbolic link; Git never checks it out".into());
    }
    None
}

/// `.git` in any case, exactly.
fn is_dot_git(part: &[u8]) -> bool {
    part.eq_ignore_ascii_case(b".git")
}

/// `.git` or `git~1` (its 8.3 short name), in any case, followed only by
/// dots and spaces (which NTFS drops) up to the end or a `:` (an
/// alternate data stream of it).
fn is_ntfs_dot_git(part: &[u8]) -> bool {
    let rest = if part.len() >= 4 && part[..4].eq_ignore_ascii_case(b".git") {
        &part[4..]
    } else if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"git~1") {
        &part[5..]
    } else {
        return false;
    };
    dots_and_spaces_to_end_or_stream(rest)
}

fn dots_and_spaces_to_end_or_stream(rest: &[u8]) -> bool {
    for &b in rest {
        match b {
            b':' => return true,
            b'.' | b' ' => {}
            _ => return false,
        }
    }
    true
}

/// Git's `is_ntfs_dot_generic`: `.<name>` with trailing dots and spaces or
/// a stream, its short name `<first 6>~1`..`~4`, or the fall-back short
/// name `<prefix>~<digits>` NTFS makes when those are taken.
fn is_ntfs_dot_generic(part: &[u8], dotgit_name: &[u8], short_prefix: &[u8]) -> bool {
    let n = dotgit_name.len();
    if part.len() > n && part[0] == b'.' && part[1..=n].eq_ignore_ascii_case(dotgit_name) {
        return dots_and_spaces_to_end_or_stream(&part[n + 1..]);
    }
    if part.len() >= 8
        && part[..6].eq_ignore_ascii_case(&dotgit_name[..6])
        && part[6] == b'~'
        && (b'1'..=b'4').contains(&part[7])
    {
        return dots_and_spaces_to_end_or_stream(&part[8..]);
    }
    // The fall-back: up to 6 characters of the prefix, `~`, then digits,
    // 8 characters in all.
    let mut i = 0;
    let mut saw_tilde = false;
    while i < 8 {
        let Some(&c) = part.get(i) else {
            return false;
        };
        if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            match part.get(i) {
                Some(d) if (b'1'..=b'9').contains(d) => {}
                _ => return false,
            }
            saw_tilde = true;
        } else if i >= 6 || c >= 0x80 || c.to_ascii_lowercase() != short_prefix[i] {
            return false;
        }
        i += 1;
    }
    dots_and_spaces_to_end_or_stream(&part[8..])
}

/// Code points HFS+ ignores when comparing names (Git's `next_hfs_char`).
fn hfs_ignored(c: char) -> bool {
    matches!(
        c as u32,
        0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff
    )
}

/// `.<needle>` once the code points HFS+ ignores are dropped and ASCII case
/// is folded. A name that is not valid UTF-8 is never one.
fn is_hfs_dot(name: &[u8], needle: &[u8]) -> bool {
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let mut chars = name.chars().filter(|c| !hfs_ignored(*c));
    if chars.next() != Some('.') {
        return false;
    }
    for want in needle {
        match chars.next() {
            Some(c) if c.is_ascii() && c.to_ascii_lowercase() == *want as char => {}
            _ => return false,
        }
    }
    chars.next().is_none()
}

/// A name or path for messages and identities: valid UTF-8 as it is, each
/// byte of an invalid sequence as `\xNN` (so `caf\xe9.html`), and a
/// component that would read as a separator or a `.`/`..` escaped too.
pub(crate) fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\0' => out.push_str("\\x00"),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// [`escape`] for one tree entry name: `/` inside it, and a name that is
/// empty, `.` or `..`, are escaped so the result is one path component.
pub(crate) fn escape_name(name: &[u8]) -> String {
    match name {
        b"" => "\\x".into(),
        b"." => "\\x2e".into(),
        b".." => "\\x2e\\x2e".into(),
        _ => escape(name).replace('/', "\\x2f"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_git_refuses_as_dot_git_is_refused() {
        for name in [
            ".git",
            ".GIT",
            ".Git",
            "git~1",
            "GIT~1",
            ".git.",
            ".git ",
            ".git. .",
            ".git...",
            ".git::$INDEX_ALLOCATION",
            ".git:stream",
            "GIT~1::$DATA",
            "x\\.git",
            ".git\\x",
            ".g\u{200c}it",
            ".git\u{200d}",
            "\u{feff}.GIT",
            ".g\u{206a}i\u{202e}t",
        ] {
            assert!(refused(name.as_bytes(), false).is_some(), "{name:?}");
        }
    }

    #[test]
    fn names_git_checks_out_are_kept() {
        for name in [
            ".gitignore",
            ".gitattributes",
            ".gitmodules",
            ".github",
            "git",
            ".gitx",
            "git~2",
            "a.git",
            "x.git.",
            ".git-credentials",
            ".g\u{200c}itx",
            "caf\u{e9}",
        ] {
            assert_eq!(refused(name.as_bytes(), false), None, "{name:?}");
        }
    }

    #[test]
    fn gitmodules_is_refused_only_as_a_symlink() {
        for name in [
            ".gitmodules",
            ".GITMODULES",
            ".gitmodules .",
            ".gitmodules::$DATA",
            "gitmod~1",
            "GITMOD~4",
            "gi7eba~1",
            "gi7eba~9",
            ".git\u{200c}modules",
        ] {
            assert!(refused(name.as_bytes(), true).is_some(), "{name:?}");
            assert_eq!(refused(name.as_bytes(), false), None, "{name:?}");
        }
        for name in [".gitmodulesx", "gitmod~5", "gi7eba~0", "gitmod~1x"] {
            assert_eq!(refused(name.as_bytes(), true), None, "{name:?}");
        }
    }

    #[test]
    fn names_no_checkout_could_make_are_refused() {
        for name in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert!(refused(name, false).is_some(), "{name:?}");
        }
    }

    #[test]
    fn invalid_utf8_is_shown_byte_by_byte() {
        assert_eq!(escape(b"www/caf\xe9.html"), "www/caf\\xe9.html");
        assert_eq!(escape("café".as_bytes()), "café");
        assert_eq!(escape(b"\xff\xfe"), "\\xff\\xfe");
        assert_eq!(escape_name(b".."), "\\x2e\\x2e");
        assert_eq!(escape_name(b"a/b"), "a\\x2fb");
    }
}

//! Where a dotted key (`policy.max_prune`) was written in a config file's
//! text, for problems to name its line.

/// The line (from 1) of a dotted key in a config file's block-style YAML;
/// the deepest part found when the rest is written inline (`policy:
/// {max_prune: 90%}`) or is a list's item, `None` when not even the first
/// part is.
pub fn line_of_key(text: &str, dotted: &str) -> Option<usize> {
    let mut parts = dotted.split('.').filter(|p| !p.is_empty());
    let mut want = parts.next()?;
    let mut found: Option<(usize, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if let Some((_, parent)) = found {
            if indent <= parent {
                break;
            }
        }
        let unquoted = trimmed.trim_start_matches(['"', '\'']);
        let key = unquoted
            .strip_prefix(want)
            .map(|rest| rest.trim_start_matches(['"', '\'']))
            .is_some_and(|rest| rest.trim_start().starts_with(':'));
        if key {
            found = Some((i + 1, indent));
            match parts.next() {
                Some(next) => want = next,
                None => break,
            }
        }
    }
    found.map(|(line, _)| line)
}

#[cfg(test)]
mod tests {
    use super::line_of_key;

    #[test]
    fn finds_nested_keys_and_the_deepest_part_written_inline() {
        let text = "# tend\nsource:\n  repo: x\npolicy:\n  prune: true\n\n  max_prune: 90%\nlog: {level: loud}\n";
        assert_eq!(line_of_key(text, "policy.max_prune"), Some(7));
        assert_eq!(line_of_key(text, "source.repo"), Some(3));
        assert_eq!(line_of_key(text, "log.level"), Some(8));
        assert_eq!(line_of_key(text, "hooks.reload"), None);
        assert_eq!(line_of_key(text, ""), None);
        // A key of the same name under another section is not taken.
        assert_eq!(line_of_key("a:\n  x: 1\nb:\n  y: 2\n", "a.y"), Some(1));
    }
}

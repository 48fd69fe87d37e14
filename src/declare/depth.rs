//! How deep a YAML text nests, found before serde_yaml reads it. libyaml's
//! scanner costs time in proportion to the depth of flow collections for
//! every token (`[[[[…` 25,000 deep: 1.4 s; 100,000 deep: 24 s), and
//! serde_yaml checks its recursion limit only after the whole document has
//! been scanned. Here the same parser is read one event at a time and
//! stopped as soon as collections nest past [`MAX_DEPTH`], so a hostile
//! file costs time in proportion to its length.

use std::mem::MaybeUninit;

use unsafe_libyaml as unsafe_yaml;

/// Collections nested deeper than this are refused (serde_yaml's own
/// recursion limit).
pub const MAX_DEPTH: usize = 128;

/// The line (from 1) where collections first nest deeper than
/// [`MAX_DEPTH`]; `None` when they never do, or when the text is not YAML
/// (the real parse reports that).
pub fn too_deep(text: &str) -> Option<usize> {
    // Block collections nest only by indentation, which costs nothing
    // extra; flow collections need an opening bracket each.
    let openers = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    if openers <= MAX_DEPTH {
        return None;
    }
    // SAFETY: the parser is initialized before use and deleted once; its
    // input is `text`, which outlives it; each event is deleted once, after
    // its fields are read.
    unsafe {
        let mut parser = MaybeUninit::<unsafe_yaml::yaml_parser_t>::uninit();
        if unsafe_yaml::yaml_parser_initialize(parser.as_mut_ptr()).fail {
            return None;
        }
        let parser = parser.as_mut_ptr();
        unsafe_yaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        let mut depth = 0usize;
        let mut found = None;
        loop {
            let mut event = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
            if unsafe_yaml::yaml_parser_parse(parser, event.as_mut_ptr()).fail {
                break;
            }
            let event = event.as_mut_ptr();
            let kind = (*event).type_;
            let line = (*event).start_mark.line as usize + 1;
            unsafe_yaml::yaml_event_delete(event);
            match kind {
                unsafe_yaml::YAML_SEQUENCE_START_EVENT | unsafe_yaml::YAML_MAPPING_START_EVENT => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        found = Some(line);
                        break;
                    }
                }
                unsafe_yaml::YAML_SEQUENCE_END_EVENT | unsafe_yaml::YAML_MAPPING_END_EVENT => {
                    depth = depth.saturating_sub(1)
                }
                unsafe_yaml::YAML_STREAM_END_EVENT => break,
                _ => {}
            }
        }
        unsafe_yaml::yaml_parser_delete(parser);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_line_where_nesting_goes_too_deep() {
        let deep = format!("a: 1\nb:\n  {}{}\n", "[".repeat(200), "]".repeat(200));
        assert_eq!(too_deep(&deep), Some(3));
        let braces = format!("x: {}1{}\n", "{a: ".repeat(200), "}".repeat(200));
        assert_eq!(too_deep(&braces), Some(1));
    }

    #[test]
    fn shallow_wide_or_broken_texts_pass() {
        let wide = format!("a: [{}]\n", "[1], ".repeat(1000));
        assert_eq!(too_deep(&wide), None);
        let nested = format!("{}{}\n", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(too_deep(&nested), None);
        // Brackets inside quoted text are not collections.
        let quoted = format!("a: \"{}\"\n", "[".repeat(1000));
        assert_eq!(too_deep(&quoted), None);
        // Not YAML at all: left to the real parse.
        let broken = format!("a: \"{}\n", "[".repeat(1000));
        assert_eq!(too_deep(&broken), None);
    }

    #[test]
    fn a_hostile_depth_is_refused_in_time_proportional_to_its_length() {
        // 200,000 deep: about a minute for the scanner if read to the end.
        let text = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        let started = std::time::Instant::now();
        assert_eq!(too_deep(&text), Some(1));
        // Generous: a linear read takes milliseconds even in a debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
}

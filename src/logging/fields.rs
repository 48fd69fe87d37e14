//! How the fields of a text log line are written: `name=value`, with the
//! names a value may hold (a path from the repository, an error naming
//! one) escaped by the rule every text output keeps
//! ([`crate::render::quote`]), so a log line read on a terminal or in a CI
//! log cannot carry an escape sequence.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

use crate::render::quote;

/// The field formatter of the text log format.
pub struct Escaped;

impl<'w> FormatFields<'w> for Escaped {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Visitor {
            writer: &mut writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    result: fmt::Result,
    first: bool,
}

impl Visitor<'_, '_> {
    fn put(&mut self, field: &Field, value: &str) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let pad = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => write!(self.writer, "{pad}{}", quote::escape_controls(value)),
            // A value without a control byte is written as it is, quotes
            // and all, as before: only a value that would act on the
            // terminal is quoted, as git quotes it.
            name if value.chars().any(char::is_control) => {
                write!(self.writer, "{pad}{name}={}", quote::name(value))
            }
            name => write!(self.writer, "{pad}{name}={value}"),
        };
    }
}

impl Visit for Visitor<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        if write!(text, "{value:?}").is_err() {
            self.result = Err(fmt::Error);
            return;
        }
        self.put(field, &text);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    #[test]
    fn names_in_fields_and_messages_are_escaped() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .fmt_fields(Escaped)
            .with_writer(lines.clone())
            .finish();
        let evil = "files/file/evil\x1b]0;PWNED\x07\x1b[2J\r.txt";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(id = %evil, target = "web", kinds = ?["file"], "wrote {evil}");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains(['\x1b', '\x07', '\r']), "{text:?}");
        assert!(
            text.contains(r#"id="files/file/evil\033]0;PWNED\a\033[2J\r.txt""#),
            "{text}"
        );
        assert!(
            text.contains(r"wrote files/file/evil\033]0;PWNED\a\033[2J\r.txt"),
            "{text}"
        );
        assert!(text.contains(r#"target=web kinds=["file"]"#), "{text}");
    }
}

//! Log lines sent to the systemd journal in its native protocol: MESSAGE
//! reads as the text format does (message, then `key=value` fields), and
//! each field is also a journal field of its own, `TEND_<KEY>`, so that
//! `journalctl -u tend TEND_REVISION=...` finds lines by value; PRIORITY
//! follows the level.

use std::fmt::Write as _;
use std::os::unix::net::UnixDatagram;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

const SOCKET: &str = "/run/systemd/journal/socket";

/// A message longer than this is cut: one datagram carries one entry.
const MAX_VALUE: usize = 64 << 10;

/// Whether stderr is connected to the journal: systemd sets JOURNAL_STREAM
/// to the `device:inode` of the stream it gives a service.
pub fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(st) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    dev.parse() == Ok(st.st_dev) && ino.parse() == Ok(st.st_ino)
}

pub struct Journal {
    socket: UnixDatagram,
}

impl Journal {
    pub fn connect() -> std::io::Result<Journal> {
        let socket = UnixDatagram::unbound()?;
        socket.connect(SOCKET)?;
        Ok(Journal { socket })
    }
}

fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "3",
        Level::WARN => "4",
        Level::INFO => "6",
        Level::DEBUG | Level::TRACE => "7",
    }
}

/// Appends one `KEY=value` entry; a value with a newline in the binary
/// form (name, newline, little-endian length, bytes).
fn put(buf: &mut Vec<u8>, key: &str, value: &str) {
    let mut end = value.len().min(MAX_VALUE);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let value = &value.as_bytes()[..end];
    buf.extend_from_slice(key.as_bytes());
    if value.contains(&b'\n') {
        buf.push(b'\n');
        buf.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        buf.push(b'=');
    }
    buf.extend_from_slice(value);
    buf.push(b'\n');
}

/// A journal field name for a tracing field: upper case, letters, digits
/// and underscores only.
fn field_name(name: &str) -> String {
    let mut out = String::from("TEND_");
    out.extend(name.chars().map(|c| match c {
        'a'..='z' => c.to_ascii_uppercase(),
        'A'..='Z' | '0'..='9' => c,
        _ => '_',
    }));
    out.truncate(64);
    out
}

#[derive(Default)]
struct Fields {
    message: String,
    text: String,
    entries: Vec<u8>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
            return;
        }
        let _ = write!(self.text, " {}={value:?}", field.name());
        put(&mut self.entries, &field_name(field.name()), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let shown = format!("{value:?}");
        if field.name() == "message" {
            self.message.push_str(&shown);
            return;
        }
        let _ = write!(self.text, " {}={shown}", field.name());
        put(&mut self.entries, &field_name(field.name()), &shown);
    }
}

impl<S: Subscriber> Layer<S> for Journal {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let mut buf = Vec::with_capacity(256 + fields.entries.len());
        put(&mut buf, "PRIORITY", priority(meta.level()));
        put(&mut buf, "SYSLOG_IDENTIFIER", "tend");
        put(
            &mut buf,
            "MESSAGE",
            &format!("{}{}", fields.message, fields.text),
        );
        put(&mut buf, "TEND_MODULE", meta.target());
        buf.extend_from_slice(&fields.entries);
        if self.socket.send(&buf).is_err() {
            // The journal is gone or the entry too large: the line is not
            // lost, it goes to stderr, which systemd also keeps.
            eprintln!("{}{}", fields.message, fields.text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_use_the_binary_form_for_newlines() {
        let mut buf = Vec::new();
        put(&mut buf, "MESSAGE", "one line");
        put(&mut buf, "TEND_ERROR", "two\nlines");
        let mut want = b"MESSAGE=one line\nTEND_ERROR\n".to_vec();
        want.extend_from_slice(&9u64.to_le_bytes());
        want.extend_from_slice(b"two\nlines\n");
        assert_eq!(buf, want);
    }

    #[test]
    fn field_names_are_journal_names() {
        assert_eq!(field_name("revision"), "TEND_REVISION");
        assert_eq!(field_name("log.level"), "TEND_LOG_LEVEL");
        assert!(field_name(&"x".repeat(100)).len() <= 64);
    }
}

//! The audit log, `<state_dir>/audit.jsonl`: one JSON line per applied change,
//! appended by the single writer and synced per batch.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::{create_state_dir, LedgerError};

pub const AUDIT_FILE: &str = "audit.jsonl";

/// One applied change. Hashes of sensitive content are keyed
/// ([`HashKey`](super::HashKey)); content itself never appears here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub time: SystemTime,
    pub revision: String,
    pub id: String,
    /// `create`, `update` or `delete`.
    pub action: String,
    /// The fields that differed.
    pub why: Vec<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    /// The backup reference of the content the change replaced.
    pub backup: Option<String>,
    /// The resource is sensitive: its backups are not printed without
    /// asking (`tend backup cat --sensitive`).
    pub sensitive: bool,
}

#[derive(serde::Serialize)]
struct Line<'a> {
    time: String,
    revision: &'a str,
    id: &'a str,
    action: &'a str,
    why: &'a [String],
    before: Option<&'a str>,
    after: Option<&'a str>,
    backup: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    sensitive: bool,
}

pub struct AuditLog {
    file: Mutex<File>,
    path: PathBuf,
}

type Res<T> = Result<T, LedgerError>;

impl AuditLog {
    /// Opens the log for appending, creating it (mode 0600) if needed. Call
    /// with the state lock held: a line left half-written by a crash is cut
    /// off, so the next line starts clean.
    pub fn open(state_dir: &Path) -> Res<AuditLog> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(AUDIT_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| LedgerError::io(&path, e))?;
        cut_torn_tail(&mut file).map_err(|e| LedgerError::io(&path, e))?;
        Ok(AuditLog {
            file: Mutex::new(file),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry, durably.
    pub fn append(&self, e: &AuditEntry) -> Res<()> {
        self.append_all(std::slice::from_ref(e))
    }

    /// Appends entries with one write and one sync, for the changes of a pass.
    pub fn append_all(&self, entries: &[AuditEntry]) -> Res<()> {
        let mut buf = Vec::new();
        for e in entries {
            let line = Line {
                time: humantime::format_rfc3339_millis(e.time).to_string(),
                revision: &e.revision,
                id: &e.id,
                action: &e.action,
                why: &e.why,
                before: e.before.as_deref(),
                after: e.after.as_deref(),
                backup: e.backup.as_deref(),
                sensitive: e.sensitive,
            };
            serde_json::to_writer(&mut buf, &line).expect("an audit line serializes");
            buf.push(b'\n');
        }
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        (&*file)
            .write_all(&buf)
            .and_then(|()| file.sync_data())
            .map_err(|e| LedgerError::io(&self.path, e))
    }

    /// Every entry, oldest first, as JSON.
    pub fn read_all(&self) -> Res<Vec<serde_json::Value>> {
        read_entries(&self.path)
    }

    /// Reads the log of `state_dir` without opening it for writing, for
    /// readers beside a running daemon; no log yet reads as empty.
    pub fn read_state_dir(state_dir: &Path) -> Res<Vec<serde_json::Value>> {
        let path = state_dir.join(AUDIT_FILE);
        if !path.exists() {
            return Ok(Vec::new());
        }
        read_entries(&path)
    }
}

/// At most this much of the log's end is read by [`tail`].
pub const TAIL_BYTES: u64 = 16 << 20;

/// The entries of `state_dir`'s log that `keep` selects, newest first, read
/// backwards from the end: at most `max` of them, from at most
/// [`TAIL_BYTES`] of the log, so a long history costs a bounded read.
/// Returns whether the read stopped before the log's start.
pub fn tail(
    state_dir: &Path,
    max: usize,
    mut keep: impl FnMut(&serde_json::Value) -> bool,
) -> Res<(Vec<serde_json::Value>, bool)> {
    let path = state_dir.join(AUDIT_FILE);
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
        Err(e) => return Err(LedgerError::io(&path, e)),
    };
    let io = |e| LedgerError::io(&path, e);
    let len = file.metadata().map_err(io)?.len();
    let floor = len.saturating_sub(TAIL_BYTES);
    let mut out = Vec::new();
    let mut end = len;
    // Bytes after the last newline seen: a line in progress, or the start
    // of a line whose beginning is in the next chunk back.
    let mut partial: Vec<u8> = Vec::new();
    while end > floor && out.len() < max {
        let start = end.saturating_sub(64 << 10).max(floor);
        let mut chunk = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        file.read_exact(&mut chunk).map_err(io)?;
        chunk.extend_from_slice(&partial);
        let mut lines: Vec<&[u8]> = chunk.split(|b| *b == b'\n').collect();
        // The piece before the first newline may be cut: keep it for the
        // next chunk back, unless this chunk starts the log.
        let head = if start > 0 {
            lines.remove(0).to_vec()
        } else {
            Vec::new()
        };
        // After the last newline: a line torn or in progress at the log's
        // end, or nothing (the newline added after a cut piece).
        lines.pop();
        for line in lines.iter().rev() {
            if line.is_empty() {
                continue;
            }
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                if keep(&v) {
                    out.push(v);
                    if out.len() >= max {
                        break;
                    }
                }
            }
        }
        partial = head;
        partial.push(b'\n');
        end = start;
    }
    Ok((out, end > 0))
}

/// A last line without its newline is a write in
/// progress, or torn by a crash, and is skipped.
fn read_entries(path: &Path) -> Res<Vec<serde_json::Value>> {
    let file = File::open(path).map_err(|e| LedgerError::io(path, e))?;
    let mut out = Vec::new();
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    for number in 1.. {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| LedgerError::io(path, e))?;
        if n == 0 || !line.ends_with('\n') {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line).map_err(|e| LedgerError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("line {number}: {e}"),
        })?;
        out.push(value);
    }
    Ok(out)
}

/// Truncates the file after its last newline.
fn cut_torn_tail(file: &mut File) -> std::io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    // Lines are short; look back in chunks rather than reading the whole log.
    let mut end = len;
    let mut chunk = vec![0u8; 8192];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(buf)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep != len {
                file.set_len(keep)?;
                file.sync_data()?;
            }
            return Ok(());
        }
        end = start;
    }
    file.set_len(0)?;
    file.sync_data()
}

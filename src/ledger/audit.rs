//! The audit log, `<state_dir>/audit.jsonl`: one JSON line per applied change,
//! appended by the single writer and synced per batch; read from its end.

mod back;
mod rotate;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::{create_state_dir, LedgerError};

pub use back::{Backwards, Tail};
pub use rotate::Rotation;

pub const AUDIT_FILE: &str = "audit.jsonl";
/// Rotated generations a reader looks for at most.
const GENERATIONS_READ: usize = 64;

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
    current: Mutex<Current>,
    dir: PathBuf,
    path: PathBuf,
}

/// The file appended to, and what rotation needs to know of it.
struct Current {
    file: File,
    /// When it was started: its lines are no older.
    started: SystemTime,
    rotation: Rotation,
}

type Res<T> = Result<T, LedgerError>;

impl AuditLog {
    /// Opens the log for appending, creating it (mode 0600) if needed. Call
    /// with the state lock held: a line left half-written by a crash is cut
    /// off, so the next line starts clean.
    pub fn open(state_dir: &Path) -> Res<AuditLog> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(AUDIT_FILE);
        let mut file = rotate::open_current(&path).map_err(|e| LedgerError::io(&path, e))?;
        cut_torn_tail(&mut file).map_err(|e| LedgerError::io(&path, e))?;
        let started = rotate::started(&file).map_err(|e| LedgerError::io(&path, e))?;
        Ok(AuditLog {
            current: Mutex::new(Current {
                file,
                started,
                rotation: Rotation::default(),
            }),
            dir: state_dir.to_path_buf(),
            path,
        })
    }

    /// Sets the bounds the log is kept within from now on.
    pub fn set_rotation(&self, rotation: Rotation) {
        self.lock().rotation = rotation;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rotates the log if it is due by size (before `incoming` bytes are
    /// appended) or age, and deletes generations past the bounds.
    fn keep_within(&self, cur: &mut Current, incoming: u64) -> Res<()> {
        let now = SystemTime::now();
        let io = |e| LedgerError::io(&self.path, e);
        let len = cur.file.metadata().map_err(io)?.len();
        if cur.rotation.due(len, incoming, cur.started, now) {
            cur.file = rotate::rotate(&self.dir, AUDIT_FILE, GENERATIONS_READ).map_err(io)?;
            cur.started = now;
        }
        let len = cur.file.metadata().map_err(io)?.len();
        rotate::prune(&self.dir, AUDIT_FILE, &cur.rotation, len, now).map_err(io)
    }

    /// Rotates and trims the log if its bounds say so, without appending:
    /// for an idle log whose lines age past the retention.
    pub fn maintain(&self) -> Res<()> {
        let mut cur = self.lock();
        self.keep_within(&mut cur, 0)
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
        let mut cur = self.lock();
        // A log that cannot rotate still records the changes.
        if let Err(e) = self.keep_within(&mut cur, buf.len() as u64) {
            tracing::warn!(error = %e, "cannot rotate the audit log");
        }
        append_whole(&mut cur.file, &buf).map_err(|e| LedgerError::io(&self.path, e))
    }

    /// Every entry of the current file, oldest first, as JSON; a damaged
    /// line is an error naming it. For checks of the whole file: readers
    /// that show the log use [`AuditLog::tail`].
    pub fn read_all(&self) -> Res<Vec<serde_json::Value>> {
        read_entries(&self.path)
    }

    /// The newest `n` entries of the log of `state_dir`, newest first,
    /// reading at most `cap` bytes from the end, across rotated files.
    /// Opens nothing for writing, so it is safe beside a running daemon;
    /// no log yet reads as empty.
    pub fn tail(state_dir: &Path, n: usize, cap: u64) -> Res<Tail> {
        back::tail(Self::iter_back(state_dir, cap)?, n)
    }

    /// Every entry of the log of `state_dir`, newest first, reading at most
    /// `cap` bytes: the current file, then `audit.jsonl.1`, `.2`, ...
    pub fn iter_back(state_dir: &Path, cap: u64) -> Res<Backwards> {
        Backwards::open(
            back::generations(state_dir, AUDIT_FILE, GENERATIONS_READ),
            cap,
        )
    }
}

/// At most this much of the log's end is read by [`tail`].
pub const TAIL_BYTES: u64 = 16 << 20;

/// The entries of `state_dir`'s log that `keep` selects, newest first, read
/// backwards from the end across rotated files: at most `max` of them,
/// from at most [`TAIL_BYTES`] of the log, so a long history costs a
/// bounded read. Returns whether the read stopped before the log's start.
pub fn tail(
    state_dir: &Path,
    max: usize,
    mut keep: impl FnMut(&serde_json::Value) -> bool,
) -> Res<(Vec<serde_json::Value>, bool)> {
    let mut back = AuditLog::iter_back(state_dir, TAIL_BYTES)?;
    let mut out = Vec::new();
    while out.len() < max {
        match back.next() {
            Some(v) => {
                let v = v?;
                if keep(&v) {
                    out.push(v);
                }
            }
            None => return Ok((out, back.capped())),
        }
    }
    Ok((out, true))
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

/// Appends `buf` (whole lines) so that the file ends at a line boundary
/// whatever happens: a tail left torn by an earlier failure is cut first,
/// and a write or sync that fails (a full disk cuts a write short) is
/// undone by truncating back to the length before it. Otherwise the next
/// batch would be appended after a fragment, an invalid line mid-log.
fn append_whole(file: &mut File, buf: &[u8]) -> std::io::Result<()> {
    let mut len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8];
        file.read_exact_at(&mut last, len - 1)?;
        if last[0] != b'\n' {
            cut_torn_tail(file)?;
            len = file.metadata()?.len();
        }
    }
    let written = (&*file).write_all(buf).and_then(|()| file.sync_data());
    if let Err(e) = written {
        // Shrinking needs no space; if even this fails, the next append
        // finds the torn tail and cuts it.
        if file.set_len(len).is_ok() {
            let _ = file.sync_data();
        }
        return Err(e);
    }
    Ok(())
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

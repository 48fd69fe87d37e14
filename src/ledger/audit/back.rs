//! Reading the audit log from its end: newest line first, across the
//! current file and its rotated generations, in blocks, with a cap on the
//! bytes read, so no reader ever holds the whole log.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::super::LedgerError;

/// Bytes read at a time, backwards.
const BLOCK: usize = 64 << 10;
/// A line longer than this is no line tend wrote: it is skipped, and never
/// held whole.
const MAX_LINE: usize = 256 << 10;

/// What a file yields, read backwards.
enum Piece {
    Line(Vec<u8>),
    /// A line past [`MAX_LINE`], dropped.
    Oversized,
    /// The file's start.
    End,
    /// The byte cap ran out before the next line's start.
    Capped,
}

/// One file, read from its end. The bytes after its last newline are a
/// write in progress or a torn one, and are dropped.
struct BackFile {
    file: File,
    path: PathBuf,
    /// File offset of `buf`'s first byte.
    pos: u64,
    /// Bytes not yet returned; they end where the last returned line began.
    buf: Vec<u8>,
    /// The piece after the last newline is still to be dropped.
    tail: bool,
    /// `buf` lost the start of an over-long line.
    oversized: bool,
}

impl BackFile {
    fn open(path: PathBuf) -> std::io::Result<Option<BackFile>> {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let pos = file.metadata()?.len();
        Ok(Some(BackFile {
            file,
            path,
            pos,
            buf: Vec::new(),
            tail: true,
            oversized: false,
        }))
    }

    fn piece(&mut self, line: Vec<u8>) -> Option<Piece> {
        let oversized = std::mem::take(&mut self.oversized);
        if std::mem::take(&mut self.tail) {
            return None;
        }
        Some(if oversized {
            Piece::Oversized
        } else {
            Piece::Line(line)
        })
    }

    fn next(&mut self, budget: &mut u64) -> std::io::Result<Piece> {
        loop {
            if let Some(i) = self.buf.iter().rposition(|&b| b == b'\n') {
                let line = self.buf.split_off(i + 1);
                self.buf.truncate(i);
                match self.piece(line) {
                    Some(p) => return Ok(p),
                    None => continue,
                }
            }
            if self.pos == 0 {
                if self.buf.is_empty() && !self.oversized {
                    return Ok(Piece::End);
                }
                let line = std::mem::take(&mut self.buf);
                match self.piece(line) {
                    Some(p) => return Ok(p),
                    None => return Ok(Piece::End),
                }
            }
            if self.buf.len() > MAX_LINE {
                self.oversized = true;
                self.buf = Vec::new();
            }
            let want = (BLOCK as u64).min(self.pos).min(*budget);
            if want == 0 {
                return Ok(Piece::Capped);
            }
            let start = self.pos - want;
            let mut block = vec![0u8; want as usize];
            self.file.read_exact_at(&mut block, start)?;
            block.extend_from_slice(&self.buf);
            self.buf = block;
            self.pos = start;
            *budget -= want;
        }
    }
}

/// The log's entries, newest first, across the current file and its
/// rotated generations (`audit.jsonl`, `audit.jsonl.1`, ...). Lines that
/// are not JSON objects are skipped and counted, not fatal: one damaged line
/// must not hide the rest of the log.
pub struct Backwards {
    files: VecDeque<BackFile>,
    budget: u64,
    skipped: usize,
    capped: bool,
}

impl Backwards {
    /// Opens every generation at once, so a rotation while reading neither
    /// repeats nor loses a file. Reads at most `cap` bytes in all.
    pub(super) fn open(paths: Vec<PathBuf>, cap: u64) -> Result<Backwards, LedgerError> {
        let mut files = VecDeque::new();
        for path in paths {
            match BackFile::open(path.clone()) {
                Ok(Some(f)) => files.push_back(f),
                Ok(None) => {}
                Err(e) => return Err(LedgerError::io(&path, e)),
            }
        }
        Ok(Backwards {
            files,
            budget: cap,
            skipped: 0,
            capped: false,
        })
    }

    /// Lines skipped so far: not JSON objects, or too long.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Whether the byte cap ended the reading before the log's start.
    pub fn capped(&self) -> bool {
        self.capped
    }
}

impl Iterator for Backwards {
    type Item = Result<Value, LedgerError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let f = self.files.front_mut()?;
            let piece = match f.next(&mut self.budget) {
                Ok(p) => p,
                Err(e) => {
                    let err = LedgerError::io(&f.path, e);
                    self.files.clear();
                    return Some(Err(err));
                }
            };
            match piece {
                Piece::End => {
                    self.files.pop_front();
                }
                Piece::Capped => {
                    self.capped = true;
                    self.files.clear();
                }
                Piece::Oversized => self.skipped += 1,
                Piece::Line(line) if line.trim_ascii().is_empty() => {}
                Piece::Line(line) => match serde_json::from_slice::<Value>(&line) {
                    Ok(v) if v.is_object() => return Some(Ok(v)),
                    _ => self.skipped += 1,
                },
            }
        }
    }
}

/// The newest entries of a log, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tail {
    pub entries: Vec<Value>,
    /// Lines passed over on the way that could not be read.
    pub skipped: usize,
    /// The byte cap stopped the reading before `n` entries were found.
    pub capped: bool,
}

/// The file names of the log in `dir`, newest first: the current one, then
/// `.1`, `.2`, ... up to `.most`, those that exist. A gap does not end the
/// list: a rotation renames one generation after another.
pub(super) fn generations(dir: &Path, name: &str, most: usize) -> Vec<PathBuf> {
    let mut out = vec![dir.join(name)];
    out.extend(
        (1..=most)
            .map(|n| dir.join(format!("{name}.{n}")))
            .filter(|p| p.exists()),
    );
    out
}

pub(super) fn tail(mut back: Backwards, n: usize) -> Result<Tail, LedgerError> {
    let mut entries = Vec::with_capacity(n.min(1024));
    while entries.len() < n {
        match back.next() {
            Some(e) => entries.push(e?),
            None => break,
        }
    }
    Ok(Tail {
        entries,
        skipped: back.skipped(),
        capped: back.capped(),
    })
}

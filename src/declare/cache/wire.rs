//! The cache file's body, field by field: little-endian numbers,
//! length-prefixed strings, hashed as they are written and read, and never
//! read past the length the header gives.

use std::io::{self, BufWriter, Read, Write};

use git2::Oid;
use sha2::{Digest, Sha256};

use crate::declare::Problem;

/// What the body is written to, hashed and counted as it goes.
pub(super) struct Writer<W> {
    pub(super) out: W,
    pub(super) hash: Sha256,
    pub(super) len: u64,
}

/// The stream under a buffered writer (or a cursor in tests).
pub(super) trait IntoInner {
    type Inner;
    fn into_inner(self) -> io::Result<Self::Inner>;
}

impl<W: Write> IntoInner for BufWriter<W> {
    type Inner = W;
    fn into_inner(self) -> io::Result<W> {
        BufWriter::into_inner(self).map_err(|e| e.into_error())
    }
}

impl IntoInner for std::io::Cursor<Vec<u8>> {
    type Inner = std::io::Cursor<Vec<u8>>;
    fn into_inner(self) -> io::Result<Self::Inner> {
        Ok(self)
    }
}

impl<W: Write> Writer<W> {
    pub(super) fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.hash.update(b);
        self.len += b.len() as u64;
        self.out.write_all(b)
    }
    pub(super) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
    pub(super) fn u8(&mut self, b: u8) -> io::Result<()> {
        self.raw(&[b])
    }
    pub(super) fn u64(&mut self, n: u64) -> io::Result<()> {
        self.raw(&n.to_le_bytes())
    }
    pub(super) fn len(&mut self, n: usize) -> io::Result<()> {
        self.u64(n as u64)
    }
    pub(super) fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.len(b.len())?;
        self.raw(b)
    }
    pub(super) fn str(&mut self, s: &str) -> io::Result<()> {
        self.bytes(s.as_bytes())
    }
    pub(super) fn strs<'a>(
        &mut self,
        items: impl Iterator<Item = &'a str>,
        n: usize,
    ) -> io::Result<()> {
        self.len(n)?;
        for s in items {
            self.str(s)?;
        }
        Ok(())
    }
    pub(super) fn opt_str(&mut self, s: Option<&str>) -> io::Result<()> {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1)?;
                self.str(s)
            }
        }
    }
    pub(super) fn opt_u32(&mut self, n: Option<u32>) -> io::Result<()> {
        match n {
            None => self.u8(0),
            Some(n) => {
                self.u8(1)?;
                self.u64(u64::from(n))
            }
        }
    }
}

/// The body read back, hashed as it goes; never past its stated length.
pub(super) struct Reader<R> {
    pub(super) input: R,
    pub(super) left: u64,
    pub(super) hash: Sha256,
    pub(super) buf: Vec<u8>,
}

impl<R: Read> Reader<R> {
    pub(super) fn take(&mut self, n: usize) -> Option<&[u8]> {
        self.left = self.left.checked_sub(n as u64)?;
        self.buf.resize(n, 0);
        self.input.read_exact(&mut self.buf).ok()?;
        self.hash.update(&self.buf);
        Some(&self.buf)
    }
    pub(super) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// A count, bounded by what is left to read (one byte an item at
    /// least), so a damaged length cannot ask for a huge allocation.
    pub(super) fn len(&mut self) -> Option<usize> {
        let n = self.u64()?;
        (n <= self.left).then(|| usize::try_from(n).ok()).flatten()
    }
    pub(super) fn bytes(&mut self) -> Option<&[u8]> {
        let n = self.len()?;
        self.take(n)
    }
    pub(super) fn str(&mut self) -> Option<&str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    pub(super) fn strings(&mut self) -> Option<Vec<String>> {
        (0..self.len()?)
            .map(|_| self.str().map(str::to_string))
            .collect()
    }
    pub(super) fn opt_str(&mut self) -> Option<Option<String>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.str()?.to_string())),
            _ => None,
        }
    }
    pub(super) fn opt_u32(&mut self) -> Option<Option<u32>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(u32::try_from(self.u64()?).ok()?)),
            _ => None,
        }
    }
    pub(super) fn problems(&mut self) -> Option<Vec<Problem>> {
        (0..self.len()?)
            .map(|_| {
                Some(Problem {
                    file: self.str()?.to_string(),
                    line: usize::try_from(self.u64()?).ok()?,
                    message: self.str()?.to_string(),
                })
            })
            .collect()
    }
    pub(super) fn oid(&mut self) -> Option<Oid> {
        Oid::from_bytes(self.take(20)?).ok()
    }
}

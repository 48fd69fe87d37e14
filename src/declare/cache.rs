//! The desired state of the last revision read, kept in the state dir so a
//! pass at a revision already seen neither walks its tree nor derives its
//! declarations again. The file names what it was read from (the commit,
//! and the basis: source path, mirror mode, targets and hooks, the host's
//! account files owners are resolved in) by a digest, carries a format
//! version and a checksum of its body, and is written aside and renamed.
//! One that is damaged, of another version or of another key is ignored,
//! and the declarations are read from the tree again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::Oid;
use sha2::{Digest, Sha256};

use super::{Declared, Problem, WrittenOwner};
use crate::model::{
    Desired, FileSpec, Origin, RelPath, ResourceId, SharedStr, Spec, StructuredSpec,
};

const MAGIC: &[u8; 8] = b"tenddecl";
/// Bumped whenever the encoding below or what a declaration holds changes.
const VERSION: u32 = 1;
const FILE: &str = "declared.cache";
const HEADER: usize = 8 + 4 + 32 + 32;

/// Where the cache lives in a state dir.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The digest naming what a declaration was read from: the commit, the
/// basis it was declared on, and the host's account files (a name an owner
/// is declared by resolves through them).
pub fn key(commit: Oid, basis: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(commit.as_bytes());
    h.update(basis.as_bytes());
    for f in ["/etc/passwd", "/etc/group"] {
        if let Ok(m) = fs::metadata(f) {
            h.update(m.ino().to_le_bytes());
            h.update(m.len().to_le_bytes());
            h.update(m.mtime().to_le_bytes());
            h.update(m.mtime_nsec().to_le_bytes());
        }
    }
    h.finalize().into()
}

/// The declaration kept under `key`, if the file holds one, whole.
pub fn load(file: &Path, key: &[u8; 32]) -> Option<Declared> {
    let bytes = fs::read(file).ok()?;
    decode(&bytes, key)
}

/// Keeps `declared` under `key`. Best effort: without it the next pass reads
/// the tree again.
pub fn store(file: &Path, key: &[u8; 32], declared: &Declared) {
    let bytes = encode(key, declared);
    let temp = file.with_extension(format!("tmp-{}", std::process::id()));
    let done = fs::write(&temp, bytes).and_then(|()| fs::rename(&temp, file));
    if let Err(e) = done {
        let _ = fs::remove_file(&temp);
        tracing::debug!(error = %e, "cannot keep the declaration cache");
    }
}

pub(super) fn encode(key: &[u8; 32], d: &Declared) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64 * d.resources.len() + 1024));
    w.len(d.resources.len());
    let mut last_origin: Option<&str> = None;
    for r in d.resources.values() {
        w.str(r.id.as_str());
        w.str(r.path.as_str());
        match &r.spec {
            Spec::File(f) => {
                w.u8(0);
                w.0.extend_from_slice(f.blob.as_bytes());
                w.u64(f.size);
                w.u64(u64::from(f.mode));
                w.opt_u32(f.uid);
                w.opt_u32(f.gid);
            }
            Spec::Symlink { target } => {
                w.u8(1);
                w.str(target);
            }
            Spec::Structured(s) => {
                w.u8(2);
                w.str(&s.kind);
                w.str(&s.name);
                w.str(&s.spec.to_string());
                w.strs(s.ignore.iter().map(String::as_str), s.ignore.len());
            }
        }
        w.opt_str(r.on_change.as_deref());
        w.u8(match r.self_heal {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        });
        w.u8(u8::from(r.sensitive));
        // Most origins are the path itself or the file before's: shared
        // again when read.
        let file = r.origin.file.as_str();
        if file == r.path.as_str() {
            w.u8(0);
        } else if last_origin == Some(file) {
            w.u8(1);
        } else {
            w.u8(2);
            w.str(file);
        }
        last_origin = Some(file);
        w.u64(r.origin.line as u64);
    }
    w.len(d.blocked.len());
    for (id, why) in &d.blocked {
        w.str(id.as_str());
        w.str(why);
    }
    for problems in [&d.problems, &d.notes] {
        w.len(problems.len());
        for p in problems {
            w.str(&p.file);
            w.u64(p.line as u64);
            w.str(&p.message);
        }
    }
    w.len(d.inline.len());
    let inline: BTreeMap<&Oid, &Vec<u8>> = d.inline.iter().collect();
    for (oid, bytes) in inline {
        w.0.extend_from_slice(oid.as_bytes());
        w.bytes(bytes);
    }
    w.strs(d.links.iter().map(String::as_str), d.links.len());
    w.strs(d.lfs_dirs.iter().map(String::as_str), d.lfs_dirs.len());
    w.len(d.owners.len());
    for (id, o) in &d.owners {
        w.str(id.as_str());
        w.opt_str(o.owner.as_deref());
        w.opt_str(o.group.as_deref());
    }
    let body = w.0;
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&Sha256::digest(&body));
    out.extend_from_slice(&body);
    out
}

pub(super) fn decode(bytes: &[u8], key: &[u8; 32]) -> Option<Declared> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return None;
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().ok()?);
    if version != VERSION || &bytes[12..44] != key {
        return None;
    }
    let body = &bytes[HEADER..];
    if Sha256::digest(body).as_slice() != &bytes[44..76] {
        return None;
    }
    let mut r = Reader(body);
    let mut d = Declared::default();
    let mut last_origin: Option<SharedStr> = None;
    for _ in 0..r.len()? {
        let id = ResourceId::from_string(r.str()?.to_string());
        let path = RelPath::ending(&id, r.str()?).ok()?;
        let spec = match r.u8()? {
            0 => Spec::File(FileSpec {
                blob: r.oid()?,
                size: r.u64()?,
                mode: u32::try_from(r.u64()?).ok()?,
                uid: r.opt_u32()?,
                gid: r.opt_u32()?,
            }),
            1 => Spec::Symlink {
                target: r.str()?.to_string(),
            },
            2 => Spec::Structured(Box::new(StructuredSpec {
                kind: r.str()?.to_string(),
                name: r.str()?.to_string(),
                spec: serde_json::from_str(r.str()?).ok()?,
                ignore: r.strings()?,
            })),
            _ => return None,
        };
        let on_change = r.opt_str()?;
        let self_heal = match r.u8()? {
            0 => None,
            1 => Some(false),
            2 => Some(true),
            _ => return None,
        };
        let sensitive = r.u8()? != 0;
        let file = match r.u8()? {
            0 => path.shared(),
            1 => last_origin.clone()?,
            2 => SharedStr::from(r.str()?),
            _ => return None,
        };
        last_origin = Some(file.clone());
        let line = usize::try_from(r.u64()?).ok()?;
        let desired = Desired {
            id: id.clone(),
            path,
            spec,
            on_change,
            self_heal,
            sensitive,
            origin: Origin { file, line },
        };
        d.resources.insert(id, desired);
    }
    for _ in 0..r.len()? {
        let id = ResourceId::from_string(r.str()?.to_string());
        d.blocked.insert(id, r.str()?.to_string());
    }
    d.problems = r.problems()?;
    d.notes = r.problems()?;
    let mut inline = HashMap::new();
    for _ in 0..r.len()? {
        let oid = r.oid()?;
        inline.insert(oid, r.bytes()?.to_vec());
    }
    d.inline = inline;
    d.links = r.strings()?.into_iter().collect::<BTreeSet<_>>();
    d.lfs_dirs = r.strings()?;
    for _ in 0..r.len()? {
        let id = ResourceId::from_string(r.str()?.to_string());
        let owner = r.opt_str()?;
        let group = r.opt_str()?;
        d.owners.insert(id, WrittenOwner { owner, group });
    }
    r.0.is_empty().then_some(d)
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, b: u8) {
        self.0.push(b);
    }
    fn u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn strs<'a>(&mut self, items: impl Iterator<Item = &'a str>, n: usize) {
        self.len(n);
        for s in items {
            self.str(s);
        }
    }
    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
    fn opt_u32(&mut self, n: Option<u32>) {
        match n {
            None => self.u8(0),
            Some(n) => {
                self.u8(1);
                self.u64(u64::from(n));
            }
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// A count, bounded by what is left to read (one byte an item at
    /// least), so a damaged length cannot ask for a huge allocation.
    fn len(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= self.0.len()).then_some(n)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    fn strings(&mut self) -> Option<Vec<String>> {
        (0..self.len()?)
            .map(|_| self.str().map(str::to_string))
            .collect()
    }
    fn opt_str(&mut self) -> Option<Option<String>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.str()?.to_string())),
            _ => None,
        }
    }
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(u32::try_from(self.u64()?).ok()?)),
            _ => None,
        }
    }
    fn problems(&mut self) -> Option<Vec<Problem>> {
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
    fn oid(&mut self) -> Option<Oid> {
        Oid::from_bytes(self.take(20)?).ok()
    }
}

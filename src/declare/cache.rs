//! The desired state of the last revision read, kept in the state dir so a
//! pass at a revision already seen neither walks its tree nor derives its
//! declarations again. The file names what it was read from (the commit,
//! and the basis: source path, mirror mode, targets and hooks, the host's
//! account files owners are resolved in, the binary) by a digest, carries a format
//! version and a checksum of its body, and is written aside and renamed.
//! One that is damaged, of another version or of another key is ignored,
//! and the declarations are read from the tree again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::Oid;
use sha2::{Digest, Sha256};

mod wire;

use super::{Declared, WrittenOwner};
use crate::model::{
    Declaration, Desired, FileSpec, PathAt, ResourceId, Resources, SharedStr, Spec, StructuredSpec,
};
use wire::{IntoInner, Reader, Writer};

const MAGIC: &[u8; 8] = b"tenddecl";
/// Bumped whenever the encoding below or what a declaration holds changes.
const VERSION: u32 = 2;
const FILE: &str = "declared.cache";
/// Magic, version, key, the body's checksum and its length.
const HEADER: usize = 8 + 4 + 32 + 32 + 8;
const DIGEST_AT: u64 = 8 + 4 + 32;

/// Where the cache lives in a state dir.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The digest naming what a declaration was read from: the commit, the
/// basis it was declared on, the host's account files (a name an owner is
/// declared by resolves through them) and the tend binary reading it.
pub fn key(commit: Oid, basis: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(commit.as_bytes());
    h.update(basis.as_bytes());
    // The binary itself too: another build may declare by other rules.
    for f in ["/etc/passwd", "/etc/group", "/proc/self/exe"] {
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
    let file = fs::File::open(file).ok()?;
    // Read as a stream: the file is never held whole beside what it holds.
    decode_from(BufReader::with_capacity(1 << 16, file), key)
}

/// Keeps `declared` under `key`. Best effort: without it the next pass reads
/// the tree again.
pub fn store(file: &Path, key: &[u8; 32], declared: &Declared) {
    // A secret lives nowhere but in the declaration (and the target): it
    // is not copied into the state dir. Such a revision is read from its
    // tree each time.
    // Nor is one whose keys are to be read again.
    if holds_secret(declared) || declared.reread {
        let _ = fs::remove_file(file);
        return;
    }
    let temp = file.with_extension(format!("tmp-{}", std::process::id()));
    let done = fs::File::create(&temp)
        .and_then(|f| encode_to(BufWriter::with_capacity(1 << 16, f), key, declared))
        .and_then(|f| f.sync_all())
        .and_then(|()| fs::rename(&temp, file));
    if let Err(e) = done {
        let _ = fs::remove_file(&temp);
        tracing::debug!(error = %e, "cannot keep the declaration cache");
    }
}

/// Whether `d` holds what may not be stored: a decrypted secret (its
/// plaintext, or even the id of its plaintext blob), a sensitive plugin
/// object (its values may be decrypted), or sensitive inline content.
fn holds_secret(d: &Declared) -> bool {
    !d.secrets.is_empty()
        || d.resources.values().any(|r| {
            r.decrypted
                || (r.sensitive
                    && match &r.spec {
                        Spec::File(f) => f.secret || d.inline.contains_key(&f.blob),
                        Spec::Structured(_) => true,
                        Spec::Symlink { .. } => false,
                    })
        })
}

#[cfg(test)]
pub(super) fn encode(key: &[u8; 32], d: &Declared) -> Vec<u8> {
    let out = encode_to(std::io::Cursor::new(Vec::new()), key, d).expect("in memory");
    out.into_inner()
}

#[cfg(test)]
pub(super) fn decode(bytes: &[u8], key: &[u8; 32]) -> Option<Declared> {
    decode_from(bytes, key)
}

/// Writes the header with a zero checksum, the body, then the checksum in
/// its place; returns what it wrote to.
fn encode_to<W>(out: W, key: &[u8; 32], d: &Declared) -> io::Result<W::Inner>
where
    W: Write + Seek + IntoInner,
{
    let mut w = Writer {
        out,
        hash: Sha256::new(),
        len: 0,
    };
    w.out.write_all(MAGIC)?;
    w.out.write_all(&VERSION.to_le_bytes())?;
    w.out.write_all(key)?;
    w.out.write_all(&[0u8; 32])?;
    w.out.write_all(&[0u8; 8])?;
    w.body(d)?;
    let digest: [u8; 32] = w.hash.finalize().into();
    let mut out = w.out;
    out.seek(SeekFrom::Start(DIGEST_AT))?;
    out.write_all(&digest)?;
    out.write_all(&w.len.to_le_bytes())?;
    out.into_inner()
}

impl<W: Write> Writer<W> {
    fn body(&mut self, d: &Declared) -> io::Result<()> {
        let w = self;
        w.len(d.resources.len())?;
        let mut last: Option<&Arc<Declaration>> = None;
        for r in d.resources.values() {
            w.str(r.id.as_str())?;
            w.str(r.path_str())?;
            match &r.spec {
                Spec::File(f) => {
                    w.u8(0)?;
                    w.raw(f.blob.as_bytes())?;
                    w.u64(f.size)?;
                    w.u64(u64::from(f.mode))?;
                    w.opt_u32(f.uid.get())?;
                    w.opt_u32(f.gid.get())?;
                }
                Spec::Symlink { target } => {
                    w.u8(1)?;
                    w.str(target)?;
                }
                Spec::Structured(s) => {
                    w.u8(2)?;
                    w.str(&s.kind)?;
                    w.str(&s.name)?;
                    w.str(&s.spec.to_string())?;
                    w.strs(s.ignore.iter().map(String::as_str), s.ignore.len())?;
                }
            }
            w.u8(u8::from(r.sensitive))?;
            // Declarations are shared by the resources they made, which
            // follow each other: shared again when read.
            let declared = &r.declaration;
            if last.is_some_and(|l| Arc::ptr_eq(l, declared)) {
                w.u8(0)?;
            } else {
                w.u8(1)?;
                w.opt_str(declared.file.as_deref())?;
                w.str(&declared.under)?;
                w.str(&declared.suffix)?;
                w.u64(declared.line as u64)?;
                w.opt_str(declared.on_change.as_deref())?;
                w.u8(match declared.self_heal {
                    None => 0,
                    Some(false) => 1,
                    Some(true) => 2,
                })?;
            }
            last = Some(declared);
        }
        w.len(d.blocked.len())?;
        for (id, why) in &d.blocked {
            w.str(id.as_str())?;
            w.str(why)?;
        }
        for problems in [&d.problems, &d.notes] {
            w.len(problems.len())?;
            for p in problems {
                w.str(&p.file)?;
                w.u64(p.line as u64)?;
                w.str(&p.message)?;
            }
        }
        w.len(d.inline.len())?;
        let inline: BTreeMap<&Oid, &Vec<u8>> = d.inline.iter().collect();
        for (oid, bytes) in inline {
            w.raw(oid.as_bytes())?;
            w.bytes(bytes)?;
        }
        w.strs(d.links.iter().map(String::as_str), d.links.len())?;
        w.strs(d.lfs_dirs.iter().map(String::as_str), d.lfs_dirs.len())?;
        w.len(d.owners.len())?;
        for (id, o) in &d.owners {
            w.str(id.as_str())?;
            w.opt_str(o.owner.as_deref())?;
            w.opt_str(o.group.as_deref())?;
        }
        w.flush()
    }
}

fn decode_from(mut input: impl Read, key: &[u8; 32]) -> Option<Declared> {
    let mut header = [0u8; HEADER];
    input.read_exact(&mut header).ok()?;
    if &header[..8] != MAGIC {
        return None;
    }
    let version = u32::from_le_bytes(header[8..12].try_into().ok()?);
    if version != VERSION || &header[12..44] != key {
        return None;
    }
    let digest: [u8; 32] = header[44..76].try_into().ok()?;
    let left = u64::from_le_bytes(header[76..84].try_into().ok()?);
    let mut r = Reader {
        input,
        left,
        hash: Sha256::new(),
        buf: Vec::new(),
    };
    let mut d = Declared::default();
    let mut last: Option<Arc<Declaration>> = None;
    let count = r.len()?;
    // Written in identity order: kept as read, each entry once.
    let mut resources = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let id = ResourceId::from_string(r.str()?.to_string());
        let path_at = PathAt::of(&id, r.str()?)?;
        let spec = match r.u8()? {
            0 => Spec::File(FileSpec {
                blob: r.oid()?,
                size: r.u64()?,
                mode: u32::try_from(r.u64()?).ok()?,
                uid: r.opt_u32()?.into(),
                gid: r.opt_u32()?.into(),
                // Never stored: a revision holding one is not kept.
                secret: false,
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
        let sensitive = r.u8()? != 0;
        let declaration = match r.u8()? {
            0 => last.clone()?,
            1 => Arc::new(Declaration {
                file: r.opt_str()?.map(SharedStr::from),
                under: r.str()?.into(),
                suffix: r.str()?.into(),
                line: usize::try_from(r.u64()?).ok()?,
                on_change: r.opt_str()?,
                self_heal: match r.u8()? {
                    0 => None,
                    1 => Some(false),
                    2 => Some(true),
                    _ => return None,
                },
            }),
            _ => return None,
        };
        last = Some(declaration.clone());
        let desired = Desired {
            id,
            path_at,
            spec,
            declaration,
            sensitive,
            decrypted: false,
        };
        resources.push(desired);
    }
    d.resources = Resources::from_vec(resources);
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
    // Trusted only when the whole body was read and is what was written.
    let mut rest = [0u8; 1];
    let at_end = r.left == 0 && r.input.read(&mut rest).ok()? == 0;
    let whole: [u8; 32] = r.hash.finalize().into();
    (at_end && whole == digest).then_some(d)
}

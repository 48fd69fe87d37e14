//! Create and update: the smallest change that makes the object at a path
//! equal to its spec, either a chmod or chown in place, or a new file or
//! symlink made under a temp name and renamed over the old object.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{self as rfs, AtFlags, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

use super::observe::{open_regular, read_regular, stat_at, Batch, Meta};
use super::resolve::{is_absent, resolve_error};
use super::{transient, FilesTarget, Ops};
use crate::model::{blob_id, Action, Change, ContentSource, Field, FileSpec, Live, Spec};
use crate::target::TargetError;

/// Attributes to set in place; `None` leaves one as it is.
#[derive(Debug, Default, PartialEq, Eq)]
struct Attrs {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
}

#[derive(Debug, PartialEq, Eq)]
enum Step {
    Nothing,
    Attrs(Attrs),
    /// A new object renamed over whatever stands there.
    Replace,
    /// A transient refusal, with its reason.
    Refuse(String),
}

/// What to do, given what stands at the path now. Only the fields the plan
/// names are touched (a create names them all), and a field that already
/// matches is left alone, so a repeated apply writes nothing.
fn decide(change: &Change, spec: &Spec, live: Option<&Live>) -> Step {
    let every = change.action == Action::Create;
    let asks = |want: fn(&Field) -> bool| every || change.fields.iter().any(want);
    let path = &change.path;
    let rewrite = match spec {
        Spec::File(_) => asks(|f| matches!(f, Field::Content | Field::Type { .. })),
        Spec::Symlink { .. } => {
            asks(|f| matches!(f, Field::LinkTarget { .. } | Field::Type { .. }))
        }
    };
    match (spec, live) {
        (
            Spec::File(f),
            Some(Live::File {
                blob,
                mode,
                uid,
                gid,
                ..
            }),
        ) => {
            if *blob != f.blob && rewrite {
                return Step::Replace;
            }
            let attrs = Attrs {
                mode: Some(f.mode & 0o7777)
                    .filter(|m| asks(|x| matches!(x, Field::Mode { .. })) && m != mode),
                uid: f
                    .uid
                    .filter(|u| asks(|x| matches!(x, Field::Owner { .. })) && u != uid),
                gid: f
                    .gid
                    .filter(|g| asks(|x| matches!(x, Field::Group { .. })) && g != gid),
            };
            if attrs == Attrs::default() {
                Step::Nothing
            } else {
                Step::Attrs(attrs)
            }
        }
        (Spec::Symlink { target }, Some(Live::Symlink { target: now })) if now == target => {
            Step::Nothing
        }
        (_, Some(Live::Directory { empty: false })) if rewrite => Step::Refuse(format!(
            "{path}: a directory holding unmanaged files stands where a {} belongs; \
             nothing was deleted, a human has to move it",
            spec.kind()
        )),
        _ if rewrite => Step::Replace,
        _ if change.fields.is_empty() || matches!(spec, Spec::Symlink { .. }) => Step::Nothing,
        (_, None) => Step::Refuse(format!("{path}: vanished since it was observed")),
        (_, Some(other)) => Step::Refuse(format!(
            "{path}: is a {} now, not what was observed",
            other.type_name()
        )),
    }
}

impl FilesTarget {
    pub(super) fn apply_change(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let spec = match (change.action, &change.desired) {
            (Action::Delete, _) => return self.delete(change, ops),
            (_, Some(desired)) => &desired.spec,
            (action, None) => {
                return Err(TargetError::Terminal(format!(
                    "{}: {} without a desired state",
                    change.id,
                    action.as_str()
                )))
            }
        };
        let path = change.path.as_str();
        let (parent, name) = change.path.split_last();
        let dir = match self.root.open_dir(parent, true) {
            Ok(dir) => Some(dir),
            Err(e) if is_absent(e) => None,
            Err(e) => return Err(resolve_error(parent, e)),
        };
        let live = match &dir {
            Some(dir) => self
                .live_at(dir.as_fd(), &change.path, name, &mut Batch::default())
                .map_err(|e| transient(path, "observe", e))?,
            None => None,
        };
        match (
            decide(change, spec, live.as_ref().map(|(_, l)| l)),
            dir,
            live,
        ) {
            (Step::Nothing, ..) => Ok(()),
            (Step::Refuse(reason), ..) => Err(TargetError::Transient(reason)),
            (Step::Attrs(attrs), Some(dir), Some(_)) => {
                self.set_attrs(dir.as_fd(), path, name, attrs, ops)
            }
            (Step::Attrs(_), ..) => Err(TargetError::Transient(format!(
                "{path}: vanished while being applied"
            ))),
            (Step::Replace, dir, live) => {
                let dir = match dir {
                    Some(dir) => dir,
                    None => self.root.ensure_dir(parent, ops)?,
                };
                let old = live
                    .map(|(meta, _)| meta)
                    .filter(|m| m.file_type() == FileType::RegularFile);
                match spec {
                    Spec::File(file) => {
                        self.replace_file(dir.as_fd(), change, file, old, content, ops)
                    }
                    Spec::Symlink { target } => {
                        self.replace_symlink(dir.as_fd(), path, name, target, ops)
                    }
                }
            }
        }
    }

    /// Writes the content to a fresh temp file, sets owner then mode, makes
    /// it durable, and renames it over the final name.
    fn replace_file(
        &self,
        dir: BorrowedFd,
        change: &Change,
        spec: &FileSpec,
        old: Option<Meta>,
        content: &dyn ContentSource,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let path = change.path.as_str();
        let bytes = content
            .read(spec.blob)
            .map_err(|e| transient(path, "read desired content", e))?;
        let got = blob_id(&bytes);
        if got != spec.blob {
            return Err(TargetError::Transient(format!(
                "{path}: content given for blob {} hashes to {got}; nothing written",
                spec.blob
            )));
        }
        // An owner or group the declaration leaves out stays as it was.
        let uid = spec.uid.or(old.map(|m| m.uid));
        let gid = spec.gid.or(old.map(|m| m.gid));
        let recorded = self.cache.clock_now();
        let (temp, mut file) = create_temp_file(dir, path, ops)?;
        let result = fill(&mut file, &bytes, uid, gid, spec.mode & 0o7777, ops)
            .map_err(|e| transient(path, "write temp file", e))
            .and_then(|()| swap_in(dir, &temp, change.path.split_last().1, path, ops));
        if let Err(e) = result {
            discard(dir, &temp);
            return Err(e);
        }
        // The new file's mtime is later than `recorded`, so this entry is
        // racy and the next observation re-reads once; that is the price of
        // never trusting a stat another writer could share.
        if let Ok(st) = rfs::fstat(&file) {
            self.cache
                .record(path, &Meta::from_stat(&st), spec.blob, recorded);
        }
        Ok(())
    }

    fn replace_symlink(
        &self,
        dir: BorrowedFd,
        path: &str,
        name: &str,
        target: &str,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let mut made = None;
        for _ in 0..8 {
            let temp = temp_name();
            ops.writes += 1;
            match rfs::symlinkat(target, dir, temp.as_str()) {
                Ok(()) => {
                    made = Some(temp);
                    break;
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(transient(path, "create symlink", e)),
            }
        }
        let temp =
            made.ok_or_else(|| TargetError::Transient(format!("{path}: no free temp name")))?;
        if let Err(e) = swap_in(dir, &temp, name, path, ops) {
            discard(dir, &temp);
            return Err(e);
        }
        self.cache.forget(path);
        Ok(())
    }

    /// chown and chmod on the existing file, same inode. The file is held by
    /// an O_PATH handle opened without following, so a symlink swapped in
    /// meanwhile is never changed through.
    fn set_attrs(
        &self,
        dir: BorrowedFd,
        path: &str,
        name: &str,
        attrs: Attrs,
        ops: &mut Ops,
    ) -> Result<(), TargetError> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd =
            rfs::openat(dir, name, flags, Mode::empty()).map_err(|e| transient(path, "open", e))?;
        let stat = |fd: &OwnedFd| {
            rfs::fstat(fd)
                .map(|st| Meta::from_stat(&st))
                .map_err(|e| transient(path, "stat", e))
        };
        let before = stat(&fd)?;
        if before.file_type() != FileType::RegularFile {
            return Err(TargetError::Transient(format!(
                "{path}: replaced while being applied"
            )));
        }
        let mut mode = attrs.mode;
        if attrs.uid.is_some() || attrs.gid.is_some() {
            let (uid, gid) = (
                owner_id(attrs.uid, path)?.map(Uid::from_raw),
                owner_id(attrs.gid, path)?.map(Gid::from_raw),
            );
            ops.writes += 1;
            rfs::chownat(&fd, "", uid, gid, AtFlags::EMPTY_PATH)
                .map_err(|e| transient(path, "chown", e))?;
            // chown clears setuid and setgid; the mode was not to change.
            if mode.is_none() && stat(&fd)?.perm() != before.perm() {
                mode = Some(before.perm());
            }
        }
        if let Some(mode) = mode {
            ops.writes += 1;
            chmod_opened(&fd, dir, name, mode).map_err(|e| transient(path, "chmod", e))?;
        }
        self.cache.carry(path, &before, &stat(&fd)?);
        Ok(())
    }
}

/// `-1` means "unchanged" to chown, so it cannot name an owner.
fn owner_id(id: Option<u32>, path: &str) -> Result<Option<u32>, TargetError> {
    match id {
        Some(u32::MAX) => Err(TargetError::Terminal(format!(
            "{path}: owner or group id 4294967295 is not valid"
        ))),
        other => Ok(other),
    }
}

/// chmod through an O_PATH handle: via its /proc/self/fd link, which names
/// exactly that inode; without /proc, by reopening the name and checking it
/// is still the same file.
fn chmod_opened(fd: &OwnedFd, dir: BorrowedFd, name: &str, mode: u32) -> io::Result<()> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match rfs::chmod(link.as_str(), Mode::from_raw_mode(mode)) {
        Err(Errno::NOENT) => {}
        other => return other.map_err(io::Error::from),
    }
    let held = Meta::from_stat(&rfs::fstat(fd)?);
    match open_regular(dir, name)? {
        Some((file, now)) if (now.dev, now.ino) == (held.dev, held.ino) => {
            Ok(rfs::fchmod(&file, Mode::from_raw_mode(mode))?)
        }
        _ => Err(io::Error::other("replaced while being applied")),
    }
}

fn temp_name() -> String {
    format!(".tend-{:016x}.tmp", rand::random::<u64>())
}

/// A new, empty temp file, created exclusively so nothing that already
/// exists (a planted symlink included) is ever opened.
fn create_temp_file(
    dir: BorrowedFd,
    path: &str,
    ops: &mut Ops,
) -> Result<(String, File), TargetError> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..8 {
        let name = temp_name();
        ops.writes += 1;
        match rfs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(transient(path, "create temp file", e)),
        }
    }
    Err(TargetError::Transient(format!("{path}: no free temp name")))
}

/// Content, owner, then mode (chown would clear setuid bits set before it),
/// then durable. Any failure here means the temp file is thrown away.
fn fill(
    file: &mut File,
    bytes: &[u8],
    uid: Option<u32>,
    gid: Option<u32>,
    mode: u32,
    ops: &mut Ops,
) -> io::Result<()> {
    file.write_all(bytes)?;
    let made = Meta::from_stat(&rfs::fstat(&*file)?);
    let uid = uid.filter(|u| *u != made.uid && *u != u32::MAX);
    let gid = gid.filter(|g| *g != made.gid && *g != u32::MAX);
    if uid.is_some() || gid.is_some() {
        ops.writes += 1;
        rfs::fchown(&*file, uid.map(Uid::from_raw), gid.map(Gid::from_raw))?;
    }
    ops.writes += 1;
    rfs::fchmod(&*file, Mode::from_raw_mode(mode))?;
    rfs::fdatasync(&*file)?;
    Ok(())
}

/// Renames `temp` over `name`: a regular file there is backed up first, an
/// empty directory removed; a non-empty one stops everything.
fn swap_in(
    dir: BorrowedFd,
    temp: &str,
    name: &str,
    path: &str,
    ops: &mut Ops,
) -> Result<(), TargetError> {
    match stat_at(dir, name).map(|m| m.file_type()) {
        Ok(FileType::RegularFile) => {
            if let Some(old) =
                read_regular(dir, name).map_err(|e| transient(path, "read for backup", e))?
            {
                ops.save(path, &old)?;
            }
        }
        Ok(FileType::Directory) => {
            ops.writes += 1;
            rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(|e| match e {
                Errno::NOTEMPTY | Errno::EXIST => TargetError::Transient(format!(
                    "{path}: a directory holding unmanaged files stands there; nothing was deleted, a human has to move it"
                )),
                e => transient(path, "remove empty directory", e),
            })?;
        }
        Ok(_) => {}
        Err(e) if is_absent(e) => {}
        Err(e) => return Err(transient(path, "stat", e)),
    }
    ops.writes += 1;
    rfs::renameat(dir, temp, dir, name).map_err(|e| transient(path, "rename", e))?;
    rfs::fsync(dir).map_err(|e| transient(path, "fsync directory", e))
}

fn discard(dir: BorrowedFd, temp: &str) {
    // Best effort: a leftover is removed by the next clean_temp.
    let _ = rfs::unlinkat(dir, temp, AtFlags::empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Observed, RelPath, ResourceId};

    fn change(action: Action, fields: Vec<Field>) -> Change {
        let path = RelPath::parse("a/b").unwrap();
        Change {
            id: ResourceId::new("files", "file", "a/b"),
            target: "files".into(),
            path,
            action,
            fields,
            desired: None,
            observed: Observed::Absent,
        }
    }

    #[test]
    fn decisions_touch_only_named_fields() {
        let spec = FileSpec {
            blob: blob_id(b"new"),
            size: 3,
            mode: 0o600,
            uid: Some(7),
            gid: None,
        };
        let live = Live::File {
            blob: blob_id(b"old"),
            size: 3,
            mode: 0o644,
            uid: 0,
            gid: 0,
        };
        let file = Spec::File(spec.clone());
        let mode_only = change(
            Action::Update,
            vec![Field::Mode {
                from: 0o644,
                to: 0o600,
            }],
        );
        assert_eq!(
            decide(&mode_only, &file, Some(&live)),
            Step::Attrs(Attrs {
                mode: Some(0o600),
                ..Attrs::default()
            })
        );
        assert_eq!(
            decide(
                &change(Action::Update, vec![Field::Content]),
                &file,
                Some(&live)
            ),
            Step::Replace
        );
        assert_eq!(
            decide(
                &change(Action::Create, vec![]),
                &file,
                Some(&Live::File {
                    blob: spec.blob,
                    size: 3,
                    mode: 0o644,
                    uid: 0,
                    gid: 0
                })
            ),
            Step::Attrs(Attrs {
                mode: Some(0o600),
                uid: Some(7),
                gid: None
            })
        );
        assert_eq!(
            decide(&change(Action::Update, vec![]), &file, Some(&live)),
            Step::Nothing
        );
        assert!(matches!(
            decide(&change(Action::Create, vec![]), &file, Some(&Live::Directory { empty: false })),
            Step::Refuse(reason) if reason.contains("unmanaged")
        ));
        assert!(matches!(decide(&mode_only, &file, None), Step::Refuse(_)));
        let link = Spec::Symlink { target: "x".into() };
        assert_eq!(
            decide(
                &change(Action::Create, vec![]),
                &link,
                Some(&Live::Symlink { target: "x".into() })
            ),
            Step::Nothing
        );
        assert_eq!(
            decide(&change(Action::Create, vec![]), &link, Some(&live)),
            Step::Replace
        );
    }
}

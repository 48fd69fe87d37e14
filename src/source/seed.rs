//! Every fetch from a repository on this host starts from its objects,
//! hard-linked into the mirror as `git clone --local` does (copied where a
//! link cannot be made: another file system, another owner's file under
//! protected_hardlinks). libgit2's local transport would otherwise build a
//! pack of what is new in this process, holding each object whole and its
//! compressed copy beside it: a 200 MB blob pushed to the source took a
//! fetch past 400 MiB. With the objects there, the fetch finds the wanted
//! commits present and only updates refs, in memory that does not grow
//! with blob size.
//!
//! Pack and loose object files are never changed once written, and every
//! object read is checked against its id, so sharing them is safe. A pack
//! is taken only when it holds an object the mirror lacks, so packs the
//! source has since repacked are not collected again; the names of those
//! found to hold nothing new are kept beside the mirror, so each is looked
//! at once. What cannot be taken is left to the fetch.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository, RepositoryOpenFlags};

use super::url::{RepoUrl, Transport};

/// Pack names found to hold nothing the mirror lacks.
const SEEN: &str = "tend-seen-packs";

/// Links (or copies) into `mirror` the source's objects it lacks, when the
/// source is on this host. Best effort: returns how many files were taken.
pub(super) fn from_local(url: &RepoUrl, mirror: &Repository) -> usize {
    if url.transport != Transport::Local {
        return 0;
    }
    let into = mirror.path().join("objects");
    let Some(path) = local_path(url.raw()) else {
        return 0;
    };
    let Ok(source) = Repository::open_ext(path, RepositoryOpenFlags::NO_SEARCH, [] as [&OsStr; 0])
    else {
        return 0;
    };
    // Objects borrowed from elsewhere (alternates) or cut off (shallow)
    // would be missing from the links, while the fetch, finding the wanted
    // commits present, would not bring them.
    let borrowed = source.commondir().join("objects/info/alternates");
    if borrowed.exists() || source.is_shallow() {
        return 0;
    }
    let from = source.commondir().join("objects");
    let packs = take_packs(mirror, &from.join("pack"), &into.join("pack"));
    // Neither side's loose objects changed since the last linking: looking
    // at each again would cost a stat per object on every fetch.
    if super::stamp::seeded(mirror.path(), &from) {
        return packs;
    }
    let loose = take_loose(&from, &into);
    super::stamp::record_seeded(mirror.path(), &from);
    packs + loose
}

/// The path a `file://` address or a plain path names; `None` for forms
/// libgit2 would decode differently (a host, percent escapes).
pub(super) fn local_path(raw: &str) -> Option<PathBuf> {
    let path = match raw.strip_prefix("file://") {
        Some(rest) if rest.starts_with('/') && !rest.contains('%') => rest,
        Some(_) => return None,
        None => raw,
    };
    Some(PathBuf::from(path))
}

/// Each `pack-*.pack` with its `.idx` that the mirror does not have and
/// that holds an object it lacks: the pack first, so no index ever names a
/// pack that is not there.
fn take_packs(mirror: &Repository, from: &Path, into: &Path) -> usize {
    let Ok(entries) = fs::read_dir(from) else {
        return 0;
    };
    let seen_file = mirror.path().join(SEEN);
    let seen: BTreeSet<String> = fs::read_to_string(&seen_file)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let mut still_seen = BTreeSet::new();
    let odb = mirror.odb().ok();
    let mut taken = 0;
    for entry in entries.flatten() {
        let idx = entry.path();
        let Some(idx_name) = idx
            .file_name()
            .and_then(OsStr::to_str)
            .filter(|n| n.starts_with("pack-") && n.ends_with(".idx"))
        else {
            continue;
        };
        let pack = idx.with_extension("pack");
        let pack_name = format!("{}.pack", idx_name.trim_end_matches(".idx"));
        if into.join(idx_name).exists() {
            continue;
        }
        if seen.contains(idx_name) {
            still_seen.insert(idx_name.to_string());
            continue;
        }
        let lacks = |id: &Oid| odb.as_ref().is_none_or(|odb| !odb.exists(*id));
        let needed = fs::read(&idx)
            .ok()
            .and_then(|bytes| super::packs::index_ids(&bytes))
            .is_none_or(|ids| ids.iter().any(lacks));
        if !needed {
            still_seen.insert(idx_name.to_string());
            continue;
        }
        if take(&pack, &into.join(&pack_name)).is_err() {
            continue;
        }
        if take(&idx, &into.join(idx_name)).is_err() {
            let _ = fs::remove_file(into.join(&pack_name));
            continue;
        }
        taken += 2;
    }
    if still_seen != seen {
        let text: String = still_seen.iter().map(|n| format!("{n}\n")).collect();
        let _ = fs::write(&seen_file, text);
    }
    taken
}

/// Loose objects, `xx/yyyy...` under the objects directory.
fn take_loose(from: &Path, into: &Path) -> usize {
    let Ok(entries) = fs::read_dir(from) else {
        return 0;
    };
    let mut linked = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let fan_out = name
            .to_str()
            .is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()));
        if !fan_out {
            continue;
        }
        let Ok(objects) = fs::read_dir(entry.path()) else {
            continue;
        };
        let dir = into.join(&name);
        for object in objects.flatten() {
            let is_object = object
                .file_name()
                .to_str()
                .is_some_and(|n| n.len() == 38 && n.bytes().all(|b| b.is_ascii_hexdigit()));
            if !is_object {
                continue;
            }
            let to = dir.join(object.file_name());
            if to.exists() {
                continue;
            }
            let made = fs::create_dir_all(&dir).and_then(|()| take(&object.path(), &to));
            if made.is_ok() {
                linked += 1;
            }
        }
    }
    linked
}

/// A hard link, or where none can be made a copy, written aside and
/// renamed into place so no reader sees part of it. One already there
/// (same name, so same content) is fine.
fn take(from: &Path, to: &Path) -> io::Result<()> {
    match fs::hard_link(from, to) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Ok(()) => Ok(()),
        Err(_) => {
            let name = to.file_name().and_then(OsStr::to_str).unwrap_or("object");
            let temp = to.with_file_name(format!(".tend-{name}-{}.tmp", std::process::id()));
            let copied = fs::copy(from, &temp).and_then(|_| fs::rename(&temp, to));
            if copied.is_err() {
                let _ = fs::remove_file(&temp);
            }
            copied
        }
    }
}

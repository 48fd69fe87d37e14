//! A first fetch from a repository on this host starts from its objects,
//! hard-linked into the mirror as `git clone --local` does: libgit2's local
//! transport would otherwise build a fresh pack of everything, searching for
//! deltas (most of a first sync's fetch time), only to index it again. The
//! fetch then finds the wanted commits present and only updates refs.
//!
//! Pack and loose object files are never changed once written, and every
//! object read is checked against its id, so sharing them is safe. Anything
//! that cannot be linked (another file system, another owner's file under
//! protected_hardlinks) is left to the fetch.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Repository, RepositoryOpenFlags};

use super::url::{RepoUrl, Transport};

/// Links the source's objects into `mirror` when the source is on this host
/// and the mirror has never fetched (no refs): later fetches bring only what
/// is new, and old packs the source has since repacked are not collected
/// again. Best effort: returns how many files were linked.
pub(super) fn from_local(url: &RepoUrl, mirror: &Repository) -> usize {
    if url.transport != Transport::Local {
        return 0;
    }
    let fresh = mirror
        .references()
        .is_ok_and(|mut refs| refs.next().is_none());
    if !fresh {
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
    link_packs(&from.join("pack"), &into.join("pack")) + link_loose(&from, &into)
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

/// Each `pack-*.pack` with its `.idx`: the pack first, so no index ever
/// names a pack that is not there.
fn link_packs(from: &Path, into: &Path) -> usize {
    let Ok(entries) = fs::read_dir(from) else {
        return 0;
    };
    let mut linked = 0;
    for entry in entries.flatten() {
        let idx = entry.path();
        let is_index = idx.extension() == Some(OsStr::new("idx"))
            && idx
                .file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.starts_with("pack-"));
        if !is_index {
            continue;
        }
        let pack = idx.with_extension("pack");
        let (Some(pack_name), Some(idx_name)) = (pack.file_name(), idx.file_name()) else {
            continue;
        };
        if link(&pack, &into.join(pack_name)).is_err() {
            continue;
        }
        if link(&idx, &into.join(idx_name)).is_err() {
            let _ = fs::remove_file(into.join(pack_name));
            continue;
        }
        linked += 2;
    }
    linked
}

/// Loose objects, `xx/yyyy...` under the objects directory.
fn link_loose(from: &Path, into: &Path) -> usize {
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
            let made = fs::create_dir_all(&dir)
                .and_then(|()| link(&object.path(), &dir.join(object.file_name())));
            if made.is_ok() {
                linked += 1;
            }
        }
    }
    linked
}

/// A hard link; one already there (same name, so same content) is fine.
fn link(from: &Path, to: &Path) -> io::Result<()> {
    match fs::hard_link(from, to) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

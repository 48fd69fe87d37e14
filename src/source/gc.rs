//! Pruning the mirror. Forced fetches leave behind what force-pushes,
//! rewinds and deleted branches made unreachable, and without this the
//! mirror only grows. What is kept: everything the mirror's refs reach
//! (branches, tags, what the configured ref resolved to) and the revisions
//! the caller names (applied, pinned, the high-water marks), with their
//! whole ancestry; and every object younger than the grace period, so a
//! reader of a revision just force-pushed away finishes its read.
//!
//! Runs under the fetch lock, so no fetch adds objects while the reachable
//! set is taken. Loose objects go one by one; a pack a tenth or more of
//! which is garbage is rewritten into a pack of what it keeps, written
//! durably before it goes (`packs::replace`). A pack that would keep an
//! object over `packs::BIG` stays as it is, as for a roll-up. Bounded by a time budget:
//! past it the work stops where it is (each step leaves the mirror whole)
//! and the collection is not marked done, so the next schedule resumes it.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use git2::{ObjectType, Odb, Oid, Repository};

use super::mirror_dir::FetchLock;
use super::packs;
use super::snapshot::open_mirror;
use super::{Mirror, SourceError};

/// Touched when a collection ran to its end; its time says when one is due.
const DONE: &str = "tend-gc-done";
/// How long a collection waits for a fetch holding the mirror.
const WAIT: Duration = Duration::from_secs(1);

/// When the mirror is collected and what it keeps (`source.gc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcSpec {
    /// Time between collections.
    pub interval: Duration,
    /// Unreachable objects younger than this stay.
    pub grace: Duration,
    /// Longest one collection runs before it stops, to resume at the next.
    pub budget: Duration,
}

impl Default for GcSpec {
    fn default() -> Self {
        GcSpec {
            interval: Duration::from_secs(24 * 3600),
            grace: Duration::from_secs(14 * 24 * 3600),
            budget: Duration::from_secs(60),
        }
    }
}

/// What one collection did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Loose objects removed.
    pub loose: usize,
    /// Packs rewritten (or removed, when they kept nothing).
    pub packs: usize,
    /// Objects dropped from those packs.
    pub packed: usize,
    /// It ran to its end within the budget.
    pub finished: bool,
}

impl Mirror {
    /// Whether a collection is due: none finished within `interval`. A
    /// mirror never collected starts its first interval now: fresh, it
    /// holds nothing unreachable, and a first sync of a long history does
    /// not also walk it all.
    pub fn gc_due(&self, interval: Duration) -> bool {
        let marker = self.dir().join(DONE);
        match fs::metadata(&marker).and_then(|m| m.modified()) {
            Ok(t) => SystemTime::now()
                .duration_since(t)
                .is_ok_and(|age| age >= interval),
            Err(_) => {
                let _ = fs::write(&marker, b"");
                false
            }
        }
    }

    /// Removes what neither the mirror's refs nor `keep` reach and is older
    /// than `spec.grace`, within `spec.budget`. A revision of `keep` the
    /// mirror does not have is passed over; a ref naming a missing object
    /// stops the collection before anything is removed.
    pub fn collect_garbage(&self, keep: &[Oid], spec: &GcSpec) -> Result<Collected, SourceError> {
        let _lock = FetchLock::acquire(self.dir(), WAIT)?;
        let deadline = Instant::now() + spec.budget;
        let repo = open_mirror(self.dir())?;
        let odb = repo
            .odb()
            .map_err(|e| SourceError::git("opening the object database", e))?;
        let mut done = Collected::default();
        let Some(reachable) = reachable(&repo, &odb, keep, deadline)? else {
            return Ok(done);
        };
        let cutoff = SystemTime::now()
            .checked_sub(spec.grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let objects = repo.path().join("objects");
        if !prune_loose(&objects, &reachable, cutoff, deadline, &mut done)? {
            return Ok(done);
        }
        if !rewrite_packs(&repo, &odb, &reachable, cutoff, deadline, &mut done)? {
            return Ok(done);
        }
        // Bytes written, so the time moves even where truncating would not.
        let marker = self.dir().join(DONE);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        fs::write(&marker, format!("{}\n", now.as_secs()))
            .map_err(|e| SourceError::io(&marker, e))?;
        done.finished = true;
        Ok(done)
    }
}

/// Bytes every mirror under the state dir takes, or `None` before any.
pub fn mirrors_bytes(state_dir: &Path) -> Option<u64> {
    let dir = state_dir.join("mirrors");
    dir.is_dir().then(|| dir_bytes(&dir))
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Every object the refs and `keep` reach, or `None` when the deadline
/// passed first. Objects are read raw from the database, never through
/// libgit2's object cache, so memory grows with the set alone.
fn reachable(
    repo: &Repository,
    odb: &Odb<'_>,
    keep: &[Oid],
    deadline: Instant,
) -> Result<Option<HashSet<Oid>>, SourceError> {
    let git = |what: String| move |e| SourceError::git(what, e);
    let mut seen = HashSet::new();
    let mut walk = repo.revwalk().map_err(git("starting a walk".into()))?;
    let refs = repo.references().map_err(git("listing the refs".into()))?;
    let mut roots: Vec<(Oid, bool)> = Vec::new();
    for r in refs {
        let r = r.map_err(git("listing the refs".into()))?;
        if let Some(target) = r.target() {
            roots.push((target, true));
        }
    }
    roots.extend(keep.iter().map(|id| (*id, false)));
    for (root, named_by_ref) in roots {
        let mut id = root;
        loop {
            let kind = match odb.read_header(id) {
                Ok((_, kind)) => kind,
                Err(_) if !named_by_ref => break,
                Err(e) => return Err(SourceError::git(format!("reading {id}"), e)),
            };
            match kind {
                ObjectType::Tag => {
                    seen.insert(id);
                    let tag = repo
                        .find_tag(id)
                        .map_err(git(format!("reading tag {id}")))?;
                    id = tag.target_id();
                }
                ObjectType::Commit => {
                    walk.push(id).map_err(git(format!("walking from {id}")))?;
                    break;
                }
                ObjectType::Tree => {
                    trees(odb, id, &mut seen)?;
                    break;
                }
                _ => {
                    seen.insert(id);
                    break;
                }
            }
        }
    }
    for (n, commit) in walk.enumerate() {
        let commit = commit.map_err(git("walking the history".into()))?;
        if n % 256 == 0 && Instant::now() >= deadline {
            return Ok(None);
        }
        seen.insert(commit);
        let raw = odb
            .read(commit)
            .map_err(git(format!("reading commit {commit}")))?;
        let tree = raw
            .data()
            .strip_prefix(b"tree ")
            .and_then(|rest| rest.get(..40))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| Oid::from_str(hex).ok())
            .ok_or_else(|| SourceError::git(format!("reading commit {commit}"), bad_object()))?;
        trees(odb, tree, &mut seen)?;
    }
    Ok(Some(seen))
}

/// Adds `root` and every tree and blob under it; trees already seen are
/// not read again (most of a commit's tree is its parent's).
fn trees(odb: &Odb<'_>, root: Oid, seen: &mut HashSet<Oid>) -> Result<(), SourceError> {
    let mut stack = vec![root];
    while let Some(tree) = stack.pop() {
        if !seen.insert(tree) {
            continue;
        }
        let raw = odb
            .read(tree)
            .map_err(|e| SourceError::git(format!("reading tree {tree}"), e))?;
        let mut rest = raw.data();
        // Entries are `<octal mode> <name>\0<20-byte id>`.
        while !rest.is_empty() {
            let bad = || SourceError::git(format!("reading tree {tree}"), bad_object());
            let space = rest.iter().position(|b| *b == b' ').ok_or_else(bad)?;
            let nul = rest.iter().position(|b| *b == 0).ok_or_else(bad)?;
            let id = rest.get(nul + 1..nul + 21).ok_or_else(bad)?;
            let id = Oid::from_bytes(id).map_err(|_| bad())?;
            match &rest[..space] {
                b"40000" | b"040000" => stack.push(id),
                // A gitlink names a commit of another repository.
                b"160000" => {}
                _ => {
                    seen.insert(id);
                }
            }
            rest = &rest[nul + 21..];
        }
    }
    Ok(())
}

fn bad_object() -> git2::Error {
    git2::Error::from_str("malformed object")
}

/// Removes the loose objects not in `reachable` last changed before
/// `cutoff`, counting them in `done`; false when the deadline passed first.
fn prune_loose(
    objects: &Path,
    reachable: &HashSet<Oid>,
    cutoff: SystemTime,
    deadline: Instant,
    done: &mut Collected,
) -> Result<bool, SourceError> {
    let entries = fs::read_dir(objects).map_err(|e| SourceError::io(objects, e))?;
    for entry in entries.flatten() {
        let fan_out = entry.file_name();
        let Some(prefix) = fan_out
            .to_str()
            .filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        else {
            continue;
        };
        if Instant::now() >= deadline {
            return Ok(false);
        }
        let dir = entry.path();
        let Ok(files) = fs::read_dir(&dir) else {
            continue;
        };
        for file in files.flatten() {
            let name = file.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|rest| Oid::from_str(&format!("{prefix}{rest}")).ok())
                .filter(|_| name.len() == 38)
            else {
                continue;
            };
            if reachable.contains(&id) {
                continue;
            }
            let old = file
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < cutoff);
            if !old {
                continue;
            }
            match fs::remove_file(file.path()) {
                Ok(()) => done.loose += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(SourceError::io(file.path(), e)),
            }
        }
        // Only when empty; the next fetch makes it again as needed.
        let _ = fs::remove_dir(&dir);
    }
    Ok(true)
}

/// Rewrites, one by one and smallest first, the packs older than `cutoff`
/// of which at least a tenth is unreachable, each into a pack of its
/// reachable objects (none, when nothing in it is): rewriting a history's
/// whole pack for a few dropped objects would cost more than it frees.
/// Adds the packs replaced and objects dropped to `done`; false when the
/// deadline passed first.
fn rewrite_packs(
    repo: &Repository,
    odb: &Odb<'_>,
    reachable: &HashSet<Oid>,
    cutoff: SystemTime,
    deadline: Instant,
    done: &mut Collected,
) -> Result<bool, SourceError> {
    let dir = repo.path().join("objects/pack");
    let mut all = packs::list(&dir).map_err(|e| SourceError::io(&dir, e))?;
    all.sort_by_key(|p| p.size);
    for pack in all.into_iter().filter(|p| p.modified < cutoff) {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        // A pack whose index this code does not read stays as it is.
        let Some(ids) = fs::read(pack.with("idx"))
            .ok()
            .and_then(|bytes| packs::index_ids(&bytes))
        else {
            continue;
        };
        let total = ids.len();
        let (mut keeps, garbage): (Vec<Oid>, Vec<Oid>) =
            ids.into_iter().partition(|id| reachable.contains(id));
        if garbage.is_empty() || garbage.len() * 10 < total {
            continue;
        }
        let big = keeps.iter().any(|id| {
            odb.read_header(*id)
                .map_or(true, |(size, _)| size as u64 > packs::BIG)
        });
        if big {
            tracing::debug!(pack = %pack.stem.display(), "a big object kept in it; left alone");
            continue;
        }
        keeps.sort_unstable();
        done.packs += packs::replace(repo, &dir, std::slice::from_ref(&pack), &keeps)?;
        done.packed += garbage.len();
    }
    Ok(true)
}

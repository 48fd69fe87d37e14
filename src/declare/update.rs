//! A revision's desired state from the one before it, when only a few paths
//! changed: the entries at the changed paths (and every mirrored symlink,
//! whose content follows what it points to) are read again, everything else
//! is kept. The result is what [`super::declare`] would build; whenever that
//! cannot be ensured cheaply the answer is `None` and the caller reads the
//! revision whole.

use std::collections::BTreeSet;

use super::expand::{same_when_folded, Builder};
use super::{Declared, Options};
use crate::model::{RelPath, ResourceId};
use crate::source::{Entry, EntryMode, Snapshot, SourceError};

/// More mirrored symlinks than this and a change is read whole: each is
/// read again on every change.
const MAX_LINKS: usize = 256;

/// What a change does to the previous declaration.
#[derive(Debug)]
pub struct Update {
    /// Identities whose declaration may differ: removed, added or re-read.
    pub touched: BTreeSet<ResourceId>,
    /// The repository paths read again.
    paths: BTreeSet<String>,
    /// The declarations of the entries at those paths in the new revision.
    fresh: Declared,
    links: BTreeSet<String>,
}

impl Update {
    /// The new revision's desired state, from the previous one.
    pub fn apply(self, mut prev: Declared) -> Declared {
        prev.resources.retain(|d| !self.touched.contains(&d.id));
        for id in &self.touched {
            prev.blocked.remove(id);
        }
        prev.problems.retain(|p| !self.paths.contains(&p.file));
        prev.notes.retain(|p| !self.paths.contains(&p.file));
        for note in self.fresh.notes {
            let at = prev.notes.partition_point(|p| p.file <= note.file);
            prev.notes.insert(at, note);
        }
        prev.resources.merge(self.fresh.resources);
        prev.blocked.extend(self.fresh.blocked);
        prev.inline.extend(self.fresh.inline);
        prev.secrets.extend(self.fresh.secrets);
        // A whole read lists problems in path order; keep that order.
        for problem in self.fresh.problems {
            let at = prev.problems.partition_point(|p| p.file <= problem.file);
            prev.problems.insert(at, problem);
        }
        prev.links = self.links;
        prev
    }
}

/// The source path as mirror entries carry it, or `None` when it is not in
/// canonical form (then prefixes cannot be compared as strings).
fn canonical(source_path: &str) -> Option<&str> {
    let parts: Vec<&str> = source_path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    (parts.join("/") == source_path).then_some(source_path)
}

/// How `changed` (repository paths whose entry differs between `prev`'s
/// revision and `snap`, as [`Snapshot::changed_paths`] lists them) changes
/// `prev`. `None` when the change cannot be applied as a patch: not mirror
/// mode, the source path itself or a `.gitattributes` changed, too many
/// symlinks, nested paths.
pub fn update(
    prev: &Declared,
    snap: &Snapshot,
    opts: &Options,
    changed: &[String],
) -> Result<Option<Update>, SourceError> {
    // A decrypted file's identity is not its path's: read such a tree whole.
    if !opts.mirror
        || opts.decrypt_suffix.is_some()
        || !prev.problems.is_sorted_by(|a, b| a.file <= b.file)
    {
        return Ok(None);
    }
    let Some(source) = canonical(opts.source_path) else {
        return Ok(None);
    };
    let under = |p: &str| {
        source.is_empty()
            || p.strip_prefix(source)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    // Attributes decide where LFS pointers are refused, in the whole tree.
    let attributes = |p: &String| p == ".gitattributes" || p.ends_with("/.gitattributes");
    if changed.iter().any(|p| p == source || attributes(p)) {
        return Ok(None);
    }
    let mut paths: BTreeSet<String> = changed.iter().filter(|p| under(p)).cloned().collect();
    let mut links: BTreeSet<String> = prev
        .links
        .iter()
        .filter(|l| !paths.contains(*l))
        .cloned()
        .collect();
    let mut entries: Vec<Entry> = Vec::new();
    for path in &paths {
        match snap.entry(path) {
            Ok(Some(e)) => {
                if e.mode == EntryMode::Symlink {
                    links.insert(e.path.clone());
                }
                entries.push(e);
            }
            Ok(None) | Err(SourceError::IsDirectory { .. }) => {}
            Err(_) => return Ok(None),
        }
    }
    if links.len() > MAX_LINKS {
        return Ok(None);
    }
    // Unchanged symlinks may point into what changed: read them again.
    for link in &links {
        if paths.insert(link.clone()) {
            match snap.entry(link) {
                Ok(Some(e)) => entries.push(e),
                _ => return Ok(None),
            }
        }
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut builder = Builder::new(snap, opts, prev.lfs_dirs.clone());
    for entry in entries {
        builder.mirror_entry(entry);
    }
    let fresh = builder.finish();
    // Every mirrored file goes to the one target serving files; when none
    // does, no entry has an identity and only problems name the paths.
    let target = [&prev.resources, &fresh.resources]
        .into_iter()
        .flat_map(|m| m.keys().next())
        .chain(
            [&prev.blocked, &fresh.blocked]
                .into_iter()
                .flat_map(|m| m.keys().next()),
        )
        .map(|id| id.target().to_string())
        .next();
    let id_of = |path: &str| -> Option<ResourceId> {
        let rel = path
            .strip_prefix(source)
            .unwrap_or(path)
            .trim_start_matches('/');
        let rel = RelPath::parse(rel).ok()?;
        Some(ResourceId::new(target.as_deref()?, "file", rel.as_str()))
    };
    let touched: BTreeSet<ResourceId> = paths.iter().filter_map(|p| id_of(p)).collect();
    // A file that would lie inside another declared file is a conflict a
    // whole read finds by sorting everything; here it is read whole.
    let kept = |id: &ResourceId| {
        !touched.contains(id) && (prev.resources.contains_key(id) || prev.blocked.contains_key(id))
    };
    let new = |id: &ResourceId| fresh.resources.contains_key(id) || fresh.blocked.contains_key(id);
    for id in &touched {
        // A removed identity can only clash with one kept; one (re)declared
        // also with another declared now.
        let declared = new(id);
        let text = id.as_str();
        let mut cut = text.len();
        while let Some(i) = text[..cut].rfind('/') {
            cut = i;
            let outer = ResourceId::from_string(text[..cut].to_string());
            if kept(&outer) || (declared && new(&outer)) {
                return Ok(None);
            }
        }
        let prefix = ResourceId::from_string(format!("{text}/"));
        let inside = |keys: &mut dyn Iterator<Item = &ResourceId>| {
            keys.take_while(|k| k.as_str().starts_with(prefix.as_str()))
                .any(|k| !touched.contains(k))
        };
        if inside(&mut prev.resources.keys_from(prefix.as_str()))
            || inside(&mut prev.blocked.range(prefix.clone()..).map(|(k, _)| k))
        {
            return Ok(None);
        }
    }
    if folds_onto_another(prev, &fresh, &touched) {
        return Ok(None);
    }
    Ok(Some(Update {
        touched,
        paths,
        fresh,
        links,
    }))
}

/// Whether a touched identity differs only in case from another one,
/// declared before or now: such pairs are blocked together, which only a
/// whole read decides.
fn folds_onto_another(prev: &Declared, fresh: &Declared, touched: &BTreeSet<ResourceId>) -> bool {
    let all = || {
        prev.resources
            .keys()
            .chain(prev.blocked.keys())
            .chain(fresh.resources.keys())
            .chain(fresh.blocked.keys())
    };
    if touched.len() <= 16 {
        return all().any(|id| {
            touched
                .iter()
                .any(|t| same_when_folded(t.as_str(), id.as_str()))
        });
    }
    let folded =
        |id: &ResourceId| -> String { id.as_str().chars().flat_map(char::to_lowercase).collect() };
    let wanted: std::collections::HashSet<String> = touched.iter().map(folded).collect();
    touched.len() != wanted.len()
        || all().any(|id| !touched.contains(id) && wanted.contains(&folded(id)))
}

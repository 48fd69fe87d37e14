//! Declared paths that cannot both be applied: one lying inside another
//! (a file cannot also be a directory), and two that differ only in case
//! (one file where case is folded).

use std::collections::{HashMap, HashSet};

use super::Builder;
use crate::model::{Desired, ResourceId, Resources, Spec};

/// Whether a declaration names a path of a file system: not a plugin's
/// object, nor an etcd key (`a` and `a/b` are two keys, not a file and a
/// directory).
fn on_a_file_system(d: &Desired) -> bool {
    !matches!(d.spec, Spec::Structured(_)) && d.id.kind() != crate::model::KEY_KIND
}

impl Builder<'_> {
    /// Blocks both sides wherever one declared path lies inside another
    /// (a file cannot also be a directory).
    pub(super) fn nested_conflicts(&mut self, resources: &mut Resources) {
        let on_paths = resources.values().filter(|d| on_a_file_system(d));
        // Every directory above a declared path, per target. A directory's
        // ancestors are added with it, so the walk up stops at the first
        // one already known.
        let mut dirs: HashSet<(&str, &str)> = HashSet::new();
        for d in on_paths.clone() {
            let path = d.path_str();
            let mut end = path.len();
            while let Some(i) = path[..end].rfind('/') {
                if !dirs.insert((d.target(), &path[..i])) {
                    break;
                }
                end = i;
            }
        }
        // Declared paths that are also directories of others: rare, so only
        // then is every path's ancestry looked at.
        let outer: HashMap<(&str, &str), &ResourceId> = on_paths
            .clone()
            .filter(|d| dirs.contains(&(d.target(), d.path_str())))
            .map(|d| ((d.target(), d.path_str()), &d.id))
            .collect();
        if outer.is_empty() {
            return;
        }
        let mut clash = Vec::new();
        for d in on_paths {
            let path = d.path_str();
            // Every proper ancestor of the path, by the `/` that ends it.
            for (i, _) in path.match_indices('/') {
                if let Some(outer) = outer.get(&(d.target(), &path[..i])) {
                    clash.push((
                        (*outer).clone(),
                        d.id.clone(),
                        path[..i].to_string(),
                        path.to_string(),
                    ));
                }
            }
        }
        // Taken out together once all are found: one walk, however many.
        let mut out = std::collections::HashSet::new();
        for (outer, inner, op, ip) in clash {
            for id in [outer, inner] {
                if out.contains(&id) {
                    continue;
                }
                if let Some(origin) = resources.get(&id).map(|d| d.origin()) {
                    out.insert(id.clone());
                    let why = format!("{ip} lies inside {op}, which is declared as a file");
                    self.block(id, &origin, why);
                }
            }
        }
        if !out.is_empty() {
            resources.retain(|d| !out.contains(&d.id));
        }
    }

    /// Blocks every path that differs from another of its target only in
    /// case: on a case-insensitive file system (a volume from macOS or
    /// Windows, an ext4 directory with casefold) they are one file, which
    /// two resources would take turns to overwrite. Neither is applied.
    pub(super) fn case_clashes(&mut self, resources: &Resources) {
        let state = std::hash::RandomState::new();
        let mut seen: HashMap<u64, Vec<&Desired>> = HashMap::new();
        let on_paths = resources.values().filter(|d| on_a_file_system(d));
        for d in on_paths {
            seen.entry(folded_hash(&state, d.target(), d.path_str()))
                .or_default()
                .push(d);
        }
        let mut clash = Vec::new();
        for same in seen.values().filter(|v| v.len() > 1) {
            for (i, a) in same.iter().enumerate() {
                let other = same[..i].iter().chain(&same[i + 1..]).find(|b| {
                    a.target() == b.target() && same_when_folded(a.path_str(), b.path_str())
                });
                if let Some(b) = other {
                    clash.push((
                        a.id.clone(),
                        format!(
                            "{} and {} differ only in case: on a case-insensitive file system \
                             they are one file; neither is applied",
                            a.path_str(),
                            b.path_str()
                        ),
                    ));
                }
            }
        }
        for (id, reason) in clash {
            self.refuse(id, reason);
        }
    }
}

/// A hash of `path` with its case folded, per target.
fn folded_hash(state: &std::hash::RandomState, target: &str, path: &str) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = state.build_hasher();
    target.hash(&mut h);
    for c in path.chars().flat_map(char::to_lowercase) {
        h.write_u32(c as u32);
    }
    h.finish()
}

/// Whether two different paths name one file where case is folded.
pub(in crate::declare) fn same_when_folded(a: &str, b: &str) -> bool {
    if a == b {
        return false;
    }
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    a.chars()
        .flat_map(char::to_lowercase)
        .eq(b.chars().flat_map(char::to_lowercase))
}

//! The managed paths a watch judges events by: the identities alone, in
//! the order of their paths. A files identity ends with its path
//! (`files/file/etc/a`), so a path is found by a binary search over the
//! identities' keys and nothing else is held: 16 bytes a file.

use crate::model::ResourceId;

#[derive(Debug, Default)]
pub(super) struct Managed(Vec<ResourceId>);

impl Managed {
    /// From identities in any order; of two at one path, the last stays.
    pub(super) fn from_ids(mut ids: Vec<ResourceId>) -> Managed {
        ids.reverse();
        // Stable: of equal paths, the one given last comes first here.
        ids.sort_by(|a, b| a.key().cmp(b.key()));
        ids.dedup_by(|later, first| later.key() == first.key());
        ids.shrink_to_fit();
        Managed(ids)
    }

    /// The managed set `ids` make, or `None` when it is this one (every
    /// pass tells the whole set, mostly unchanged): no second copy of it
    /// is made to find that out, only a flag for each identity held.
    pub(super) fn replaced_by<'a>(
        &self,
        ids: impl Iterator<Item = &'a ResourceId>,
    ) -> Option<Managed> {
        let mut kept = vec![false; self.0.len()];
        let mut others = Vec::new();
        for id in ids {
            match self.position(id.key()) {
                Ok(i) if self.0[i] == *id && !kept[i] => kept[i] = true,
                _ => others.push(id.clone()),
            }
        }
        if others.is_empty() && kept.iter().all(|k| *k) {
            return None;
        }
        let held = self
            .0
            .iter()
            .zip(kept)
            .filter(|(_, k)| *k)
            .map(|(id, _)| id.clone());
        let mut all: Vec<ResourceId> = held.collect();
        all.append(&mut others);
        Some(Managed::from_ids(all))
    }

    fn position(&self, path: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|id| id.key().cmp(path))
    }

    /// The identity managed at `path`.
    pub(super) fn get(&self, path: &str) -> Option<&ResourceId> {
        self.position(path).ok().map(|i| &self.0[i])
    }

    /// Every managed identity whose path starts with `prefix`, in order.
    pub(super) fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a ResourceId> {
        let start = self.0.partition_point(|id| id.key() < prefix);
        self.0[start..]
            .iter()
            .take_while(move |id| id.key().starts_with(prefix))
    }

    /// Manages `id` at its path, in place of what was there.
    pub(super) fn insert(&mut self, id: ResourceId) {
        match self.position(id.key()) {
            Ok(i) => self.0[i] = id,
            Err(i) => self.0.insert(i, id),
        }
    }

    /// No longer manages `id`, when it is what its path holds.
    pub(super) fn remove(&mut self, id: &ResourceId) {
        if let Ok(i) = self.position(id.key()) {
            if self.0[i] == *id {
                self.0.remove(i);
            }
        }
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, ResourceId> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: &str, path: &str) -> ResourceId {
        ResourceId::new("files", kind, path)
    }

    #[test]
    fn paths_are_found_by_the_identities_keys() {
        let mut m = Managed::from_ids(vec![
            id("file", "etc/b"),
            id("symlink", "etc/a"),
            id("file", "etc/app/x"),
            id("file", "etc/a.d/y"),
            id("file", "etc/b"),
        ]);
        assert_eq!(m.get("etc/a"), Some(&id("symlink", "etc/a")));
        assert_eq!(m.get("etc"), None);
        let under: Vec<_> = m.under("etc/a").map(|i| i.key()).collect();
        assert_eq!(under, ["etc/a", "etc/a.d/y", "etc/app/x"]);
        assert_eq!(m.under("etc/app/").count(), 1);
        m.insert(id("file", "etc/a"));
        assert_eq!(m.get("etc/a"), Some(&id("file", "etc/a")));
        m.remove(&id("symlink", "etc/a"));
        assert!(
            m.get("etc/a").is_some(),
            "only the identity held is removed"
        );
        m.remove(&id("file", "etc/a"));
        assert_eq!(m.iter().count(), 3);
    }

    #[test]
    fn a_set_told_again_is_kept_and_a_changed_one_made_anew() {
        let ids = [id("file", "a"), id("symlink", "b"), id("file", "c/d")];
        let m = Managed::from_ids(ids.to_vec());
        assert!(m.replaced_by(ids.iter().rev()).is_none(), "the same set");
        let fewer = m.replaced_by(ids[..2].iter()).expect("one gone");
        assert_eq!(fewer.iter().count(), 2);
        let moved = [id("file", "a"), id("file", "b"), id("file", "c/d")];
        let changed = m.replaced_by(moved.iter()).expect("b is a file now");
        assert_eq!(changed.get("b"), Some(&id("file", "b")));
        assert_eq!(changed.iter().count(), 3);
        let twice = [
            id("file", "a"),
            id("file", "a"),
            id("symlink", "b"),
            id("file", "c/d"),
        ];
        assert!(m
            .replaced_by(twice.iter())
            .is_some_and(|n| n.iter().count() == 3));
    }
}

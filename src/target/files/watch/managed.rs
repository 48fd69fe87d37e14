//! The managed paths a watch judges events by: the identities alone, in
//! the order of their paths. A files identity ends with its path
//! (`files/file/etc/a`), so a path is found by a binary search over the
//! identities' keys and nothing else is held: 16 bytes a file.

use crate::model::ResourceId;

/// Changes made one at a time at most; more and the set is made again.
const FEW: usize = 64;

#[derive(Debug, Default, Clone)]
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
        // Told in identity order, which for one kind is path order: the
        // next one held is looked at first, and searched for only when
        // it is not that.
        let mut next = 0;
        for id in ids {
            let at = match self.0.get(next) {
                Some(held) if held == id => Ok(next),
                _ => self.position(id.key()),
            };
            match at {
                Ok(i) if self.0[i] == *id && !kept[i] => {
                    kept[i] = true;
                    next = i + 1;
                }
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

    /// This set after `changes`: each identity no longer here, and then
    /// here again at its path when it has one (`true`). One at a time for
    /// a few; for many, the set is made again at once (each change alone
    /// moves the entries after it).
    pub(super) fn patch(&mut self, changes: Vec<(ResourceId, bool)>) {
        if changes.len() <= FEW {
            for (id, held) in changes {
                if !(held && self.get(id.key()) == Some(&id)) {
                    self.remove(&id);
                    if held {
                        self.insert(id);
                    }
                }
            }
            return;
        }
        let changed: std::collections::HashSet<&ResourceId> =
            changes.iter().map(|(id, _)| id).collect();
        let mut ids: Vec<ResourceId> = self
            .0
            .iter()
            .filter(|id| !changed.contains(id))
            .cloned()
            .collect();
        ids.extend(
            changes
                .iter()
                .filter(|(_, held)| *held)
                .map(|(id, _)| id.clone()),
        );
        *self = Managed::from_ids(ids);
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

    /// A few changes and many give the same set.
    #[test]
    fn patches_few_or_many_agree() {
        let start: Vec<ResourceId> = (0..300).map(|i| id("file", &format!("f{i:03}"))).collect();
        let mut changes: Vec<(ResourceId, bool)> = Vec::new();
        for i in (0..300).step_by(3) {
            changes.push((id("file", &format!("f{i:03}")), i % 2 == 0));
        }
        changes.push((id("symlink", "f001"), true));
        changes.push((id("file", "new"), true));
        let mut many = Managed::from_ids(start.clone());
        many.patch(changes.clone());
        let mut one_by_one = Managed::from_ids(start);
        for c in changes {
            one_by_one.patch(vec![c]);
        }
        let keys = |m: &Managed| m.iter().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&many), keys(&one_by_one));
        assert_eq!(many.get("f001"), Some(&id("symlink", "f001")));
        assert!(many.get("f003").is_none() && many.get("f006").is_some());
    }
}

//! A revision's declared resources in identity order: one vector, found
//! by binary search. A map would hold each identity twice (key and value)
//! in nodes of its own, and building one from sorted entries holds them
//! twice while it is built; a revision is read with 100k entries and more.

use std::borrow::Borrow;

use super::{Desired, ResourceId};

/// Declared resources, unique by identity, in identity order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Resources(Vec<Desired>);

impl Resources {
    /// From entries in any order; a later entry of an identity replaces
    /// an earlier one, as inserting into a map would.
    pub fn from_vec(mut entries: Vec<Desired>) -> Resources {
        if !sorted_unique(&entries) {
            // Stable: of equal identities the last one stays last.
            entries.sort_by(|a, b| a.id.cmp(&b.id));
            let mut kept: Vec<Desired> = Vec::with_capacity(entries.len());
            for d in entries {
                match kept.last_mut() {
                    Some(last) if last.id == d.id => *last = d,
                    _ => kept.push(d),
                }
            }
            entries = kept;
        }
        Resources(entries)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn position<Q>(&self, id: &Q) -> Result<usize, usize>
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.binary_search_by(|d| d.id.borrow().cmp(id))
    }

    pub fn get<Q>(&self, id: &Q) -> Option<&Desired>
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(id).ok().map(|i| &self.0[i])
    }

    pub fn contains_key<Q>(&self, id: &Q) -> bool
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(id).is_ok()
    }

    /// Adds `d`, returning the declaration of its identity it replaces.
    /// In identity order this is a push; out of order it moves the
    /// entries after it.
    pub fn insert(&mut self, d: Desired) -> Option<Desired> {
        if self.0.last().is_none_or(|last| last.id < d.id) {
            self.0.push(d);
            return None;
        }
        match self.position(&d.id) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i], d)),
            Err(i) => {
                self.0.insert(i, d);
                None
            }
        }
    }

    pub fn remove<Q>(&mut self, id: &Q) -> Option<Desired>
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(id).ok().map(|i| self.0.remove(i))
    }

    /// Keeps the declarations `keep` says to, in one walk.
    pub fn retain(&mut self, keep: impl FnMut(&Desired) -> bool) {
        self.0.retain(keep);
    }

    /// Adds every declaration of `other`, each replacing the one of its
    /// identity here, in place: no entry is held twice.
    pub fn merge(&mut self, other: Resources) {
        let mut theirs = other.0;
        // Replace equal identities where they stand; what is left is new.
        theirs.retain_mut(|d| match self.position(&d.id) {
            Ok(i) => {
                std::mem::swap(&mut self.0[i], d);
                false
            }
            Err(_) => true,
        });
        let appended = self
            .0
            .last()
            .is_none_or(|last| theirs.first().is_none_or(|first| last.id < first.id));
        self.0.append(&mut theirs);
        if !appended {
            // Unique identities: an unstable sort is exact, and needs no
            // room beside the entries.
            self.0.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        }
    }

    /// Every declaration, in identity order, with its identity.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&ResourceId, &Desired)> + ExactSizeIterator {
        self.0.iter().map(|d| (&d.id, d))
    }

    pub fn values(&self) -> std::slice::Iter<'_, Desired> {
        self.0.iter()
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &ResourceId> + ExactSizeIterator {
        self.0.iter().map(|d| &d.id)
    }

    /// The identities from `from` on, in order.
    pub fn keys_from(&self, from: &str) -> impl Iterator<Item = &ResourceId> {
        let start = self.0.partition_point(|d| d.id.as_str() < from);
        self.0[start..].iter().map(|d| &d.id)
    }

    pub fn as_slice(&self) -> &[Desired] {
        &self.0
    }
}

impl std::ops::Index<&ResourceId> for Resources {
    type Output = Desired;
    fn index(&self, id: &ResourceId) -> &Desired {
        self.get(id).expect("a declared identity")
    }
}

fn sorted_unique(entries: &[Desired]) -> bool {
    entries.windows(2).all(|w| w[0].id < w[1].id)
}

impl FromIterator<Desired> for Resources {
    fn from_iter<I: IntoIterator<Item = Desired>>(iter: I) -> Self {
        Resources::from_vec(iter.into_iter().collect())
    }
}

impl IntoIterator for Resources {
    type Item = Desired;
    type IntoIter = std::vec::IntoIter<Desired>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Resources {
    type Item = (&'a ResourceId, &'a Desired);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, Desired>, fn(&Desired) -> (&ResourceId, &Desired)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|d| (&d.id, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FileSpec, RelPath, Spec};
    use std::collections::BTreeMap;

    fn file(path: &str, size: u64) -> Desired {
        let (id, path) = RelPath::identify(path, "files", "file").unwrap();
        Desired::new(
            id,
            path.as_str(),
            Spec::File(FileSpec {
                blob: git2::Oid::zero(),
                size,
                mode: 0o644,
                uid: None.into(),
                gid: None.into(),
                secret: false,
            }),
            Default::default(),
            false,
            false,
        )
    }

    fn as_map(r: &Resources) -> Vec<(String, u64)> {
        r.values()
            .map(|d| match &d.spec {
                Spec::File(f) => (d.id.to_string(), f.size),
                _ => unreachable!(),
            })
            .collect()
    }

    fn model(ops: &[(&str, u64)]) -> Vec<(String, u64)> {
        let mut m = BTreeMap::new();
        for (p, s) in ops {
            m.insert(format!("files/file/{p}"), *s);
        }
        m.into_iter().collect()
    }

    #[test]
    fn it_behaves_as_a_map_whatever_the_order_of_inserts() {
        let ops = [
            ("b", 1),
            ("a", 2),
            ("c", 3),
            ("a", 4),
            ("d/e", 5),
            ("a/b", 6),
        ];
        let mut r = Resources::default();
        for (p, s) in ops {
            r.insert(file(p, s));
        }
        assert_eq!(as_map(&r), model(&ops));
        let collected = Resources::from_vec(ops.iter().map(|(p, s)| file(p, *s)).collect());
        assert_eq!(collected, r);
        assert_eq!(r.get("files/file/a").map(|d| d.path_str()), Some("a"));
        assert!(r.remove("files/file/a").is_some());
        assert!(!r.contains_key("files/file/a"));
        assert_eq!(
            r.keys_from("files/file/c")
                .map(|k| k.as_str())
                .collect::<Vec<_>>(),
            ["files/file/c", "files/file/d/e"]
        );
    }

    #[test]
    fn a_merge_replaces_equal_identities_and_keeps_the_order() {
        let mut r: Resources = ["a", "c", "e", "g"].iter().map(|p| file(p, 1)).collect();
        let other: Resources = [("b", 2), ("c", 2), ("h", 2), ("0", 2)]
            .iter()
            .map(|(p, s)| file(p, *s))
            .collect();
        r.merge(other);
        assert_eq!(
            as_map(&r),
            model(&[
                ("a", 1),
                ("c", 1),
                ("e", 1),
                ("g", 1),
                ("b", 2),
                ("c", 2),
                ("h", 2),
                ("0", 2)
            ])
        );
        // All after: appended.
        r.merge([file("z", 3)].into_iter().collect());
        assert_eq!(r.keys().last().unwrap().as_str(), "files/file/z");
    }
}

//! A pass's outcomes by identity. A no-op pass finds every resource in
//! sync with nothing to remember, and there may be 100k of them: those are
//! held as their identities alone, in the plan's order, and only the
//! others with an [`Outcome`] each.

use std::borrow::Borrow;
use std::collections::{btree_map, BTreeMap};
use std::iter::Peekable;

use super::outcome::Outcome;
use crate::ledger::State;
use crate::model::ResourceId;

/// The outcome of every resource found in sync with nothing to remember.
static IN_SYNC: Outcome = Outcome {
    state: State::InSync,
    reason: None,
    applied: false,
    corrections: None,
    retry_at: None,
};

/// Outcomes by identity, iterated in identity order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcomes {
    /// In identity order: each is [`IN_SYNC`] unless `other` has it.
    in_sync: Vec<ResourceId>,
    other: BTreeMap<ResourceId, Outcome>,
    /// How many identities are in both.
    both: usize,
}

impl Outcomes {
    /// Every one of `ids` in sync, settled.
    pub fn in_sync(mut ids: Vec<ResourceId>) -> Outcomes {
        if !ids.windows(2).all(|w| w[0] < w[1]) {
            ids.sort_unstable();
            ids.dedup();
        }
        Outcomes {
            in_sync: ids,
            other: BTreeMap::new(),
            both: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.in_sync.len() + self.other.len() - self.both
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn held_in_sync<Q>(&self, id: &Q) -> bool
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.in_sync
            .binary_search_by(|k| k.borrow().cmp(id))
            .is_ok()
    }

    pub fn get<Q>(&self, id: &Q) -> Option<&Outcome>
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.other.get(id) {
            Some(o) => Some(o),
            None => self.held_in_sync(id).then_some(&IN_SYNC),
        }
    }

    pub fn contains_key<Q>(&self, id: &Q) -> bool
    where
        ResourceId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.other.contains_key(id) || self.held_in_sync(id)
    }

    /// Sets the outcome of `id`, returning the one it had.
    pub fn insert(&mut self, id: ResourceId, o: Outcome) -> Option<Outcome> {
        let was_in_sync = self.held_in_sync(&id);
        match self.other.insert(id, o) {
            Some(before) => Some(before),
            None if was_in_sync => {
                self.both += 1;
                Some(IN_SYNC.clone())
            }
            None => None,
        }
    }

    /// The outcome of `id` to change, if it has one.
    pub fn get_mut(&mut self, id: &ResourceId) -> Option<&mut Outcome> {
        if !self.other.contains_key(id) {
            if !self.held_in_sync(id) {
                return None;
            }
            self.both += 1;
            self.other.insert(id.clone(), IN_SYNC.clone());
        }
        self.other.get_mut(id)
    }

    /// The outcome of `id` to change, made by `make` when it has none.
    pub fn get_or_insert_with(
        &mut self,
        id: &ResourceId,
        make: impl FnOnce() -> Outcome,
    ) -> &mut Outcome {
        if !self.contains_key(id) {
            self.other.insert(id.clone(), make());
        }
        self.get_mut(id).expect("just made")
    }

    /// Every outcome with its identity, in identity order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            in_sync: self.in_sync.iter().peekable(),
            other: self.other.iter().peekable(),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &ResourceId> {
        self.iter().map(|(id, _)| id)
    }

    pub fn values(&self) -> impl Iterator<Item = &Outcome> {
        self.iter().map(|(_, o)| o)
    }
}

impl FromIterator<(ResourceId, Outcome)> for Outcomes {
    fn from_iter<I: IntoIterator<Item = (ResourceId, Outcome)>>(iter: I) -> Self {
        Outcomes {
            other: iter.into_iter().collect(),
            ..Outcomes::default()
        }
    }
}

/// [`Outcomes::iter`]: the two sorted sequences merged, an identity in
/// both shown with its outcome in `other`.
#[derive(Clone)]
pub struct Iter<'a> {
    in_sync: Peekable<std::slice::Iter<'a, ResourceId>>,
    other: Peekable<btree_map::Iter<'a, ResourceId, Outcome>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a ResourceId, &'a Outcome);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.in_sync.peek(), self.other.peek()) {
            (Some(a), Some((b, _))) if a < b => self.in_sync.next().map(|id| (id, &IN_SYNC)),
            (Some(a), Some((b, _))) if a == b => {
                self.in_sync.next();
                self.other.next()
            }
            (_, Some(_)) => self.other.next(),
            (Some(_), None) => self.in_sync.next().map(|id| (id, &IN_SYNC)),
            (None, None) => None,
        }
    }
}

impl<'a> IntoIterator for &'a Outcomes {
    type Item = (&'a ResourceId, &'a Outcome);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(p: &str) -> ResourceId {
        ResourceId::new("files", "file", p)
    }

    /// The same operations on a map and on [`Outcomes`] leave the same
    /// outcomes, in the same order, and the same count.
    #[test]
    fn it_holds_what_a_map_would() {
        let ids: Vec<ResourceId> = ["b", "d", "f", "h"].iter().map(|p| id(p)).collect();
        let mut model: BTreeMap<ResourceId, Outcome> =
            ids.iter().map(|i| (i.clone(), IN_SYNC.clone())).collect();
        let mut o = Outcomes::in_sync(ids);
        let failed = Outcome::new(State::Failed, Some("EIO".into()));
        for (p, out) in [
            ("d", &failed),
            ("a", &failed),
            ("h", &IN_SYNC),
            ("z", &failed),
        ] {
            assert_eq!(
                o.insert(id(p), out.clone()),
                model.insert(id(p), out.clone()),
                "{p}"
            );
        }
        o.get_mut(&id("f")).unwrap().retry_at = Some(std::time::UNIX_EPOCH);
        model.get_mut(&id("f")).unwrap().retry_at = Some(std::time::UNIX_EPOCH);
        assert!(o.get_mut(&id("nothing")).is_none());
        o.get_or_insert_with(&id("c"), || failed.clone()).applied = true;
        model
            .entry(id("c"))
            .or_insert_with(|| failed.clone())
            .applied = true;
        o.get_or_insert_with(&id("b"), || failed.clone()).applied = true;
        model
            .entry(id("b"))
            .or_insert_with(|| failed.clone())
            .applied = true;
        let seen: Vec<_> = o.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let expected: Vec<_> = model.into_iter().collect();
        assert_eq!(seen, expected);
        assert_eq!(o.len(), expected.len());
        assert_eq!(o.get(id("d").as_str()), Some(&failed));
        assert_eq!(
            o.get(id("h").as_str()).map(|o| o.state),
            Some(State::InSync)
        );
        assert!(o.contains_key(id("z").as_str()) && !o.contains_key(id("y").as_str()));
    }
}

//! The stat cache's entries in memory: a vector sorted by path key, found
//! by binary search, and the few entries made since it was last sorted.
//! A hash map of 100k entries keeps a quarter of its slots empty and grows
//! by doubling; the vector holds each entry once and nothing more.

use std::collections::HashMap;

use super::at::Meta;
use super::cachefile::{Entry, Loaded, Seal};

/// `seen` of an entry forgotten since the last [`Table::compact`].
pub(super) const GONE: u16 = u16::MAX;

#[derive(Debug)]
pub(super) struct Table {
    /// What the entries' stats are printed with.
    seal: Seal,
    /// In key order, unique.
    sorted: Vec<(u64, Entry)>,
    /// Entries of keys `sorted` lacks.
    fresh: HashMap<u64, Entry>,
    /// Where each bucket of keys begins in `sorted` (see `index_buckets`).
    starts: Vec<u32>,
    /// A key's bucket is its top bits: `key >> shift`.
    shift: u32,
}

impl Table {
    /// No entries, under a new seal.
    pub(super) fn empty() -> Table {
        Table::from_entries(Loaded::empty()).0
    }

    /// From entries in any order (of two with one key, either stays), and
    /// whether they are to be written again: out of order (kept in order,
    /// they are sorted once, not at every load) or read from a file of the
    /// format before.
    pub(super) fn from_entries(loaded: Loaded) -> (Table, bool) {
        let Loaded {
            seal,
            mut entries,
            old,
        } = loaded;
        let sorted = entries.windows(2).all(|w| w[0].0 < w[1].0);
        if !sorted {
            // In place: no room beside 100k entries.
            entries.sort_unstable_by_key(|(k, _)| *k);
            entries.dedup_by_key(|(k, _)| *k);
        }
        entries.retain(|(_, e)| e.seen != GONE);
        let mut table = Table {
            seal,
            sorted: entries,
            fresh: HashMap::new(),
            starts: Vec::new(),
            shift: 0,
        };
        table.index_buckets();
        (table, !sorted || old)
    }

    /// The print of a file's stat, as an entry of this table keeps it.
    pub(super) fn print(&self, meta: &Meta) -> u64 {
        self.seal
            .print(meta.dev, meta.ino, meta.size, meta.mtime, meta.ctime)
    }

    /// The seal, to save with the entries.
    pub(super) fn seal(&self) -> &Seal {
        &self.seal
    }

    /// Where `key` is in `sorted`: its bucket in `starts` bounds a range
    /// of a few entries, searched there.
    fn index(&self, key: u64) -> Option<usize> {
        let bucket = (key >> self.shift) as usize;
        let (lo, hi) = match (self.starts.get(bucket), self.starts.get(bucket + 1)) {
            (Some(lo), Some(hi)) => (*lo as usize, *hi as usize),
            _ => (0, self.sorted.len()),
        };
        self.sorted[lo..hi]
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| lo + i)
    }

    /// Where each bucket of keys (by their top bits) begins in `sorted`,
    /// about four entries a bucket. Keys are hashes, spread evenly: a key
    /// is found with a look at its bucket's bounds and a few entries,
    /// where a binary search over 100k entries misses the cache at most of
    /// its 17 steps. Keys bunched on purpose only make the search longer.
    fn index_buckets(&mut self) {
        // At least one bit: a shift of 64 would overflow.
        let bits = (self.sorted.len() / 4).max(2).ilog2();
        self.shift = 64 - bits;
        let buckets = 1usize << bits;
        self.starts.clear();
        self.starts.reserve_exact(buckets + 1);
        let mut at = 0;
        for b in 0..buckets {
            while at < self.sorted.len() && ((self.sorted[at].0 >> self.shift) as usize) < b {
                at += 1;
            }
            self.starts.push(at as u32);
        }
        self.starts.push(self.sorted.len() as u32);
    }

    fn slot(&mut self, key: u64) -> Option<&mut Entry> {
        let i = self.index(key)?;
        Some(&mut self.sorted[i].1)
    }

    /// The entry of `key`, to read or change.
    pub(super) fn get_mut(&mut self, key: u64) -> Option<&mut Entry> {
        match self.index(key) {
            Some(i) => Some(&mut self.sorted[i].1).filter(|e| e.seen != GONE),
            None => self.fresh.get_mut(&key),
        }
    }

    /// Sets the entry of `key`; true when that changed it.
    pub(super) fn put(&mut self, key: u64, entry: Entry) -> bool {
        match self.slot(key) {
            Some(e) => {
                let changed = *e != entry;
                *e = entry;
                changed
            }
            None => self.fresh.insert(key, entry) != Some(entry),
        }
    }

    /// Drops the entry of `key`; true when there was one.
    pub(super) fn remove(&mut self, key: u64) -> bool {
        match self.slot(key) {
            Some(e) if e.seen != GONE => {
                e.seen = GONE;
                true
            }
            Some(_) => false,
            None => self.fresh.remove(&key).is_some(),
        }
    }

    /// Keeps the entries `keep` says to (never a forgotten one), all in
    /// key order again.
    pub(super) fn compact(&mut self, mut keep: impl FnMut(&Entry) -> bool) {
        self.sorted.retain(|(_, e)| e.seen != GONE && keep(e));
        self.fresh.retain(|_, e| keep(e));
        if !self.fresh.is_empty() {
            self.sorted.extend(self.fresh.drain());
            self.sorted.sort_unstable_by_key(|(k, _)| *k);
        }
        self.fresh.shrink_to_fit();
        self.index_buckets();
    }

    /// Every entry, in key order, once [`Table::compact`] made them so.
    pub(super) fn entries(&self) -> &[(u64, Entry)] {
        debug_assert!(self.fresh.is_empty(), "compacted first");
        &self.sorted
    }

    /// The generation each entry was last seen at, in key order, once
    /// [`Table::compact`] made them so: what the cache file does not keep.
    pub(super) fn seen(&self) -> Vec<u16> {
        self.entries().iter().map(|(_, e)| e.seen).collect()
    }

    /// Gives the entries, in key order, the generations [`Table::seen`]
    /// took from the table they were saved from; false (and nothing
    /// changed) when they are not as many.
    pub(super) fn set_seen(&mut self, seen: &[u16]) -> bool {
        if !self.fresh.is_empty() || seen.len() != self.sorted.len() {
            return false;
        }
        for ((_, e), s) in self.sorted.iter_mut().zip(seen) {
            e.seen = *s;
        }
        true
    }

    /// Every entry is seen at `generation`.
    pub(super) fn see_all(&mut self, generation: u16) {
        self.sorted
            .iter_mut()
            .for_each(|(_, e)| e.seen = generation);
        self.fresh.values_mut().for_each(|e| e.seen = generation);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.sorted.iter().filter(|(_, e)| e.seen != GONE).count() + self.fresh.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stat: u64) -> Entry {
        Entry {
            stat,
            trusted: true,
            blob: [7; 20],
            seen: 0,
        }
    }

    fn loaded(entries: Vec<(u64, Entry)>) -> Loaded {
        Loaded {
            entries,
            ..Loaded::empty()
        }
    }

    #[test]
    fn it_keeps_what_a_map_would_and_forgets_until_compacted() {
        let (mut t, rewrite) = Table::from_entries(loaded(vec![(5, entry(50)), (1, entry(10))]));
        assert!(rewrite, "out of order");
        assert_eq!(t.get_mut(5).map(|e| e.stat), Some(50));
        t.put(5, entry(55));
        assert!(t.put(3, entry(30)), "a new key");
        assert!(!t.put(3, entry(30)), "the same entry again");
        assert!(t.put(1, entry(11)));
        assert!(t.remove(5) && !t.remove(5));
        assert!(t.get_mut(5).is_none());
        assert!(t.put(5, entry(56)), "back after being forgotten");
        assert!(t.remove(5));
        assert_eq!(t.len(), 2);
        t.compact(|e| e.stat != 11);
        let keys: Vec<u64> = t.entries().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [3]);
        let (_, rewrite) = Table::from_entries(loaded(vec![(1, entry(10)), (5, entry(50))]));
        assert!(!rewrite, "in order, of the format of now");
        let old = Loaded {
            old: true,
            ..loaded(vec![(1, entry(10))])
        };
        assert!(Table::from_entries(old).1, "of the format before");
    }

    /// 100k entries are held whole: each stays at 40 bytes with its key.
    #[test]
    fn an_entry_stays_small() {
        assert_eq!(std::mem::size_of::<(u64, Entry)>(), 40);
    }

    #[test]
    fn every_key_is_found_however_the_keys_are_spread() {
        let spreads: [fn(u64) -> u64; 4] = [
            |i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            |i| i,
            |i| i * i * i,
            |i| if i % 2 == 0 { i } else { u64::MAX - i },
        ];
        for spread in spreads {
            let keys: Vec<u64> = (0..5000).map(spread).collect();
            let (t, _) =
                Table::from_entries(loaded(keys.iter().map(|k| (*k, entry(*k))).collect()));
            for k in &keys {
                let i = t.index(*k).expect("present");
                assert_eq!(t.sorted[i].0, *k);
            }
            for k in [1u64 << 63, 7, u64::MAX - 1] {
                if !keys.contains(&k) {
                    assert_eq!(t.index(k), None);
                }
            }
        }
    }
}

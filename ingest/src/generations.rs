//! A map bounded by generations instead of LRU bookkeeping, for the caches on the ingest
//! path ([`crate::record_dims`], [`crate::ua`]). Entries go into the current generation;
//! when it is full it becomes the previous one (the one before is dropped), and a hit in
//! the previous generation moves back into the current one. So an entry used within the
//! last generation is kept, at most `2 × capacity` are held, and a lookup is one or two
//! hash probes under the caller's lock, with no per-read bookkeeping (a concurrent cache
//! with an admission policy cost a fifth of the ingest path's CPU here,
//! docs/benchmarks.md).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Seeded per map, and a fraction of SipHash's cost on short keys.
type Hasher = foldhash::fast::RandomState;

/// The map (see the module documentation). Not synchronised: callers hold it in a lock.
pub(crate) struct Generations<K, V> {
    capacity: usize,
    current: HashMap<K, V, Hasher>,
    previous: HashMap<K, V, Hasher>,
}

impl<K: Hash + Eq, V> Generations<K, V> {
    /// Up to `capacity` entries per generation (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Generations {
            capacity: capacity.max(1),
            current: HashMap::default(),
            previous: HashMap::default(),
        }
    }

    /// The value of `key`, moved into the current generation when it was in the previous.
    pub(crate) fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.current.contains_key(key) {
            let (k, v) = self.previous.remove_entry(key)?;
            self.insert(k, v);
        }
        self.current.get(key)
    }

    /// Entries held, both generations.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// Sets `key`'s value in the current generation, starting a new one when it is full.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.current.len() >= self.capacity && !self.current.contains_key(&key) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_the_last_two_generations_are_kept() {
        let mut g: Generations<String, u32> = Generations::new(2);
        g.insert("a".into(), 1);
        g.insert("b".into(), 2);
        // "c" starts a generation: "a" and "b" are the previous one, still found.
        g.insert("c".into(), 3);
        assert_eq!(g.get("a"), Some(&1));
        // "a" moved back into the current generation (now full: "c", "a"); "d" starts
        // another, which drops "b".
        g.insert("d".into(), 4);
        assert_eq!(g.get("b"), None);
        assert_eq!(g.get("a"), Some(&1));
        assert_eq!(g.get("c"), Some(&3));
        assert_eq!(g.get("d"), Some(&4));
    }

    #[test]
    fn replacing_a_value_does_not_start_a_generation() {
        let mut g: Generations<&str, u32> = Generations::new(1);
        g.insert("a", 1);
        g.insert("a", 2);
        assert_eq!(g.get("a"), Some(&2));
        g.insert("b", 3);
        assert_eq!(g.get("a"), Some(&2));
    }
}

//! Maps and sets of per-process or per-thread state with a bound on their size.
//!
//! A plugin that remembers something per pid or tid (when a thread entered a syscall,
//! what a process did since its fork) must not grow without limit: a fork storm or a
//! missed exit would make it grow until the host stops it. [`BoundedMap`] and
//! [`BoundedSet`] hold at most a fixed number of keys, refuse further new keys, and
//! count what they refused so the plugin can say so.
//!
//! ```
//! use wasmtap_sdk::BoundedMap;
//! let mut entered: BoundedMap<u32, u64> = BoundedMap::with_max(2);
//! assert!(entered.insert(10, 100));
//! assert!(entered.insert(11, 200));
//! assert!(!entered.insert(12, 300), "full: refused");
//! assert!(entered.insert(10, 150), "a key it holds is updated even when full");
//! assert_eq!((entered.remove(&11), entered.dropped()), (Some(200), 1));
//! ```

use std::hash::Hash;

use crate::FxHashMap;

/// A hash map that holds at most [`max`](BoundedMap::max) keys (65,536 by default,
/// as many as the kernel's own per-thread maps) and counts the new keys it had to
/// refuse, or forget, in [`dropped`](BoundedMap::dropped).
///
/// A key the map already holds can always be updated; only new keys are refused
/// when it is full. [`clear`](BoundedMap::clear), [`drain`](BoundedMap::drain) and
/// [`remove`](BoundedMap::remove) are the plugin's own doing and are not counted.
#[derive(Clone, Debug)]
pub struct BoundedMap<K, V> {
    map: FxHashMap<K, V>,
    max: usize,
    dropped: u64,
}

/// The default bound of [`BoundedMap`] and [`BoundedSet`]: 65,536 keys.
pub const BOUNDED_MAX: usize = 65_536;

impl<K, V> Default for BoundedMap<K, V> {
    fn default() -> Self {
        BoundedMap::with_max(BOUNDED_MAX)
    }
}

impl<K, V> BoundedMap<K, V> {
    /// Empty, holding at most [`BOUNDED_MAX`] keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty, holding at most `max` keys.
    pub fn with_max(max: usize) -> Self {
        BoundedMap { map: FxHashMap::default(), max, dropped: 0 }
    }

    /// The most keys it holds.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No keys held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// As many keys as it may hold: a new key would be refused.
    pub fn is_full(&self) -> bool {
        self.map.len() >= self.max
    }

    /// New keys refused, and keys forgotten by
    /// [`get_or_default_clearing`](BoundedMap::get_or_default_clearing), since it was
    /// made or since the last [`take_dropped`](BoundedMap::take_dropped).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// [`dropped`](BoundedMap::dropped), and the count starts again from zero (for a
    /// report per interval).
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Forget every key (not counted as dropped).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Take every entry out, in no particular order (not counted as dropped).
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        self.map.drain()
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.map.iter()
    }
}

impl<K: Hash + Eq, V> BoundedMap<K, V> {
    /// Holds `key`.
    pub fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// The value of `key`, to change it.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Take `key` out.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    /// Set the value of `key`: true if it is held now (it was, or there was room);
    /// false if the map is full and `key` new, which is counted as dropped.
    pub fn insert(&mut self, key: K, value: V) -> bool {
        if self.is_full() && !self.map.contains_key(&key) {
            self.dropped += 1;
            return false;
        }
        self.map.insert(key, value);
        true
    }
}

impl<K: Hash + Eq, V: Default> BoundedMap<K, V> {
    /// The value of `key`, made with `Default` if new; `None` if the map is full and
    /// `key` new, which is counted as dropped. The shape of `@tally[key]++` with a limit.
    pub fn get_or_default(&mut self, key: K) -> Option<&mut V> {
        if self.is_full() && !self.map.contains_key(&key) {
            self.dropped += 1;
            return None;
        }
        Some(self.map.entry(key).or_default())
    }

    /// The value of `key`, made with `Default` if new. If the map is full and `key`
    /// new, everything it holds is forgotten first and counted as dropped: for state
    /// where the new matters more than the old (a full map most likely holds the
    /// leftovers of processes whose end was missed).
    pub fn get_or_default_clearing(&mut self, key: K) -> &mut V {
        if self.is_full() && !self.map.contains_key(&key) {
            self.dropped += self.map.len() as u64;
            self.map.clear();
        }
        self.map.entry(key).or_default()
    }
}

/// A hash set that holds at most [`max`](BoundedSet::max) keys (65,536 by default):
/// [`BoundedMap`] without values.
#[derive(Clone, Debug)]
pub struct BoundedSet<K> {
    map: BoundedMap<K, ()>,
}

impl<K> Default for BoundedSet<K> {
    fn default() -> Self {
        BoundedSet { map: BoundedMap::new() }
    }
}

impl<K> BoundedSet<K> {
    /// Empty, holding at most [`BOUNDED_MAX`] keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty, holding at most `max` keys.
    pub fn with_max(max: usize) -> Self {
        BoundedSet { map: BoundedMap::with_max(max) }
    }

    /// The most keys it holds.
    pub fn max(&self) -> usize {
        self.map.max()
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No keys held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// New keys refused since it was made.
    pub fn dropped(&self) -> u64 {
        self.map.dropped()
    }

    /// Forget every key (not counted as dropped).
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

impl<K: Hash + Eq> BoundedSet<K> {
    /// Holds `key`.
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Add `key`: true if it is held now (it was, or there was room); false if the set
    /// is full and `key` new, which is counted as dropped.
    pub fn insert(&mut self, key: K) -> bool {
        self.map.insert(key, ())
    }

    /// Take `key` out: true if it was held.
    pub fn remove(&mut self, key: &K) -> bool {
        self.map.remove(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_map_refuses_new_keys_counts_them_and_still_updates_old_ones() {
        let mut m = BoundedMap::with_max(2);
        assert!(m.insert(1, "a") && m.insert(2, "b"));
        assert!(m.is_full());
        assert!(!m.insert(3, "c"));
        assert!(m.insert(1, "z"));
        assert_eq!((m.get(&1), m.get(&3), m.len(), m.dropped()), (Some(&"z"), None, 2, 1));
        assert_eq!(m.remove(&2), Some("b"));
        assert!(m.insert(3, "c"), "room again");
        assert_eq!(m.dropped(), 1);
    }

    #[test]
    fn get_or_default_tallies_until_full() {
        let mut m: BoundedMap<&str, u64> = BoundedMap::with_max(1);
        *m.get_or_default("cat").unwrap() += 1;
        *m.get_or_default("cat").unwrap() += 1;
        assert!(m.get_or_default("dog").is_none());
        assert!(m.get_or_default("dog").is_none());
        assert_eq!((m.get(&"cat"), m.dropped()), (Some(&2), 2));
        assert_eq!(m.take_dropped(), 2);
        assert_eq!(m.dropped(), 0, "taken");
        let drained: Vec<_> = m.drain().collect();
        assert_eq!((drained, m.len(), m.dropped()), (vec![("cat", 2)], 0, 0));
    }

    #[test]
    fn get_or_default_clearing_forgets_everything_when_full() {
        let mut m: BoundedMap<u32, u64> = BoundedMap::with_max(3);
        for pid in 1..=3 {
            *m.get_or_default_clearing(pid) = u64::from(pid);
        }
        *m.get_or_default_clearing(2) += 10;
        assert_eq!((m.len(), m.dropped(), m.get(&2)), (3, 0, Some(&12)), "an old key: nothing forgotten");
        *m.get_or_default_clearing(4) += 1;
        assert_eq!((m.len(), m.dropped(), m.get(&4), m.get(&1)), (1, 3, Some(&1), None));
        m.clear();
        assert_eq!((m.len(), m.dropped()), (0, 3), "clearing is not dropping");
    }

    #[test]
    fn the_default_bound_is_that_of_the_kernel_maps() {
        let m: BoundedMap<u32, ()> = BoundedMap::new();
        assert_eq!(m.max(), 65_536);
        assert_eq!(BoundedSet::<u32>::new().max(), BOUNDED_MAX);
        assert!(!m.is_full() && m.is_empty());
    }

    #[test]
    fn a_set_refuses_past_its_bound() {
        let mut s = BoundedSet::with_max(1);
        assert!(s.insert(7) && s.insert(7));
        assert!(!s.insert(8));
        assert!(s.contains(&7) && !s.contains(&8));
        assert_eq!((s.len(), s.dropped()), (1, 1));
        assert!(s.remove(&7) && !s.remove(&7));
        assert!(s.insert(8) && !s.is_empty());
    }
}

//! Keyed counters that become aggregations (`@name[key] = count()`).

use std::collections::hash_map::{self, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use crate::agg::{aggregation, keep_top};
use crate::event::{Comm, Syscall};
use crate::{AggEntry, AggKind, AggOrder, AggValue, Aggregation, Value};

/// A fast, deterministic hasher (the Firefox/rustc "Fx" hash).
///
/// `std`'s default `RandomState` seeds itself from `wasi:random`, which would add an
/// import the host has no reason to grant; aggregation keys come from the kernel,
/// not from an adversary, so a fixed hash is fine.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // Mixing in the length keeps "a" and "a\0" apart.
            self.add(u64::from_le_bytes(last) ^ (rest.len() as u64) << 56);
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// `BuildHasher` for [`FxHasher`]; use it for any `HashMap` in a plugin.
pub type FxBuildHasher = BuildHasherDefault<FxHasher>;

/// A `HashMap` with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, FxBuildHasher>;

/// A `HashSet` with [`FxBuildHasher`].
pub type FxHashSet<K> = std::collections::HashSet<K, FxBuildHasher>;

/// Something that can be an aggregation key: one [`Value`] per key name.
pub trait Key {
    /// The key's parts, in the order of the aggregation's `key-names`.
    fn to_values(&self) -> Vec<Value>;
}

macro_rules! int_key {
    ($($t:ty),*) => {$(
        impl Key for $t {
            fn to_values(&self) -> Vec<Value> {
                vec![Value::Int(i64::from(*self))]
            }
        }
    )*};
}
int_key!(i8, i16, i32, i64, u8, u16, u32);

impl Key for u64 {
    /// Values past `i64::MAX` saturate.
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))]
    }
}

impl Key for bool {
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Int(i64::from(*self))]
    }
}

impl Key for String {
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Text(self.clone())]
    }
}

impl Key for &str {
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Text((*self).to_string())]
    }
}

impl Key for Comm {
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Text(self.to_string())]
    }
}

impl Key for Syscall {
    /// The syscall's name, or its number as text if the number is unknown.
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Text(self.to_string())]
    }
}

impl Key for Value {
    fn to_values(&self) -> Vec<Value> {
        vec![self.clone()]
    }
}

impl Key for Vec<Value> {
    fn to_values(&self) -> Vec<Value> {
        self.clone()
    }
}

impl Key for () {
    /// No parts: the one entry of an aggregation without a key (DTrace's `@ = count()`).
    fn to_values(&self) -> Vec<Value> {
        Vec::new()
    }
}

impl<A: Key, B: Key> Key for (A, B) {
    fn to_values(&self) -> Vec<Value> {
        let mut v = self.0.to_values();
        v.extend(self.1.to_values());
        v
    }
}

impl<A: Key, B: Key, C: Key> Key for (A, B, C) {
    fn to_values(&self) -> Vec<Value> {
        let mut v = self.0.to_values();
        v.extend(self.1.to_values());
        v.extend(self.2.to_values());
        v
    }
}

impl<A: Key, B: Key, C: Key, D: Key> Key for (A, B, C, D) {
    fn to_values(&self) -> Vec<Value> {
        let mut v = self.0.to_values();
        v.extend(self.1.to_values());
        v.extend(self.2.to_values());
        v.extend(self.3.to_values());
        v
    }
}

/// Counters keyed by `K`: the `@[key] = count()` / `@[key] = sum(n)` of bpftrace.
///
/// ```
/// use wasmtap_sdk::{AggOrder, Counts};
/// let mut by_pid = Counts::new();
/// by_pid.add(42u32, 1);
/// by_pid.add(42u32, 2);
/// assert_eq!(by_pid.get(&42), 3);
/// let agg = by_pid.to_aggregation("pids", "", &["pid"], AggOrder::ValueAscending, 10);
/// assert_eq!(agg.entries.len(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct Counts<K> {
    map: FxHashMap<K, i64>,
}

impl<K> Default for Counts<K> {
    fn default() -> Self {
        Counts { map: FxHashMap::default() }
    }
}

impl<K: Hash + Eq> Counts<K> {
    /// No counters.
    pub fn new() -> Self {
        Counts::default()
    }

    /// Add `n` to the counter of `key` (wrapping at `i64` limits rather than panicking).
    pub fn add(&mut self, key: K, n: i64) {
        let v = self.map.entry(key).or_insert(0);
        *v = v.wrapping_add(n);
    }

    /// The counter of `key`; 0 if never added to.
    pub fn get(&self, key: &K) -> i64 {
        self.map.get(key).copied().unwrap_or(0)
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forget every key (bpftrace's `clear(@)`).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Every key and its counter, in no particular order.
    pub fn iter(&self) -> hash_map::Iter<'_, K, i64> {
        self.map.iter()
    }
}

impl<K: Key> Counts<K> {
    /// The counters as a `count` aggregation for `on-tick` or `finish`, entries sorted
    /// by `order`.
    ///
    /// With `top > 0` only the `top` largest counters are sent (ties broken by key),
    /// which is what the host would keep anyway; `0` sends all.
    pub fn to_aggregation(
        &self,
        name: &str,
        title: &str,
        key_names: &[&str],
        order: AggOrder,
        top: u32,
    ) -> Aggregation {
        let mut rows: Vec<(i64, Vec<Value>)> = self.map.iter().map(|(k, &n)| (n, k.to_values())).collect();
        keep_top(&mut rows, top, |a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let entries = rows.into_iter().map(|(n, key)| (n, AggEntry { key, value: AggValue::Scalar(n) })).collect();
        aggregation(name, title, key_names, AggKind::Count, order, top, entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn fx_hash_is_deterministic_and_separates_lengths() {
        let h = |b: &[u8]| FxBuildHasher::default().hash_one(b);
        assert_eq!(h(b"bash"), h(b"bash"));
        assert_ne!(h(b"a"), h(b"a\0"));
        assert_ne!(h(b"bash"), h(b"bask"));
    }

    #[test]
    fn counts_add_and_clear() {
        let mut c = Counts::new();
        c.add(Comm::new(b"sh"), 1);
        c.add(Comm::new(b"sh"), 1);
        c.add(Comm::new(b"ls"), 5);
        assert_eq!(c.get(&Comm::new(b"sh")), 2);
        assert_eq!(c.len(), 2);
        c.clear();
        assert!(c.is_empty());
    }

    #[test]
    fn aggregation_keeps_the_top_entries_with_keys_rendered() {
        let mut c = Counts::new();
        for (nr, n) in [(0i64, 5), (1, 9), (999, 7), (39, 1)] {
            c.add(Syscall(nr), n);
        }
        let agg = c.to_aggregation("syscall", "Top 2 syscalls:", &["syscall"], AggOrder::ValueAscending, 2);
        assert_eq!(agg.top, 2);
        assert_eq!(agg.key_names, vec!["syscall".to_string()]);
        assert_eq!(agg.kind, AggKind::Count);
        let got: Vec<_> = agg.entries.iter().map(|e| (e.key.clone(), e.value.clone())).collect();
        let text = |s: &str| vec![Value::Text(s.into())];
        assert_eq!(got, vec![(text("999"), AggValue::Scalar(7)), (text("write"), AggValue::Scalar(9))]);
    }

    #[test]
    fn tuple_keys_concatenate() {
        assert_eq!((7u32, "x").to_values(), vec![Value::Int(7), Value::Text("x".into())]);
        let four = (1u8, "a", Comm::new(b"sh"), Syscall(0));
        let text = |s: &str| Value::Text(s.into());
        assert_eq!(four.to_values(), vec![Value::Int(1), text("a"), text("sh"), text("read")]);
        assert_eq!(().to_values(), Vec::<Value>::new());
    }
}

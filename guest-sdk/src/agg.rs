//! DTrace's aggregations, kept in the plugin's memory: the public [`Agg`], the
//! functions that build exported records for it and for [`Counts`](crate::Counts).
//!
//! `stat` holds what a key keeps per function, `sketch` the percentile sketch, `bins`
//! the sparse bucket counters both use, `export` builds the records the host receives. Bucket layouts come from
//! [`wasmtap_abi::hist`], shared with the host and the kernel collectors.

mod bins;
mod export;
mod sketch;
mod stat;

use std::cell::Cell;
use std::hash::Hash;

use wasmtap_abi::hist::{Linear, LogLinear};

use crate::{AggEntry, AggKind, AggOrder, AggValue, Aggregation, FxHashMap, Key, Level, Value};
use export::by_order;
pub use export::from_entries;
pub(crate) use export::{aggregation, keep_top};
pub(crate) use stat::Stat;
use stat::{Func, Layout};

/// The percentiles [`Agg::percentiles`] reports: p50, p90, p99 and p99.9, in millionths.
const DEFAULT_PERCENTILES: [u32; 4] = [500_000, 900_000, 990_000, 999_000];

/// What an [`Agg`] does with a new key when it already holds its limit of keys.
///
/// Whatever the policy, every lost sample or key is counted in [`Agg::dropped`], and
/// the next [`to_aggregation`](Agg::to_aggregation) reports the new losses on the
/// user's stderr (`@name: 12 samples dropped…`): drops are shown, never silent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Eviction {
    /// Keep the keys there are; a sample for a new key is dropped. DTrace's behaviour
    /// when its aggregation buffer is full, and the default.
    #[default]
    RejectNew,
    /// Make room by evicting the keys with the smallest values (as entries sort: a
    /// histogram's or percentiles' number of samples), the least recently updated
    /// first among equals.
    EvictSmallest,
    /// Make room by evicting the least recently updated keys.
    EvictLeastRecent,
}

/// A DTrace aggregation: one statistic per key, computed in the plugin.
///
/// Build it with the function it applies: [`count`](Agg::count), [`sum`](Agg::sum),
/// [`avg`](Agg::avg), [`min`](Agg::min), [`max`](Agg::max), [`stddev`](Agg::stddev),
/// [`quantize`](Agg::quantize), [`lquantize`](Agg::lquantize),
/// [`llquantize`](Agg::llquantize), [`percentiles`](Agg::percentiles). Feed it with
/// [`add`](Agg::add): a hash lookup and a little arithmetic, no host call. Hand it to
/// the host from `on_tick` or `finish` with [`to_aggregation`](Agg::to_aggregation);
/// the host renders it (DTrace-style text and histograms, JSON, metrics). Keys are
/// anything [`Key`] + `Hash + Eq`: integers, strings, [`Comm`](crate::Comm),
/// [`Syscall`](crate::Syscall), [`Stack`](crate::Stack), `()`, tuples of them.
///
/// ```
/// use wasmtap_sdk::{Agg, AggKind, AggOrder, AggValue};
/// let mut latency = Agg::quantize(); // @[comm] = quantize(ns)
/// latency.add("bash", 1500);
/// latency.add("bash", 3000);
/// let agg = latency.to_aggregation("latency", "ns", &["comm"], AggOrder::Key, 0);
/// assert_eq!(agg.kind, AggKind::Quantize);
/// let AggValue::Histogram(hist) = &agg.entries[0].value else { unreachable!() };
/// assert_eq!((hist.buckets[0].low, hist.buckets[1].low, hist.sum), (1024, 2048, 4500));
/// latency.clear(); // DTrace's clear(@): the keys stay, their values restart from zero
/// ```
///
/// Values follow DTrace: integer arithmetic, sums wrapping at the `i64` limits, `avg`
/// and `stddev` truncated the way `dtrace` prints them. Histograms use the buckets of
/// [`wasmtap_abi::hist`], shared with the host and the kernel collectors.
///
/// Percentiles come from a mergeable sketch (after DDSketch): every reported value is
/// within **1 %** of the exact order statistic — the sample of rank `ceil(q * count)`
/// in ascending order (at least 1) — whatever the distribution, and exact below 100,
/// at p0 (the minimum) and at p100 (the maximum). Per key and sign it keeps at most
/// 2048 bins, which span nine decades (a factor 7.8e8: 1 ns to 0.78 s); samples that
/// many times smaller than the largest are folded into the lowest bin kept, so a
/// percentile among them reads too large. Memory grows with the bins in use, 16 bytes
/// each: a few hundred for a typical latency distribution.
///
/// An aggregation holds at most [`Agg::DEFAULT_LIMIT`] keys unless told otherwise
/// ([`with_limit`](Agg::with_limit)); its [`Eviction`] policy says what happens to a
/// new key beyond that, and every sample or key lost is counted
/// ([`dropped`](Agg::dropped)) and reported on the user's stderr at the next export.
#[derive(Clone, Debug)]
pub struct Agg<K> {
    func: Func,
    map: FxHashMap<K, Slot>,
    limit: usize,
    eviction: Eviction,
    dropped: u64,
    /// `dropped` at the last report.
    reported: Cell<u64>,
    normal: u64,
    /// Counts updates; a slot's `used` is the count at its last update, unique.
    clock: u64,
}

/// One key's statistic and when it was last updated.
#[derive(Clone, Debug)]
struct Slot {
    stat: Stat,
    used: u64,
}

impl<K> Agg<K> {
    /// The key limit of a new aggregation.
    pub const DEFAULT_LIMIT: usize = 65536;

    fn with_func(func: Func) -> Self {
        Agg {
            func,
            map: FxHashMap::default(),
            limit: Self::DEFAULT_LIMIT,
            eviction: Eviction::RejectNew,
            dropped: 0,
            reported: Cell::new(0),
            normal: 1,
            clock: 0,
        }
    }

    /// `count()`: the number of samples per key; [`add`](Agg::add) ignores its value.
    pub fn count() -> Self {
        Agg::with_func(Func::Count)
    }

    /// `sum(v)`: the sum of the values, wrapping at the `i64` limits.
    pub fn sum() -> Self {
        Agg::with_func(Func::Sum)
    }

    /// `avg(v)`: the integer mean, truncated toward zero.
    pub fn avg() -> Self {
        Agg::with_func(Func::Avg)
    }

    /// `min(v)`: the smallest value.
    pub fn min() -> Self {
        Agg::with_func(Func::Min)
    }

    /// `max(v)`: the largest value.
    pub fn max() -> Self {
        Agg::with_func(Func::Max)
    }

    /// `stddev(v)`: the integer standard deviation exactly as DTrace computes it, from
    /// the count, the sum and the 128-bit sum of squares: `isqrt(sumsq / n - (sum / n)^2)`
    /// in integer arithmetic. The mean is truncated before it is squared, so samples
    /// with a large mean and a small spread read high (1000000 and 1000001 give 1000).
    pub fn stddev() -> Self {
        Agg::with_func(Func::Stddev)
    }

    /// `quantize(v)`: a power-of-two histogram ([`hist::log2_bucket`]); bpftrace's `hist`.
    ///
    /// [`hist::log2_bucket`]: wasmtap_abi::hist::log2_bucket
    pub fn quantize() -> Self {
        Agg::with_func(Func::Hist(Layout::Log2))
    }

    /// `lquantize(v, min, max, step)`: a linear histogram ([`hist::Linear`]) with an
    /// underflow and an overflow bucket; bpftrace's `lhist`. DTrace's rules: `step > 0`,
    /// `max > min`, between 1 and 65535 buckets of `step` in `[min, max)`.
    ///
    /// [`hist::Linear`]: wasmtap_abi::hist::Linear
    pub fn lquantize(min: i64, max: i64, step: i64) -> Result<Self, String> {
        let layout = Linear::new(min, max, step).map_err(|e| format!("lquantize({min}, {max}, {step}): {e}"))?;
        Ok(Agg::with_func(Func::Hist(Layout::Linear(layout))))
    }

    /// `llquantize(v, factor, low, high, steps)`: a log-linear histogram
    /// ([`hist::LogLinear`]): `steps` linear buckets per power of `factor`, from
    /// `factor^low` to `factor^(high + 1)`, with DTrace's rules.
    ///
    /// [`hist::LogLinear`]: wasmtap_abi::hist::LogLinear
    pub fn llquantize(factor: u16, low: u16, high: u16, steps: u16) -> Result<Self, String> {
        let layout = LogLinear::new(factor, low, high, steps)
            .map_err(|e| format!("llquantize({factor}, {low}, {high}, {steps}): {e}"))?;
        Ok(Agg::with_func(Func::Hist(Layout::LogLinear(layout))))
    }

    /// p50, p90, p99 and p99.9 of the values, with the count and sum (see [`Agg`] for
    /// the accuracy).
    pub fn percentiles() -> Self {
        Agg::with_func(Func::Percentiles(DEFAULT_PERCENTILES.into()))
    }

    /// These percentiles, in millionths (`990_000` is p99, `999_900` p99.99), reported
    /// in the order given; each at most `1_000_000`.
    pub fn percentiles_at(millionths: &[u32]) -> Result<Self, String> {
        match millionths.iter().find(|&&q| q > 1_000_000) {
            Some(q) => Err(format!("percentile {q} millionths: must be at most 1000000 (p100)")),
            None => Ok(Agg::with_func(Func::Percentiles(millionths.into()))),
        }
    }

    /// The same aggregation holding at most `max_keys` keys (at least 1), making room
    /// for new keys by `eviction`. Evicting policies evict a sixteenth of the limit at
    /// once, so that a full aggregation is not scanned for every new key.
    pub fn with_limit(self, max_keys: usize, eviction: Eviction) -> Self {
        Agg { limit: max_keys.max(1), eviction, ..self }
    }

    /// What the values are, as the host sees it.
    pub fn kind(&self) -> AggKind {
        self.func.kind()
    }

    /// Samples refused ([`Eviction::RejectNew`]) or keys evicted (the other policies)
    /// since the aggregation was made.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// DTrace's `normalize(@, n)`: from now on, exported scalars and histogram counts
    /// are divided by `n` (per-second rates from an interval's counts, say); the data
    /// itself stays raw. Percentiles are not divided. `n = 0` is taken as 1.
    pub fn normalize(&mut self, n: u64) {
        self.normal = n.max(1);
    }

    /// DTrace's `denormalize(@)`: export the raw values again.
    pub fn denormalize(&mut self) {
        self.normal = 1;
    }

    /// Report drops not reported yet, once, as a warning naming the aggregation.
    pub(crate) fn report_drops(&self, name: &str) {
        let new = self.dropped - self.reported.replace(self.dropped);
        if new == 0 {
            return;
        }
        let what = match self.eviction {
            Eviction::RejectNew => format!("{new} samples of new keys dropped"),
            Eviction::EvictSmallest => format!("{new} keys with the smallest values evicted"),
            Eviction::EvictLeastRecent => format!("{new} least recently updated keys evicted"),
        };
        crate::imports::log(Level::Warn, &format!("@{name}: {what} (limit: {} keys)", self.limit));
    }

    /// Every key and its statistic.
    pub(crate) fn slots(&self) -> impl Iterator<Item = (&K, &Stat)> {
        self.map.iter().map(|(k, slot)| (k, &slot.stat))
    }

    pub(crate) fn func(&self) -> &Func {
        &self.func
    }

    pub(crate) fn normal(&self) -> u64 {
        self.normal
    }
}

impl<K: Hash + Eq> Agg<K> {
    /// Add a sample: `@[key] = f(value)`. For [`count`](Agg::count) the value is
    /// ignored: each call counts one, like DTrace's `count()`.
    pub fn add(&mut self, key: K, value: i64) {
        self.add_n(key, value, 1);
    }

    /// Add `value` as `n` samples: DTrace's increment argument (`quantize(v, n)`), or
    /// `n` events counted elsewhere for a [`count`](Agg::count).
    pub fn add_n(&mut self, key: K, value: i64, n: u64) {
        if let Some((func, stat)) = self.slot(key) {
            stat.add(func, value, n);
        }
    }

    /// Fold in one value as the host reports it, such as an entry of a kernel
    /// aggregation's snapshot ([`read_aggregation`](crate::read_aggregation)): a
    /// `count` adds it, `sum` adds it, `min` and `max` keep the extreme, histograms add
    /// bucket by bucket (the buckets must be this aggregation's). An `avg`, `stddev` or
    /// percentile value cannot be merged and is refused.
    pub fn merge_value(&mut self, key: K, value: &AggValue) -> Result<(), String> {
        match self.slot(key) {
            Some((func, stat)) => stat.merge_value(func, value),
            None => Ok(()),
        }
    }

    /// Fold in a kernel aggregation's snapshot, translating each entry's key with `key`
    /// (`None` skips the entry). Entries whose translated keys are equal merge as
    /// [`merge_value`](Agg::merge_value) says. Stops at the first value that does not
    /// fit.
    ///
    /// ```
    /// use wasmtap_sdk::{Agg, AggEntry, AggValue, Syscall, Value};
    /// let snapshot = vec![
    ///     AggEntry { key: vec![Value::Int(0)], value: AggValue::Scalar(12) },
    ///     AggEntry { key: vec![Value::Int(1)], value: AggValue::Scalar(3) },
    /// ];
    /// let mut by_name = Agg::count();
    /// by_name.merge_entries(snapshot, |key| match key[..] {
    ///     [Value::Int(nr)] => Some(Syscall(nr)),
    ///     _ => None,
    /// })?;
    /// assert_eq!(by_name.value(&Syscall(0)), Some(12));
    /// # Ok::<(), String>(())
    /// ```
    pub fn merge_entries(
        &mut self,
        entries: impl IntoIterator<Item = AggEntry>,
        mut key: impl FnMut(Vec<Value>) -> Option<K>,
    ) -> Result<(), String> {
        for entry in entries {
            if let Some(k) = key(entry.key) {
                self.merge_value(k, &entry.value)?;
            }
        }
        Ok(())
    }

    /// The value `key` would be exported with (normalized), if the key is there.
    pub fn get(&self, key: &K) -> Option<AggValue> {
        self.map.get(key).map(|slot| slot.stat.value(&self.func, self.normal))
    }

    /// What `key`'s entry sorts by, if the key is there: the scalar value (normalized),
    /// or the number of samples of a histogram or of percentiles.
    pub fn value(&self, key: &K) -> Option<i64> {
        self.map.get(key).map(|slot| slot.stat.rank(&self.func, self.normal))
    }

    /// Every key with its value (see [`get`](Agg::get)), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, AggValue)> + '_ {
        self.map.iter().map(|(k, slot)| (k, slot.stat.value(&self.func, self.normal)))
    }

    /// Forget `key`; whether it was there.
    pub fn remove(&mut self, key: &K) -> bool {
        self.map.remove(key).is_some()
    }

    /// DTrace's `clear(@)`: every value starts again from zero; the keys stay and are
    /// exported with zero values (an empty histogram, `min` and `max` of 0) until
    /// [`trunc`](Agg::trunc) removes them.
    pub fn clear(&mut self) {
        for slot in self.map.values_mut() {
            slot.stat = self.func.empty();
        }
    }

    /// DTrace's `trunc(@, n)`: keep the `n` keys with the largest values (ties: the
    /// most recently updated), remove the others; `trunc(0)` removes every key.
    pub fn trunc(&mut self, n: usize) {
        if n == 0 {
            self.map.clear();
        } else if n < self.map.len() {
            let (func, normal) = (&self.func, self.normal);
            let rank = |slot: &Slot| (slot.stat.rank(func, normal), slot.used);
            let mut ranks: Vec<(i64, u64)> = self.map.values().map(rank).collect();
            let (_, &mut cut, _) = ranks.select_nth_unstable_by(n - 1, |a, b| b.cmp(a));
            self.map.retain(|_, slot| rank(slot) >= cut);
        }
    }

    /// The function and the statistic of `key`, made if need be, or `None` if the key
    /// is new and there is no room for it.
    fn slot(&mut self, key: K) -> Option<(&Func, &mut Stat)> {
        self.clock += 1;
        if self.map.len() >= self.limit && !self.map.contains_key(&key) {
            match self.eviction {
                Eviction::RejectNew => {
                    self.dropped += 1;
                    return None;
                }
                Eviction::EvictSmallest | Eviction::EvictLeastRecent => self.evict(),
            }
        }
        let func = &self.func;
        let slot = self.map.entry(key).or_insert_with(|| Slot { stat: func.empty(), used: 0 });
        slot.used = self.clock;
        Some((func, &mut slot.stat))
    }

    /// Evict a sixteenth of the limit (at least one key, and enough to make room after
    /// the limit was lowered) by the eviction policy.
    fn evict(&mut self) {
        let n = (self.limit / 16).max(self.map.len() + 1 - self.limit).clamp(1, self.map.len());
        let (func, normal, eviction) = (&self.func, self.normal, self.eviction);
        // `used` is unique, so each key has its own place in this order.
        let victim = |slot: &Slot| match eviction {
            Eviction::EvictSmallest => (slot.stat.rank(func, normal), slot.used),
            _ => (0, slot.used),
        };
        let mut order: Vec<(i64, u64)> = self.map.values().map(victim).collect();
        let (_, &mut cut, _) = order.select_nth_unstable(n - 1);
        self.map.retain(|_, slot| victim(slot) > cut);
        self.dropped += n as u64;
    }
}

impl<K: Hash + Eq + Clone> Agg<K> {
    /// Add every sample of `other` (DTrace's aggregations merge across CPUs the same
    /// way): scalars combine exactly, histograms bucket by bucket, percentile sketches
    /// into the sketch of all samples. Both must apply the same function to the same
    /// buckets; percentiles merge whatever quantiles they report (these keep theirs).
    pub fn merge(&mut self, other: &Agg<K>) -> Result<(), String> {
        if !self.func.merges_with(&other.func) {
            return Err(format!("cannot merge a {} aggregation into a {} one", other.func.name(), self.func.name()));
        }
        for (key, theirs) in &other.map {
            if let Some((_, stat)) = self.slot(key.clone()) {
                stat.merge(&theirs.stat);
            }
        }
        Ok(())
    }
}

impl<K: Key + Hash + Eq> Agg<K> {
    /// Keys and the values they sort by (see [`value`](Agg::value)), ordered by `order`;
    /// ties, and [`AggOrder::Key`], by the keys' values.
    pub fn sorted(&self, order: AggOrder) -> Vec<(&K, i64)> {
        let mut rows: Vec<(Vec<Value>, &K, i64)> =
            self.map.iter().map(|(k, slot)| (k.to_values(), k, slot.stat.rank(&self.func, self.normal))).collect();
        rows.sort_unstable_by(|a, b| by_order(order, (a.2, &a.0), (b.2, &b.0)));
        rows.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// The `n` keys with the largest values, largest first.
    pub fn top(&self, n: usize) -> Vec<(&K, i64)> {
        let mut rows = self.sorted(AggOrder::ValueDescending);
        rows.truncate(n);
        rows
    }

    /// The aggregation for `on_tick` or `finish`: `@name[key]: value`, one key name
    /// per part of the key, entries sorted by `order`. With `top > 0` only the `top`
    /// largest entries are sent (ties broken by key), which is what the host would keep
    /// anyway; 0 sends all. Histograms carry every bucket from the lowest to the highest
    /// with a sample, empty ones too. New drops are reported now (see [`Eviction`]).
    pub fn to_aggregation(
        &self,
        name: &str,
        title: &str,
        key_names: &[&str],
        order: AggOrder,
        top: u32,
    ) -> Aggregation {
        self.report_drops(name);
        let mut rows: Vec<(i64, Vec<Value>, &Stat)> = self
            .map
            .iter()
            .map(|(k, slot)| (slot.stat.rank(&self.func, self.normal), k.to_values(), &slot.stat))
            .collect();
        keep_top(&mut rows, top, |a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let entries = rows
            .into_iter()
            .map(|(rank, key, stat)| (rank, AggEntry { key, value: stat.value(&self.func, self.normal) }))
            .collect();
        aggregation(name, title, key_names, self.kind(), order, top, entries)
    }
}

#[cfg(test)]
mod tests;

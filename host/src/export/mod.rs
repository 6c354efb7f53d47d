//! Fleet export: the run's aggregations as metrics that Prometheus scrapes (`--serve`)
//! and an OpenTelemetry collector receives (`--otlp`). See docs/fleet.md.
//!
//! The dispatch thread adds each plugin's reports into running totals ([`Sink::add`]):
//! a plugin's `interval=` report holds that interval's values (the plugin clears after
//! reporting, as `interval:s:1 { print(@); clear(@); }` does), so counts, sums and
//! histogram buckets are added up and never go down, whatever the plugin resets. Each
//! addition publishes a new [`Snapshot`] (a pointer swap under a lock nobody holds for
//! long); the export thread renders snapshots for scrapes and pushes. So a scrape never
//! waits for a plugin, and a plugin never waits for a scrape.
//!
//! ```text
//! let sink = Sink::new(&["syscount".into()], started_unix_ns);
//! sink.add(0, &tick_report);           // dispatch thread, at each interval
//! let text = prom::exposition(&sink.snapshot()); // export thread, at each scrape
//! ```
//!
//! Cardinality is bounded per aggregation ([`MAX_SERIES`], [`MAX_STACK_SERIES`]): keys
//! beyond the bound are added into one series whose labels read `[other]`.

pub mod openmetrics;
pub mod otlp;
pub mod prom;
pub mod serve;
pub mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::accounting::PluginStats;
use crate::output::folded_stack;
use crate::wit::types::{AggEntry, AggKind, AggValue, Aggregation, Bucket, Histogram, Percentile, Quantiles, Value};

/// Series an aggregation may have; later keys are counted under `[other]`.
pub const MAX_SERIES: usize = 1000;
/// Series an aggregation keyed by a stack may have.
pub const MAX_STACK_SERIES: usize = 100;
/// The label value of the series that holds the keys over the bound.
pub const OTHER: &str = "[other]";

/// The running totals of one series.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Total {
    /// Count and sum: added up. Min and max: over the run. Avg and stddev: the latest.
    Scalar(i64),
    /// Bucket counts added, by (low, high); the sum of the samples added.
    Histogram { buckets: Vec<(i64, i64, u64)>, sum: i64 },
    /// Samples and their sum added; the percentile estimates the latest.
    Quantiles { count: u64, sum: i64, points: Vec<(u32, i64)> },
}

/// One aggregation's series, in the order their keys first came.
#[derive(Clone, Debug)]
pub struct Family {
    pub name: String,
    pub title: String,
    pub key_names: Vec<String>,
    pub kind: AggKind,
    /// Label values (one per key name) and totals.
    pub series: Vec<(Vec<String>, Total)>,
    /// The key each series was first reported with.
    keys: Vec<Vec<Value>>,
    index: HashMap<Vec<String>, usize>,
    /// Keys keyed by a stack, with a lower bound on their series.
    stacks: bool,
    /// Entries counted under `[other]` since the bound was reached.
    pub over: u64,
}

impl Family {
    /// What the metric's help says: the aggregation's title without the `Top 10` of a
    /// printed report (every series is exported) and its closing colon, or `@name`.
    pub fn help(&self) -> String {
        let title = self.title.trim().trim_end_matches(':');
        let title = match title.strip_prefix("Top ").and_then(|t| t.split_once(' ')) {
            Some((n, rest)) if n.parse::<u32>().is_ok() => rest,
            _ => title,
        };
        match title.is_empty() {
            true => format!("@{}", self.name),
            false => title[..1].to_uppercase() + &title[1..],
        }
    }

    fn new(agg: &Aggregation) -> Family {
        Family {
            name: agg.name.clone(),
            title: agg.title.clone(),
            key_names: agg.key_names.clone(),
            kind: agg.kind,
            series: Vec::new(),
            keys: Vec::new(),
            index: HashMap::new(),
            stacks: false,
            over: 0,
        }
    }

    /// A family as a session's run sent it to the daemon (`wire`): rendered, never added to.
    pub(crate) fn wired(
        name: String,
        title: String,
        key_names: Vec<String>,
        kind: AggKind,
        series: Vec<(Vec<String>, Total)>,
        over: u64,
    ) -> Family {
        Family { name, title, key_names, kind, series, keys: Vec::new(), index: HashMap::new(), stacks: false, over }
    }

    fn bound(&self) -> usize {
        if self.stacks {
            MAX_STACK_SERIES
        } else {
            MAX_SERIES
        }
    }

    /// Add one report of this aggregation: its entries, largest first, so that when the
    /// bound is reached it is the smaller keys that go under `[other]`.
    fn add(&mut self, agg: &Aggregation) {
        let mut entries: Vec<_> = agg.entries.iter().filter(|e| e.key.len() == self.key_names.len()).collect();
        self.stacks |= entries.iter().any(|e| e.key.iter().any(|k| matches!(k, Value::Stack(_))));
        entries.sort_by_key(|e| std::cmp::Reverse(weight(&e.value)));
        for e in entries {
            let labels: Vec<String> = e.key.iter().map(label_value).collect();
            let at = match self.index.get(&labels) {
                Some(&i) => i,
                None if self.series.len() < self.bound() => self.insert(labels, e.key.clone()),
                None => {
                    self.over += 1;
                    let other = vec![OTHER.to_string(); self.key_names.len()];
                    match self.index.get(&other) {
                        Some(&i) => i,
                        None => self.insert(other, vec![Value::Text(OTHER.to_string()); self.key_names.len()]),
                    }
                }
            };
            let (_, total) = &mut self.series[at];
            merge(self.kind, total, &e.value);
        }
    }

    fn insert(&mut self, labels: Vec<String>, key: Vec<Value>) -> usize {
        let total = match self.kind {
            AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => {
                Total::Histogram { buckets: Vec::new(), sum: 0 }
            }
            AggKind::Percentiles => Total::Quantiles { count: 0, sum: 0, points: Vec::new() },
            AggKind::Min => Total::Scalar(i64::MAX),
            AggKind::Max => Total::Scalar(i64::MIN),
            _ => Total::Scalar(0),
        };
        self.index.insert(labels.clone(), self.series.len());
        self.series.push((labels, total));
        self.keys.push(key);
        self.series.len() - 1
    }
}

/// A min or max that has seen no sample.
pub(crate) fn unset(kind: AggKind, total: &Total) -> bool {
    matches!((kind, total), (AggKind::Min, Total::Scalar(i64::MAX)) | (AggKind::Max, Total::Scalar(i64::MIN)))
}

/// A series' total as an entry's value.
fn value(total: &Total) -> AggValue {
    match total {
        Total::Scalar(v) => AggValue::Scalar(*v),
        Total::Histogram { buckets, sum } => AggValue::Histogram(Histogram {
            buckets: buckets.iter().map(|&(low, high, count)| Bucket { low, high, count }).collect(),
            sum: *sum,
        }),
        Total::Quantiles { count, sum, points } => AggValue::Quantiles(Quantiles {
            count: *count,
            sum: *sum,
            points: points.iter().map(|&(millionths, value)| Percentile { millionths, value }).collect(),
        }),
    }
}

/// A key part as a label value: the number, the text, or the stack folded
/// (`main;work;hot`, outermost first).
fn label_value(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Text(s) => s.clone(),
        Value::Stack(frames) => folded_stack(frames),
    }
}

fn weight(v: &AggValue) -> i128 {
    match v {
        AggValue::Scalar(s) => i128::from(*s),
        AggValue::Histogram(h) => h.buckets.iter().map(|b| i128::from(b.count)).sum(),
        AggValue::Quantiles(q) => i128::from(q.count),
    }
}

/// One interval's value added into a series' total, as the aggregation's function
/// combines them. A value of another shape than the kind's is left out.
fn merge(kind: AggKind, total: &mut Total, value: &AggValue) {
    match (total, value) {
        (Total::Scalar(t), AggValue::Scalar(v)) => {
            *t = match kind {
                AggKind::Count | AggKind::Sum => t.saturating_add(*v),
                AggKind::Min => (*t).min(*v),
                AggKind::Max => (*t).max(*v),
                _ => *v,
            }
        }
        (Total::Histogram { buckets, sum }, AggValue::Histogram(h)) => {
            for b in &h.buckets {
                match buckets.binary_search_by_key(&(b.low, b.high), |&(l, h, _)| (l, h)) {
                    Ok(i) => buckets[i].2 = buckets[i].2.saturating_add(b.count),
                    Err(i) => buckets.insert(i, (b.low, b.high, b.count)),
                }
            }
            *sum = sum.saturating_add(h.sum);
        }
        (Total::Quantiles { count, sum, points }, AggValue::Quantiles(q)) => {
            *count = count.saturating_add(q.count);
            *sum = sum.saturating_add(q.sum);
            if q.count > 0 {
                *points = q.points.iter().map(|p| (p.millionths, p.value)).collect();
            }
        }
        _ => {}
    }
}

/// One plugin's totals.
#[derive(Clone, Debug)]
pub struct PluginTotals {
    pub plugin: String,
    pub families: Vec<Family>,
}

impl PluginTotals {
    fn add(&mut self, aggs: &[Aggregation]) {
        for agg in aggs {
            let at = match self.families.iter().position(|f| f.name == agg.name) {
                Some(i) if self.families[i].kind == agg.kind && self.families[i].key_names == agg.key_names => i,
                // The same name with another shape (a restarted plugin with other
                // parameters cannot happen; a plugin that changes its mind can): the
                // first shape stays.
                Some(_) => continue,
                None => {
                    self.families.push(Family::new(agg));
                    self.families.len() - 1
                }
            };
            self.families[at].add(agg);
        }
    }
}

/// What the run has accounted for one plugin so far: its events by fate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Accounted {
    pub plugin: String,
    /// Events its probes produced in the kernel.
    pub generated: u64,
    pub kernel_filtered: u64,
    pub emitted: u64,
    pub filtered: u64,
    pub delivered: u64,
    /// Lost events by reason: `ring_full`, `kernel_lost`, `budget`, `fault`.
    pub dropped: [(&'static str, u64); 4],
    pub faults: u64,
    pub restarts: u64,
}

/// The accounting's counters, one per plugin: the metric's stem (`events_delivered` is
/// Prometheus's `wasmtap_events_delivered_total` and OpenTelemetry's
/// `wasmtap.events.delivered`), its help, its value. Lost events, by reason, follow.
pub type Field = fn(&Accounted) -> u64;
pub const COUNTERS: [(&str, &str, Field); 7] = [
    ("events_generated", "Events the plugin's probes produced in the kernel", |a| a.generated),
    ("events_kernel_filtered", "Events filtered out in the kernel", |a| a.kernel_filtered),
    ("events_emitted", "Events written to the ring for the plugin", |a| a.emitted),
    ("events_filtered", "Events the plugin's filters rejected in the host", |a| a.filtered),
    ("events_delivered", "Events handed to the plugin", |a| a.delivered),
    ("plugin_faults", "Faults of the plugin", |a| a.faults),
    ("plugin_restarts", "Restarts of the plugin after a fault", |a| a.restarts),
];
/// Why events were lost, in the order of [`Accounted::dropped`].
pub const DROP_REASONS: [&str; 4] = ["ring_full", "kernel_lost", "budget", "fault"];
/// The stem and help of the lost events, by plugin and reason.
pub const DROPPED: (&str, &str) = ("events_dropped", "Events lost to the plugin, by reason");

impl Accounted {
    pub fn of(stats: &PluginStats) -> Accounted {
        let sum = |f: fn(&crate::accounting::ProbeStats) -> u64| stats.probes.iter().map(f).sum::<u64>();
        Accounted {
            plugin: stats.name.clone(),
            generated: sum(|p| p.generated),
            kernel_filtered: sum(|p| p.kernel_filtered),
            emitted: sum(|p| p.emitted),
            filtered: stats.filtered,
            delivered: stats.delivered,
            dropped: [
                (DROP_REASONS[0], sum(|p| p.ring_dropped)),
                (DROP_REASONS[1], sum(|p| p.kernel_lost)),
                (DROP_REASONS[2], stats.dropped_budget),
                (DROP_REASONS[3], stats.dropped_fault),
            ],
            faults: stats.faults,
            restarts: stats.restarts,
        }
    }
}

/// Everything exported at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub plugins: Vec<Arc<PluginTotals>>,
    pub accounting: Arc<Vec<Accounted>>,
    /// When the run started and when this was taken, nanoseconds since the epoch.
    pub started_unix_ns: u64,
    pub taken_unix_ns: u64,
}

/// Where the dispatch thread adds reports and the export thread reads snapshots.
#[derive(Debug)]
pub struct Sink {
    totals: Mutex<Vec<PluginTotals>>,
    latest: Mutex<Arc<Snapshot>>,
}

impl Sink {
    /// A sink for these plugins, in order (a plugin's slot is its index).
    pub fn new(plugins: &[String], started_unix_ns: u64) -> Sink {
        let totals: Vec<PluginTotals> =
            plugins.iter().map(|p| PluginTotals { plugin: p.clone(), families: Vec::new() }).collect();
        let snapshot = Snapshot {
            plugins: totals.iter().cloned().map(Arc::new).collect(),
            accounting: Arc::new(Vec::new()),
            started_unix_ns,
            taken_unix_ns: started_unix_ns,
        };
        Sink { totals: Mutex::new(totals), latest: Mutex::new(Arc::new(snapshot)) }
    }

    /// Add a report of the plugin in `slot` and publish it.
    pub fn add(&self, slot: usize, aggs: &[Aggregation]) {
        let mut totals = lock(&self.totals);
        let Some(t) = totals.get_mut(slot) else { return };
        t.add(aggs);
        let plugin = Arc::new(t.clone());
        drop(totals);
        self.publish(|s| {
            if let Some(p) = s.plugins.get_mut(slot) {
                *p = plugin;
            }
        });
    }

    /// Publish the plugins' accounting as it stands.
    pub fn account(&self, stats: &[PluginStats]) {
        let accounting = Arc::new(stats.iter().map(Accounted::of).collect());
        self.publish(|s| s.accounting = accounting);
    }

    fn publish(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut latest = lock(&self.latest);
        let mut next = Snapshot::clone(&latest);
        change(&mut next);
        next.taken_unix_ns = unix_ns();
        *latest = Arc::new(next);
    }

    /// The run's totals of the plugin in `slot` as a report like `like` (its final one):
    /// what a run whose plugins report only to the metrics prints at its end. Means,
    /// deviations and percentile estimates are the last interval's.
    pub fn totals(&self, slot: usize, like: &[Aggregation]) -> Vec<Aggregation> {
        let totals = lock(&self.totals);
        let Some(t) = totals.get(slot) else { return like.to_vec() };
        let mut out: Vec<Aggregation> = like.to_vec();
        for agg in &mut out {
            let Some(f) = t.families.iter().find(|f| f.name == agg.name && f.kind == agg.kind) else { continue };
            agg.entries = f
                .keys
                .iter()
                .zip(&f.series)
                .filter(|(_, (_, total))| !unset(f.kind, total))
                .map(|(key, (_, total))| AggEntry { key: key.clone(), value: value(total) })
                .collect();
        }
        out
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        lock(&self.latest).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Now, in nanoseconds since the epoch.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The unit an aggregation's name gives its values, by bpftrace's naming habits
/// (`@nsecs`, `@usecs`, `@bytes`, `total_us`): durations are exported in seconds and
/// bytes as bytes, the unit the metric name ends with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    None,
    /// Seconds, from values of which this many make a second (1e9 for nanoseconds).
    Seconds(f64),
    Bytes,
}

impl Unit {
    /// The name without its unit word, and the unit.
    pub fn of(name: &str) -> (&str, Unit) {
        const WORDS: &[(&str, Unit)] = &[
            ("nanoseconds", Unit::Seconds(1e9)),
            ("microseconds", Unit::Seconds(1e6)),
            ("milliseconds", Unit::Seconds(1e3)),
            ("nsecs", Unit::Seconds(1e9)),
            ("ns", Unit::Seconds(1e9)),
            ("usecs", Unit::Seconds(1e6)),
            ("us", Unit::Seconds(1e6)),
            ("msecs", Unit::Seconds(1e3)),
            ("ms", Unit::Seconds(1e3)),
            ("secs", Unit::Seconds(1.0)),
            ("seconds", Unit::Seconds(1.0)),
            ("bytes", Unit::Bytes),
        ];
        for &(word, unit) in WORDS {
            if name == word {
                return ("", unit);
            }
            if let Some(stem) = name.strip_suffix(word).and_then(|s| s.strip_suffix(['_', '-'])) {
                return (stem, unit);
            }
        }
        (name, Unit::None)
    }

    /// What the plugin's values are divided by to be exported (dividing, so that a
    /// bound of 4095 ns is exactly the 4.095e-6 s it reads as).
    pub fn divisor(self) -> f64 {
        match self {
            Unit::Seconds(per_second) => per_second,
            _ => 1.0,
        }
    }

    /// Prometheus's suffix for the unit.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::None => "",
            Unit::Seconds(_) => "seconds",
            Unit::Bytes => "bytes",
        }
    }

    /// The UCUM unit OpenTelemetry names.
    pub fn ucum(self) -> &'static str {
        match self {
            Unit::None => "1",
            Unit::Seconds(_) => "s",
            Unit::Bytes => "By",
        }
    }
}

/// A histogram's cumulative buckets as (inclusive upper bound, cumulative count),
/// divided by `divisor`; a bucket holds the integers `low <= v < high`, so its bound is `high - 1`.
/// The overflow bucket is left to `+Inf`. Returns the buckets and the total count.
pub fn cumulative(buckets: &[(i64, i64, u64)], divisor: f64) -> (Vec<(f64, u64)>, u64) {
    let mut bounds: Vec<(i64, u64)> =
        buckets.iter().filter(|b| b.1 != i64::MAX).map(|&(_, high, n)| (high.saturating_sub(1), n)).collect();
    bounds.sort_by_key(|&(le, _)| le);
    let mut out: Vec<(f64, u64)> = Vec::with_capacity(bounds.len());
    let mut running = 0u64;
    for (le, n) in bounds {
        running = running.saturating_add(n);
        let le = le as f64 / divisor;
        match out.last_mut() {
            Some(last) if last.0 == le => last.1 = running,
            _ => out.push((le, running)),
        }
    }
    let total = buckets.iter().fold(0u64, |t, b| t.saturating_add(b.2));
    (out, total)
}

#[cfg(test)]
mod tests;

//! Aggregations computed in the kernel: declared in the plan, read as snapshots.
//!
//! Nothing is streamed for them: the collector keeps count, sum, min, max or a
//! histogram per key in a kernel map, and the plugin reads it with
//! [`read_aggregation`](crate::read_aggregation) — in `on_tick` for periodic reports,
//! in `finish` for the end. The shape of `@[comm] = count()`, `@[args.id] = hist(..)`,
//! runqlat and biolatency:
//!
//! ```
//! use wasmtap_sdk::{AggSource, Correlation, KernelAggregation, Plan};
//! // @[comm] = count() on every syscall
//! let by_comm = KernelAggregation::count("by_comm", "tracepoint:raw_syscalls:sys_enter").by(AggSource::Comm);
//! // syscall latency: a power-of-two histogram per syscall, entry to exit of a thread
//! let latency = KernelAggregation::log2_histogram("latency", "tracepoint:raw_syscalls:sys_exit", AggSource::Latency)
//!     .by(AggSource::Syscall)
//!     .latency_from("tracepoint:raw_syscalls:sys_enter", Correlation::Tid, Correlation::Tid);
//! let plan = Plan::new(vec![]).with_aggregation(by_comm).with_aggregation(latency);
//! assert_eq!(plan.aggregations.len(), 2); // ids 0 and 1
//! ```
//!
//! A replay computes the same snapshots from the recorded events, so a plugin's output
//! does not depend on where it ran.

use crate::{
    AggEntry, AggSource, Correlation, Filter, KernelAggregation, KernelFunction, LinearBuckets, MoreStart, Plan,
    StartEvent,
};

impl KernelAggregation {
    fn with(name: &str, probe: &str, function: KernelFunction, value: AggSource) -> Self {
        KernelAggregation {
            name: name.to_string(),
            probe: probe.to_string(),
            filter: Filter::default(),
            keys: Vec::new(),
            function,
            value,
            start: None,
        }
    }

    /// Events of `probe` (`count()`).
    pub fn count(name: &str, probe: &str) -> Self {
        Self::with(name, probe, KernelFunction::Count, AggSource::Pid)
    }

    /// The sum of `value` (`sum(v)`).
    pub fn sum(name: &str, probe: &str, value: AggSource) -> Self {
        Self::with(name, probe, KernelFunction::Sum, value)
    }

    /// The smallest `value` (`min(v)`).
    pub fn min(name: &str, probe: &str, value: AggSource) -> Self {
        Self::with(name, probe, KernelFunction::Min, value)
    }

    /// The largest `value` (`max(v)`).
    pub fn max(name: &str, probe: &str, value: AggSource) -> Self {
        Self::with(name, probe, KernelFunction::Max, value)
    }

    /// A power-of-two histogram of `value` (`quantize(v)`, bpftrace `hist(v)`).
    pub fn log2_histogram(name: &str, probe: &str, value: AggSource) -> Self {
        Self::with(name, probe, KernelFunction::Log2Histogram, value)
    }

    /// A linear histogram of `value` (`lquantize(v, min, max, step)`, bpftrace `lhist`).
    pub fn linear_histogram(name: &str, probe: &str, value: AggSource, min: i64, max: i64, step: i64) -> Self {
        Self::with(name, probe, KernelFunction::LinearHistogram(LinearBuckets { min, max, step }), value)
    }

    /// Add a key part; up to four, in order (the snapshot's keys follow this order).
    pub fn by(mut self, key: AggSource) -> Self {
        self.keys.push(key);
        self
    }

    /// Only events that pass `filter` (pushed into the kernel).
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// Aggregate the time since `start_probe` fired with the same key: `key` on the start
    /// event must equal `end_key` on this aggregation's probe (the thread, a field such as
    /// a request pointer, or a field naming a thread: [`Correlation::Task`], to which the
    /// run's scope then applies). The value becomes the latency in nanoseconds.
    pub fn latency_from(mut self, start_probe: &str, key: Correlation, end_key: Correlation) -> Self {
        self.value = AggSource::Latency;
        self.start = Some(StartEvent {
            probe: start_probe.to_string(),
            filter: Filter::default(),
            key,
            end_key,
            more: Vec::new(),
        });
        self
    }

    /// Another event that starts the same intervals (after [`latency_from`](Self::latency_from)),
    /// with its key and filter; the end is matched by the same end key. One end then
    /// looks up one start, where an aggregation per kind of start would look up each.
    pub fn also_from(mut self, start_probe: &str, key: Correlation, filter: Filter) -> Self {
        if let Some(s) = self.start.as_mut() {
            s.more.push(MoreStart { probe: start_probe.to_string(), filter, key });
        }
        self
    }

    /// Only start events that pass `filter` (after [`latency_from`](Self::latency_from)).
    pub fn start_filter(mut self, filter: Filter) -> Self {
        if let Some(s) = self.start.as_mut() {
            s.filter = filter;
        }
        self
    }
}

impl Plan {
    /// Declare a kernel aggregation; its index in `aggregations` is its id for
    /// [`read_aggregation`](crate::read_aggregation).
    pub fn with_aggregation(mut self, aggregation: KernelAggregation) -> Self {
        self.aggregations.push(aggregation);
        self
    }

    /// Declare a kernel aggregation and get back its id, to read it with
    /// [`AggId::read`]: no counting of declarations by hand when some are optional.
    pub fn aggregate(&mut self, aggregation: KernelAggregation) -> AggId {
        self.aggregations.push(aggregation);
        AggId(self.aggregations.len() as u32 - 1)
    }
}

/// A kernel aggregation declared in a plan ([`Plan::aggregate`]), to read its
/// snapshots back.
///
/// ```
/// use wasmtap_sdk::{AggSource, KernelAggregation, Plan};
/// let mut plan = Plan::new(vec![]);
/// let by_comm = plan.aggregate(KernelAggregation::count("by_comm", "proc:exec").by(AggSource::Comm));
/// assert_eq!((by_comm.id(), plan.aggregations.len()), (0, 1));
/// let _entries = by_comm.read(true); // at a tick: this interval's counts, then zero
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AggId(u32);

impl AggId {
    /// The aggregation's id: its index in the plan's `aggregations`.
    pub fn id(self) -> u32 {
        self.0
    }

    /// A snapshot of the aggregation, as [`read_aggregation`](crate::read_aggregation)
    /// gives it; with `reset`, the next one starts from zero. A host call. If the host
    /// has no snapshot, its reason is logged as a warning and the snapshot is empty.
    pub fn read(self, reset: bool) -> Vec<AggEntry> {
        crate::read_aggregation(self.0, reset).unwrap_or_else(|why| {
            crate::imports::log(crate::Level::Warn, &why);
            Vec::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_the_declaration() {
        let a =
            KernelAggregation::linear_histogram("l", "syscall:read:exit", AggSource::Field("ret".into()), 0, 100, 10)
                .by(AggSource::Comm)
                .by(AggSource::Pid);
        assert_eq!(a.keys, vec![AggSource::Comm, AggSource::Pid]);
        assert_eq!(a.function, KernelFunction::LinearHistogram(LinearBuckets { min: 0, max: 100, step: 10 }));
        let l = KernelAggregation::log2_histogram("q", "tracepoint:sched:sched_switch", AggSource::Pid)
            .latency_from(
                "tracepoint:sched:sched_wakeup",
                Correlation::Task("pid".into()),
                Correlation::Task("next_pid".into()),
            )
            .start_filter(Filter { uids: vec![0], ..Filter::default() });
        assert_eq!(l.value, AggSource::Latency);
        let start = l.start.unwrap();
        assert_eq!((start.probe.as_str(), start.filter.uids.as_slice()), ("tracepoint:sched:sched_wakeup", &[0][..]));
    }

    #[test]
    fn declared_aggregations_read_back_by_their_ids() {
        let mut plan = Plan::new(vec![]).with_aggregation(KernelAggregation::count("first", "proc:exec"));
        let second = plan.aggregate(KernelAggregation::count("second", "proc:exit"));
        let third = plan.aggregate(KernelAggregation::count("third", "proc:fork"));
        assert_eq!((second.id(), third.id()), (1, 2));
        assert_eq!(plan.aggregations[third.id() as usize].name, "third");
        let reads = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = reads.clone();
        crate::testing::set_aggregations(move |id, reset| {
            seen.borrow_mut().push((id, reset));
            Vec::new()
        });
        assert!(second.read(true).is_empty());
        third.read(false);
        assert_eq!(*reads.borrow(), [(1, true), (2, false)]);
    }
}

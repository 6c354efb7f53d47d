//! runqlat: how long do runnable threads wait for a CPU?
//!
//! The wasmtap take on bpftrace's `tools/runqlat.bt` and BCC's `runqlat`: a power-of-two
//! histogram of the time from a thread becoming runnable (woken, newly created, or
//! preempted while still runnable) to it running, computed in the kernel. See README.md.

use std::collections::BTreeMap;

use wasmtap_sdk::{
    export_plugin, from_entries, read_aggregation, AggEntry, AggKind, AggOrder, AggSource, AggValue, Aggregation,
    Bucket, CmpOp, Correlation, Event, Filter, Histogram, KernelAggregation, Output, ParamKind, ParamSpec, Params,
    Plan, Plugin, PluginInfo, Predicate, Value,
};

const SWITCH: &str = "tracepoint:sched:sched_switch";
/// The starts of a wait: a wakeup, a new task's first wakeup, a preemption (the task
/// left the CPU still runnable: `prev_state` is 0, TASK_RUNNING).
const STARTS: [(&str, &str); 3] =
    [("tracepoint:sched:sched_wakeup", "pid"), ("tracepoint:sched:sched_wakeup_new", "pid"), (SWITCH, "prev_pid")];

struct Runqlat {
    interval: Option<u32>,
}

impl Plugin for Runqlat {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "runqlat",
            env!("CARGO_PKG_VERSION"),
            "How long do runnable threads wait for a CPU? Run-queue latency, in the kernel.",
            vec![ParamSpec::new(
                "interval",
                ParamKind::Duration,
                "0",
                "print and reset the histogram this often (1s); 0: only at the end",
            )],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mut subs = Vec::new();
        let interval = match params.timer("interval")? {
            Some(timer) => {
                subs.push(timer);
                Some(0)
            }
            None => None,
        };
        let mut plan = Plan::new(subs);
        for (probe, key) in STARTS {
            let mut agg = KernelAggregation::log2_histogram("usecs", SWITCH, AggSource::Latency).latency_from(
                probe,
                Correlation::Task(key.into()),
                Correlation::Task("next_pid".into()),
            );
            if probe == SWITCH {
                let running = Predicate { field: "prev_state".into(), op: CmpOp::Eq, value: 0 };
                agg = agg.start_filter(Filter { predicates: vec![running], ..Filter::default() });
            }
            plan = plan.with_aggregation(agg);
        }
        Ok((Runqlat { interval }, plan))
    }

    /// Nothing is streamed: the histograms are computed in the kernel.
    fn on_event(&mut self, _ev: &Event<'_>, _out: &mut Output) {}

    fn on_tick(&mut self, sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        if Some(sub) != self.interval {
            return Vec::new();
        }
        vec![report(true)]
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        vec![report(false)]
    }
}

/// The three kernel histograms (by start event) as one.
fn report(reset: bool) -> Aggregation {
    let mut all = Vec::new();
    for id in 0..STARTS.len() as u32 {
        all.extend(read_aggregation(id, reset));
    }
    let title = "Run-queue latency in nanoseconds, runnable to running:";
    from_entries("nsecs", title, &[], AggKind::Quantize, AggOrder::ValueAscending, 0, merge(all))
}

/// Histograms with the same bucket layout, added bucket by bucket into one entry.
fn merge(entries: Vec<AggEntry>) -> Vec<AggEntry> {
    let mut buckets: BTreeMap<(i64, i64), u64> = BTreeMap::new();
    let mut sum = 0i64;
    for e in entries {
        if let AggValue::Histogram(h) = e.value {
            sum = sum.saturating_add(h.sum);
            for b in h.buckets {
                *buckets.entry((b.low, b.high)).or_default() += b.count;
            }
        }
    }
    if buckets.is_empty() {
        return Vec::new();
    }
    let buckets = buckets.into_iter().map(|((low, high), count)| Bucket { low, high, count }).collect();
    vec![AggEntry { key: Vec::<Value>::new(), value: AggValue::Histogram(Histogram { buckets, sum }) }]
}

export_plugin!(Runqlat);

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: &[(i64, i64, u64)], sum: i64) -> AggEntry {
        let buckets = buckets.iter().map(|&(low, high, count)| Bucket { low, high, count }).collect();
        AggEntry { key: vec![], value: AggValue::Histogram(Histogram { buckets, sum }) }
    }

    #[test]
    fn the_three_starts_add_up_bucket_by_bucket() {
        let merged = merge(vec![hist(&[(1024, 2048, 3), (2048, 4096, 1)], 7000), hist(&[(1024, 2048, 2)], 3000)]);
        let AggValue::Histogram(h) = &merged[0].value else { panic!() };
        let got: Vec<_> = h.buckets.iter().map(|b| (b.low, b.count)).collect();
        assert_eq!((got, h.sum), (vec![(1024, 5), (2048, 1)], 10_000));
        assert!(merge(vec![]).is_empty());
    }

    #[test]
    fn plan_has_three_kernel_histograms_ending_at_sched_switch() {
        let (_, plan) = Runqlat::start(&Params::from_pairs(&[("interval", "1000000000")])).unwrap();
        assert_eq!(plan.aggregations.len(), 3);
        assert!(plan.aggregations.iter().all(|a| a.probe == SWITCH));
        let preempt = plan.aggregations[2].start.as_ref().unwrap();
        assert_eq!(preempt.filter.predicates[0].field, "prev_state");
        assert_eq!(plan.subscriptions[0].probe, "interval:ms:1000");
        assert!(Runqlat::start(&Params::from_pairs(&[("interval", "10000")])).is_err());
    }
}

//! runqlat: how long do runnable threads wait for a CPU?
//!
//! The wasmtap take on bpftrace's `tools/runqlat.bt` and BCC's `runqlat`: a power-of-two
//! histogram of the time from a thread becoming runnable (woken, newly created, or
//! preempted while still runnable) to it running, computed in the kernel. See README.md.

use wasmtap_sdk::{
    export_plugin, from_entries, AggId, AggKind, AggOrder, AggSource, Aggregation, CmpOp, Correlation, Event, Filter,
    Interval, KernelAggregation, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo,
};

/// A wait ends at the switch to the thread, and starts at its wakeup, a new task's
/// first wakeup, or a preemption (the thread left the CPU still runnable: `prev_state`
/// is 0, TASK_RUNNING).
const SWITCH: &str = "tracepoint:sched:sched_switch";
const WAKEUP: &str = "tracepoint:sched:sched_wakeup";
const WAKEUP_NEW: &str = "tracepoint:sched:sched_wakeup_new";

struct Runqlat {
    interval: Interval,
    /// The kernel's histogram.
    latency: AggId,
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
        let interval = Interval::optional(params, "interval", &mut subs)?;
        // One kernel histogram, three kinds of start: an end (the switch to a thread)
        // looks up one start, the latest, whatever its kind.
        let preempted = Filter::default().when("prev_state", CmpOp::Eq, 0);
        let agg = KernelAggregation::log2_histogram("nsecs", SWITCH, AggSource::Latency)
            .latency_from(WAKEUP, Correlation::Task("pid".into()), Correlation::Task("next_pid".into()))
            .also_from(WAKEUP_NEW, Correlation::Task("pid".into()), Filter::default())
            .also_from(SWITCH, Correlation::Task("prev_pid".into()), preempted);
        let mut plan = Plan::new(subs);
        let latency = plan.aggregate(agg);
        Ok((Runqlat { interval, latency }, plan))
    }

    /// Nothing is streamed: the histograms are computed in the kernel.
    fn on_event(&mut self, _ev: &Event<'_>, _out: &mut Output) {}

    fn on_tick(&mut self, sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        if !self.interval.fired(sub) {
            return Vec::new();
        }
        vec![self.report(true)]
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        vec![self.report(false)]
    }
}

impl Runqlat {
    /// The kernel histogram.
    fn report(&self, reset: bool) -> Aggregation {
        let title = "Run-queue latency in nanoseconds, runnable to running:";
        from_entries("nsecs", title, &[], AggKind::Quantize, AggOrder::ValueAscending, 0, self.latency.read(reset))
    }
}

export_plugin!(Runqlat);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_has_one_kernel_histogram_with_three_starts_ending_at_sched_switch() {
        let (_, plan) = Runqlat::start(&Params::from_pairs(&[("interval", "1000000000")])).unwrap();
        assert_eq!(plan.aggregations.len(), 1);
        assert_eq!(plan.aggregations[0].probe, SWITCH);
        let start = plan.aggregations[0].start.as_ref().unwrap();
        let probes: Vec<_> = std::iter::once(&start.probe).chain(start.more.iter().map(|m| &m.probe)).collect();
        assert_eq!(probes, [WAKEUP, WAKEUP_NEW, SWITCH]);
        assert_eq!(start.more[1].filter.predicates[0].field, "prev_state");
        assert_eq!(plan.subscriptions[0].probe, "interval:ms:1000");
        assert!(Runqlat::start(&Params::from_pairs(&[("interval", "10000")])).is_err());
    }
}

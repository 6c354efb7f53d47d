//! cpudist: how long do threads run each time they get a CPU?
//!
//! The wasmtap take on BCC's `cpudist`: a power-of-two histogram of on-CPU time per
//! slice, from the switch to a thread (`next_pid`) to the switch away from it
//! (`prev_pid`), computed in the kernel, with each histogram's total: the CPU time the
//! slices add up to. See README.md.

use wasmtap_sdk::{
    export_plugin, from_entries, AggEntry, AggId, AggKind, AggOrder, AggSource, AggValue, Aggregation, CmpOp,
    Correlation, Event, Filter, Interval, KernelAggregation, Output, ParamKind, ParamSpec, Params, Plan, Plugin,
    PluginInfo,
};

/// A slice starts at the switch to a thread and ends at the switch away from it. The
/// idle task (pid 0 on every CPU) is not a thread's time and is left out.
const SWITCH: &str = "tracepoint:sched:sched_switch";

struct Cpudist {
    interval: Interval,
    by_process: bool,
    /// The kernel's histogram(s).
    slices: AggId,
}

impl Plugin for Cpudist {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "cpudist",
            env!("CARGO_PKG_VERSION"),
            "How long do threads run each time they get a CPU? On-CPU time per slice, in the kernel.",
            vec![
                ParamSpec::new(
                    "interval",
                    ParamKind::Duration,
                    "0",
                    "print and reset the histogram this often (1s); 0: only at the end",
                ),
                ParamSpec::new(
                    "by",
                    ParamKind::Text,
                    "all",
                    "all: one histogram; process: one per process (pid, comm)",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mut subs = Vec::new();
        let interval = Interval::optional(params, "interval", &mut subs)?;
        let by_process = params.choice("by", &[("all", false), ("process", true)])?;
        let ends = Filter::default().when("prev_pid", CmpOp::Ne, 0);
        let starts = Filter::default().when("next_pid", CmpOp::Ne, 0);
        // At sched_switch the current task is the one leaving the CPU: the keys are the
        // thread whose slice ends.
        let mut agg = KernelAggregation::log2_histogram("nsecs", SWITCH, AggSource::Latency)
            .with_filter(ends)
            .latency_from(SWITCH, Correlation::Task("next_pid".into()), Correlation::Task("prev_pid".into()))
            .start_filter(starts);
        if by_process {
            agg = agg.by(AggSource::Pid).by(AggSource::Comm);
        }
        let mut plan = Plan::new(subs);
        let slices = plan.aggregate(agg);
        Ok((Cpudist { interval, by_process, slices }, plan))
    }

    /// Nothing is streamed: the histograms are computed in the kernel.
    fn on_event(&mut self, _ev: &Event<'_>, _out: &mut Output) {}

    fn on_tick(&mut self, sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        if !self.interval.fired(sub) {
            return Vec::new();
        }
        self.report(true)
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        self.report(false)
    }
}

impl Cpudist {
    /// The histogram(s) and the on-CPU total of each.
    fn report(&self, reset: bool) -> Vec<Aggregation> {
        let entries = self.slices.read(reset);
        let keys: &[&str] = if self.by_process { &["pid", "comm"] } else { &[] };
        let totals = entries
            .iter()
            .filter_map(|e| match &e.value {
                AggValue::Histogram(h) => Some(AggEntry { key: e.key.clone(), value: AggValue::Scalar(h.sum) }),
                _ => None,
            })
            .collect();
        let title = "On-CPU time per slice in nanoseconds, switched in to switched out:";
        vec![
            from_entries("nsecs", title, keys, AggKind::Quantize, AggOrder::Key, 0, entries),
            from_entries(
                "total_nsecs",
                "On-CPU time the slices add up to, in nanoseconds:",
                keys,
                AggKind::Sum,
                AggOrder::ValueDescending,
                0,
                totals,
            ),
        ]
    }
}

export_plugin!(Cpudist);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_has_one_kernel_histogram_from_a_switch_in_to_a_switch_out_without_the_idle_task() {
        let (_, plan) = Cpudist::start(&Params::from_pairs(&[("by", "all"), ("interval", "0")])).unwrap();
        assert_eq!(plan.aggregations.len(), 1);
        let agg = &plan.aggregations[0];
        assert_eq!(agg.probe, SWITCH);
        assert!(agg.keys.is_empty());
        assert_eq!(agg.filter.predicates[0].field, "prev_pid");
        let start = agg.start.as_ref().unwrap();
        assert_eq!(start.probe, SWITCH);
        assert_eq!(start.key, Correlation::Task("next_pid".into()));
        assert_eq!(start.end_key, Correlation::Task("prev_pid".into()));
        assert_eq!(start.filter.predicates[0].field, "next_pid");

        let (_, plan) = Cpudist::start(&Params::from_pairs(&[("by", "process"), ("interval", "0")])).unwrap();
        assert_eq!(plan.aggregations[0].keys, [AggSource::Pid, AggSource::Comm]);
        let e = Cpudist::start(&Params::from_pairs(&[("by", "cpu"), ("interval", "0")])).err().unwrap();
        assert!(e.contains("by"), "{e}");
    }
}

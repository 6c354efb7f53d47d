//! syslatency: how long do syscalls take, syscall by syscall?
//!
//! The wasmtap take on the classic `syscall:::entry { self->ts = timestamp; }
//! syscall:::return /self->ts/ { @[probefunc] = quantize(timestamp - self->ts); }`
//! and bpftrace's `tracepoint:raw_syscalls:sys_enter { @start[tid] = nsecs; } …
//! hist(nsecs - @start[tid])`. By default the histogram is computed in the kernel:
//! no event leaves it. See README.md.

use wasmtap_sdk::{
    export_plugin, from_entries, Agg, AggEntry, AggId, AggKind, AggOrder, AggSource, Aggregation, BoundedMap,
    Correlation, Event, Filter, Interval, KernelAggregation, Output, ParamKind, ParamSpec, Params, Plan, Plugin,
    PluginInfo, Subscription, Syscall,
};

const ENTER: &str = "tracepoint:raw_syscalls:sys_enter";
const EXIT: &str = "tracepoint:raw_syscalls:sys_exit";

/// Where the histograms are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Kernel,
    Stream,
    /// Both, printed side by side: a check that they agree.
    Compare,
}

struct Syslatency {
    mode: Mode,
    interval: Interval,
    /// The kernel's histogram (kernel and compare modes).
    kernel: Option<AggId>,
    /// Streamed: when each thread entered its syscall (as many threads as the kernel's
    /// start map holds).
    starts: BoundedMap<u32, u64>,
    streamed: Agg<Syscall>,
}

impl Plugin for Syslatency {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "syslatency",
            env!("CARGO_PKG_VERSION"),
            "How long do syscalls take? A latency histogram per syscall, entry to exit.",
            vec![
                ParamSpec::new(
                    "syscall",
                    ParamKind::Text,
                    "",
                    "only these syscalls, comma-separated (read,write); empty: all",
                ),
                ParamSpec::new(
                    "interval",
                    ParamKind::Duration,
                    "0",
                    "print and reset the histograms this often (1s); 0: only at the end",
                ),
                ParamSpec::new(
                    "mode",
                    ParamKind::Text,
                    "kernel",
                    "kernel: computed in the kernel; stream: from streamed events; compare: both",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mode =
            params.choice("mode", &[("kernel", Mode::Kernel), ("stream", Mode::Stream), ("compare", Mode::Compare)])?;
        let filter = Filter { syscalls: params.syscalls("syscall")?, ..Filter::default() };
        let mut subs = Vec::new();
        if mode != Mode::Kernel {
            subs.push(Subscription::new(ENTER).with_filter(filter.clone()));
            subs.push(Subscription::new(EXIT).with_filter(filter.clone()));
        }
        let interval = Interval::optional(params, "interval", &mut subs)?;
        let mut plan = Plan::new(subs);
        let kernel = (mode != Mode::Stream).then(|| {
            plan.aggregate(
                KernelAggregation::log2_histogram("nanoseconds", EXIT, AggSource::Latency)
                    .by(AggSource::Syscall)
                    .with_filter(filter.clone())
                    .latency_from(ENTER, Correlation::Tid, Correlation::Tid)
                    .start_filter(filter),
            )
        });
        let me = Syslatency { mode, interval, kernel, starts: BoundedMap::new(), streamed: Agg::quantize() };
        Ok((me, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        match ev {
            Event::SysEnter(_) => {
                self.starts.insert(ev.tid(), ev.ts_ns());
            }
            Event::SysExit(sys) => {
                if let Some(t0) = self.starts.remove(&ev.tid()) {
                    self.streamed.add(sys.syscall(), ev.ts_ns().wrapping_sub(t0) as i64);
                }
            }
            _ => {}
        }
    }

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

impl Syslatency {
    /// `@ns[syscall]` from the kernel and/or `@ns_streamed[syscall]`.
    fn report(&mut self, reset: bool) -> Vec<Aggregation> {
        let title = "Syscall latency in nanoseconds, entry to exit:";
        let mut aggs = Vec::new();
        if let Some(id) = self.kernel {
            aggs.push(by_syscall_name("nanoseconds", title, id.read(reset)));
        }
        if self.mode != Mode::Kernel {
            let title = if self.mode == Mode::Compare { "The same, from streamed events:" } else { title };
            let name = if self.mode == Mode::Compare { "nanoseconds_streamed" } else { "nanoseconds" };
            aggs.push(self.streamed.to_aggregation(name, title, &["syscall"], AggOrder::ValueAscending, 0));
            if reset {
                self.streamed.trunc(0);
            }
        }
        aggs
    }
}

/// A kernel snapshot keyed by syscall number, keyed by name instead.
fn by_syscall_name(name: &str, title: &str, entries: Vec<AggEntry>) -> Aggregation {
    let entries = entries.into_iter().map(Syscall::named_entry).collect();
    from_entries(name, title, &["syscall"], AggKind::Quantize, AggOrder::ValueAscending, 0, entries)
}

export_plugin!(Syslatency);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::Value;

    #[test]
    fn modes_choose_kernel_aggregation_or_streams() {
        let start = |mode: &str| Syslatency::start(&Params::from_pairs(&[("mode", mode), ("syscall", "read")]));
        let (_, plan) = start("kernel").unwrap();
        assert!(plan.subscriptions.is_empty());
        assert_eq!(plan.aggregations.len(), 1);
        let agg = &plan.aggregations[0];
        assert_eq!(agg.filter.syscalls, ["read"]);
        assert_eq!(agg.start.as_ref().unwrap().filter.syscalls, ["read"]);
        let (_, plan) = start("stream").unwrap();
        assert_eq!((plan.subscriptions.len(), plan.aggregations.len()), (2, 0));
        let (_, plan) = start("compare").unwrap();
        assert_eq!((plan.subscriptions.len(), plan.aggregations.len()), (2, 1));
        let err = start("fast").err().unwrap();
        assert!(err.contains("`fast`"), "{err}");
    }

    #[test]
    fn snapshot_keys_become_syscall_names() {
        let e = AggEntry { key: vec![Value::Int(0)], value: wasmtap_sdk::AggValue::Scalar(1) };
        let agg = by_syscall_name("ns", "", vec![e]);
        assert_eq!(agg.entries[0].key, vec![Value::Text("read".into())]);
    }
}

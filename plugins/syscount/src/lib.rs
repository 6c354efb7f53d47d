//! syscount: which syscalls are called most, and by which processes?
//!
//! The wasmtap take on bpftrace's `tools/syscount.bt` and DTrace's
//! `syscall:::entry { @[execname] = count(); }`. See README.md.

use wasmtap_sdk::{
    export_plugin, from_entries, read_aggregation, AggEntry, AggKind, AggOrder, AggSource, AggValue, Aggregation,
    CmpOp, Comm, Correlation, Counts, Event, Filter, KernelAggregation, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Predicate, Subscription, Syscall, Value,
};

const PROBE: &str = "tracepoint:raw_syscalls:sys_enter";
const EXIT: &str = "tracepoint:raw_syscalls:sys_exit";

/// Where the counting happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// In the kernel: no event leaves it (the default).
    Kernel,
    /// Every syscall streamed to the plugin.
    Stream,
    /// Both, printed side by side: a check that they agree.
    Compare,
}

struct Syscount {
    top: u32,
    mode: Mode,
    /// Count by syscall, by process, or both.
    by_syscall_on: bool,
    by_process_on: bool,
    /// Ids of the kernel aggregations by syscall and by process, as declared.
    kernel_ids: (Option<u32>, Option<u32>),
    /// Id of the kernel count of failures by syscall and return value (`errors`).
    errors: Option<u32>,
    /// Id of the kernel latency histogram by syscall (`latency`).
    latency: Option<u32>,
    /// The plan's subscription of the `interval` timer, when there is one.
    interval: Option<u32>,
    by_syscall: Counts<Syscall>,
    by_process: Counts<Comm>,
}

impl Plugin for Syscount {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "syscount",
            env!("CARGO_PKG_VERSION"),
            "Which syscalls are called most, and by which processes?",
            vec![
                ParamSpec::new("top", ParamKind::Integer, "10", "entries shown per aggregation; 0: all"),
                ParamSpec::new(
                    "syscall",
                    ParamKind::Text,
                    "",
                    "only these syscalls, comma-separated (openat,read); empty: all",
                ),
                ParamSpec::new(
                    "interval",
                    ParamKind::Duration,
                    "0",
                    "print and reset the counts this often (1s); 0: only at the end",
                ),
                ParamSpec::new(
                    "by",
                    ParamKind::Text,
                    "syscall,process",
                    "count by syscall, by process, or both (syscall,process)",
                ),
                ParamSpec::new(
                    "mode",
                    ParamKind::Text,
                    "kernel",
                    "kernel: count in the kernel; stream: stream every syscall to the plugin; compare: both",
                ),
                ParamSpec::new(
                    "errors",
                    ParamKind::Boolean,
                    "false",
                    "also count failures by syscall and errno (@errors[openat, ENOENT]), in the kernel",
                ),
                ParamSpec::new(
                    "latency",
                    ParamKind::Boolean,
                    "false",
                    "also time each syscall, entry to exit: calls, total and average per syscall, in the kernel",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let top = u32::try_from(params.int("top")).map_err(|_| format!("top: must be between 0 and {}", u32::MAX))?;
        let mode = match params.text("mode") {
            "kernel" => Mode::Kernel,
            "stream" => Mode::Stream,
            "compare" => Mode::Compare,
            other => return Err(format!("mode: `{other}` is not kernel, stream or compare")),
        };
        let (mut by_syscall_on, mut by_process_on) = (false, false);
        for part in params.text("by").split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "syscall" => by_syscall_on = true,
                "process" => by_process_on = true,
                other => return Err(format!("by: `{other}` is not syscall or process")),
            }
        }
        if !by_syscall_on && !by_process_on {
            return Err("by: name syscall, process or both".into());
        }
        let filter = Filter { syscalls: parse_syscalls(params.text("syscall"))?, ..Filter::default() };
        let mut subscriptions = Vec::new();
        if mode != Mode::Kernel {
            subscriptions.push(Subscription::new(PROBE).with_filter(filter.clone()));
        }
        let mut interval = None;
        if let Some(timer) = params.timer("interval")? {
            interval = Some(subscriptions.len() as u32);
            subscriptions.push(timer);
        }
        let mut plan = Plan::new(subscriptions);
        let mut ids = (None, None);
        if mode != Mode::Stream {
            let count = |name: &str| KernelAggregation::count(name, PROBE).with_filter(filter.clone());
            if by_syscall_on {
                ids.0 = Some(plan.aggregations.len() as u32);
                plan = plan.with_aggregation(count("syscall").by(wasmtap_sdk::AggSource::Syscall));
            }
            if by_process_on {
                ids.1 = Some(plan.aggregations.len() as u32);
                plan = plan.with_aggregation(count("process").by(wasmtap_sdk::AggSource::Comm));
            }
        }
        let mut errors = None;
        if params.bool("errors") {
            errors = Some(plan.aggregations.len() as u32);
            let failed = Predicate { field: "ret".into(), op: CmpOp::Lt, value: 0 };
            let filter = Filter { predicates: vec![failed], ..filter.clone() };
            plan = plan.with_aggregation(
                KernelAggregation::count("errors", EXIT)
                    .by(AggSource::Syscall)
                    .by(AggSource::Field("ret".into()))
                    .with_filter(filter),
            );
        }
        let mut latency = None;
        if params.bool("latency") {
            latency = Some(plan.aggregations.len() as u32);
            plan = plan.with_aggregation(
                KernelAggregation::log2_histogram("latency", EXIT, AggSource::Latency)
                    .by(AggSource::Syscall)
                    .with_filter(filter.clone())
                    .latency_from(PROBE, Correlation::Tid, Correlation::Tid)
                    .start_filter(filter),
            );
        }
        let me = Syscount {
            top,
            mode,
            by_syscall_on,
            by_process_on,
            kernel_ids: ids,
            errors,
            latency,
            interval,
            by_syscall: Counts::new(),
            by_process: Counts::new(),
        };
        Ok((me, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        if let Event::SysEnter(sys) = ev {
            if self.by_syscall_on {
                self.by_syscall.add(sys.syscall(), 1);
            }
            if self.by_process_on {
                self.by_process.add(ev.comm_key(), 1);
            }
        }
    }

    fn on_tick(&mut self, sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        if Some(sub) != self.interval {
            return Vec::new();
        }
        let aggs = self.aggregations(true);
        self.by_syscall.clear();
        self.by_process.clear();
        aggs
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        self.aggregations(false)
    }
}

impl Syscount {
    /// `@syscall[name]` and `@process[comm]`, largest printed last like bpftrace; in
    /// compare mode also `@syscall_streamed` and `@process_streamed`. With `reset`, the
    /// kernel's counts start again from zero.
    fn aggregations(&self, reset: bool) -> Vec<Aggregation> {
        let (syscalls, processes) = match self.top {
            0 => ("Syscalls:".to_string(), "Processes:".to_string()),
            n => (format!("Top {n} syscalls:"), format!("Top {n} processes:")),
        };
        let order = AggOrder::ValueAscending;
        let mut aggs = Vec::new();
        if self.mode != Mode::Stream {
            if let Some(id) = self.kernel_ids.0 {
                let by_name = read_aggregation(id, reset).into_iter().map(Syscall::named_entry).collect();
                aggs.push(from_entries("syscall", &syscalls, &["syscall"], AggKind::Count, order, self.top, by_name));
            }
            if let Some(id) = self.kernel_ids.1 {
                let by_comm = read_aggregation(id, reset);
                aggs.push(from_entries("process", &processes, &["comm"], AggKind::Count, order, self.top, by_comm));
            }
        }
        if let Some(id) = self.errors {
            let title = "Failures by syscall and errno:";
            let entries = read_aggregation(id, reset).into_iter().map(errno_entry).collect();
            aggs.push(from_entries("errors", title, &["syscall", "errno"], AggKind::Count, order, self.top, entries));
        }
        if let Some(id) = self.latency {
            let (calls, total_us, avg_ns) = latency_entries(read_aggregation(id, reset));
            let keys = ["syscall"];
            aggs.push(from_entries("calls", "Timed calls:", &keys, AggKind::Count, order, self.top, calls));
            let title = "Time in the syscall, total microseconds:";
            aggs.push(from_entries("total_us", title, &keys, AggKind::Sum, order, self.top, total_us));
            let title = "Average nanoseconds per call:";
            aggs.push(from_entries("avg_ns", title, &keys, AggKind::Avg, order, self.top, avg_ns));
        }
        if self.mode != Mode::Kernel {
            let suffix = if self.mode == Mode::Compare { "_streamed" } else { "" };
            let (t1, t2) = if self.mode == Mode::Compare {
                ("Streamed, the same syscalls:".to_string(), "Streamed, the same processes:".to_string())
            } else {
                (syscalls, processes)
            };
            if self.by_syscall_on {
                let name = format!("syscall{suffix}");
                aggs.push(self.by_syscall.to_aggregation(&name, &t1, &["syscall"], order, self.top));
            }
            if self.by_process_on {
                let name = format!("process{suffix}");
                aggs.push(self.by_process.to_aggregation(&name, &t2, &["comm"], order, self.top));
            }
        }
        aggs
    }
}

/// A failure entry keyed (syscall number, return value) as (name, errno name).
fn errno_entry(mut e: AggEntry) -> AggEntry {
    if let Some(Value::Int(ret)) = e.key.get(1) {
        let name = wasmtap_syscalls::errno_name(*ret).map_or_else(|| ret.to_string(), str::to_string);
        e.key[1] = Value::Text(name);
    }
    Syscall::named_entry(e)
}

/// Latency histograms by syscall as three scalar aggregations by syscall name: calls,
/// total microseconds, average nanoseconds.
fn latency_entries(hists: Vec<AggEntry>) -> (Vec<AggEntry>, Vec<AggEntry>, Vec<AggEntry>) {
    let (mut calls, mut total, mut avg) = (Vec::new(), Vec::new(), Vec::new());
    for e in hists {
        let AggValue::Histogram(h) = &e.value else { continue };
        let n: u64 = h.buckets.iter().map(|b| b.count).sum();
        if n == 0 {
            continue;
        }
        let key = Syscall::named_entry(AggEntry { key: e.key.clone(), value: AggValue::Scalar(0) }).key;
        let entry = |v: i64| AggEntry { key: key.clone(), value: AggValue::Scalar(v) };
        calls.push(entry(n as i64));
        total.push(entry(h.sum / 1000));
        avg.push(entry(h.sum / n as i64));
    }
    (calls, total, avg)
}

/// The `syscall` parameter as syscall numbers.
fn parse_syscalls(list: &str) -> Result<Vec<u32>, String> {
    Syscall::parse_list(list).map_err(|e| format!("syscall: {e}"))
}

export_plugin!(Syscount);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::{AggEntry, AggValue, Value};

    #[test]
    fn failures_are_keyed_by_syscall_and_errno_names() {
        let e = AggEntry { key: vec![Value::Int(1), Value::Int(-9)], value: AggValue::Scalar(5) };
        assert_eq!(errno_entry(e).key, [Value::Text("write".into()), Value::Text("EBADF".into())]);
        let e = AggEntry { key: vec![Value::Int(257), Value::Int(-9999)], value: AggValue::Scalar(1) };
        assert_eq!(errno_entry(e).key, [Value::Text("openat".into()), Value::Text("-9999".into())]);
    }

    #[test]
    fn latency_histograms_give_calls_totals_and_averages() {
        use wasmtap_sdk::{Bucket, Histogram};
        let buckets = vec![Bucket { low: 512, high: 1024, count: 3 }, Bucket { low: 1024, high: 2048, count: 1 }];
        let e = AggEntry { key: vec![Value::Int(0)], value: AggValue::Histogram(Histogram { buckets, sum: 4_000 }) };
        let (calls, total, avg) = latency_entries(vec![e]);
        assert_eq!(calls[0].key, [Value::Text("read".into())]);
        let v = |es: &[AggEntry]| es[0].value.clone();
        assert_eq!((v(&calls), v(&total), v(&avg)), (AggValue::Scalar(4), AggValue::Scalar(4), AggValue::Scalar(1000)));
    }

    #[test]
    fn errors_and_latency_add_kernel_aggregations_on_exits() {
        let p = [("mode", "kernel"), ("by", "syscall"), ("errors", "true"), ("latency", "true"), ("syscall", "write")];
        let (me, plan) = Syscount::start(&Params::from_pairs(&p)).unwrap();
        assert_eq!((me.errors, me.latency), (Some(1), Some(2)));
        let errors = &plan.aggregations[1];
        assert_eq!((errors.probe.as_str(), errors.keys.len()), (EXIT, 2));
        assert_eq!((errors.filter.predicates[0].op, errors.filter.syscalls.clone()), (CmpOp::Lt, vec![1]));
        assert_eq!(plan.aggregations[2].start.as_ref().unwrap().probe, PROBE);
    }

    #[test]
    fn syscall_names_become_numbers() {
        assert_eq!(parse_syscalls("read, write,,openat"), Ok(vec![0, 1, 257]));
        assert_eq!(parse_syscalls(""), Ok(vec![]));
    }

    #[test]
    fn unknown_syscall_name_is_named_in_the_error() {
        let err = parse_syscalls("read,opne").unwrap_err();
        assert!(err.contains("'opne'"), "{err}");
    }

    fn probes(plan: &Plan) -> Vec<&str> {
        plan.subscriptions.iter().map(|s| s.probe.as_str()).collect()
    }

    #[test]
    fn interval_subscribes_to_a_timer() {
        let params = Params::from_pairs(&[
            ("top", "5"),
            ("syscall", ""),
            ("interval", "1500000000"),
            ("mode", "stream"),
            ("by", "syscall,process"),
        ]);
        let (me, plan) = Syscount::start(&params).unwrap();
        assert_eq!(probes(&plan), [PROBE, "interval:ms:1500"]);
        assert_eq!((me.interval, plan.aggregations.len()), (Some(1), 0));
        let (_, plan) =
            Syscount::start(&Params::from_pairs(&[("interval", "0"), ("mode", "stream"), ("by", "syscall")])).unwrap();
        assert_eq!(probes(&plan), [PROBE]);
        assert!(
            Syscount::start(&Params::from_pairs(&[("interval", "10"), ("mode", "kernel"), ("by", "process")])).is_err()
        );
        assert!(Syscount::start(&Params::from_pairs(&[("top", "-1"), ("mode", "kernel"), ("by", "process")])).is_err());
        let err = Syscount::start(&Params::from_pairs(&[("mode", "fast")])).err().unwrap();
        assert!(err.contains("`fast`"), "{err}");
        let err = Syscount::start(&Params::from_pairs(&[("mode", "kernel"), ("by", "proces")])).err().unwrap();
        assert!(err.contains("`proces`"), "{err}");
        let (_, plan) = Syscount::start(&Params::from_pairs(&[("mode", "kernel"), ("by", "process")])).unwrap();
        assert_eq!(plan.aggregations.len(), 1, "@[comm] = count() alone");
    }

    #[test]
    fn kernel_mode_counts_in_the_kernel_and_names_syscalls() {
        let params = Params::from_pairs(&[
            ("top", "5"),
            ("syscall", "read"),
            ("interval", "1000000"),
            ("mode", "kernel"),
            ("by", "syscall,process"),
        ]);
        let (mut me, plan) = Syscount::start(&params).unwrap();
        assert_eq!(probes(&plan), ["interval:ms:1"]);
        assert_eq!(plan.aggregations.len(), 2);
        assert!(plan.aggregations.iter().all(|a| a.probe == PROBE && a.filter.syscalls == [0]));
        let reads = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = reads.clone();
        wasmtap_sdk::testing::set_aggregations(move |id, reset| {
            seen.borrow_mut().push((id, reset));
            let key = if id == 0 { Value::Int(0) } else { Value::Text("cat".into()) };
            vec![AggEntry { key: vec![key], value: AggValue::Scalar(7) }]
        });
        let aggs = me.on_tick(0, 1_000_000, &mut Output::new());
        assert_eq!(*reads.borrow(), [(0, true), (1, true)], "each interval resets");
        assert_eq!(aggs[0].entries[0].key, [Value::Text("read".into())]);
        assert_eq!(aggs[1].entries[0].key, [Value::Text("cat".into())]);
        me.finish(&mut Output::new());
        assert_eq!(reads.borrow()[2..], [(0, false), (1, false)]);
    }

    #[test]
    fn each_interval_prints_and_clears_the_counts() {
        let params =
            Params::from_pairs(&[("top", "5"), ("interval", "1000000"), ("mode", "stream"), ("by", "syscall,process")]);
        let (mut me, _) = Syscount::start(&params).unwrap();
        me.by_syscall.add(Syscall(0), 3);
        me.by_process.add(Comm::new(b"cat"), 3);
        let mut out = Output::new();
        assert!(me.on_tick(7, 0, &mut out).is_empty(), "another subscription's tick");
        let aggs = me.on_tick(1, 1_000_000, &mut out);
        let values: Vec<AggValue> = aggs.iter().flat_map(|a| a.entries.iter().map(|e| e.value.clone())).collect();
        assert_eq!(values, [AggValue::Scalar(3), AggValue::Scalar(3)]);
        assert!(me.by_syscall.is_empty() && me.by_process.is_empty());
        let aggs = me.on_tick(1, 2_000_000, &mut out);
        assert!(aggs.iter().all(|a| a.entries.is_empty()), "the next interval starts from zero");
    }
}

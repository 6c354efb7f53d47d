//! syscount: which syscalls are called most, and by which processes?
//!
//! The wasmtap take on bpftrace's `tools/syscount.bt` and DTrace's
//! `syscall:::entry { @[execname] = count(); }`. See README.md.

use wasmtap_sdk::{
    export_plugin, from_entries, AggEntry, AggId, AggKind, AggOrder, AggSource, AggValue, Aggregation, CmpOp, Comm,
    Correlation, Counts, Event, Filter, Interval, KernelAggregation, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Subscription, Syscall, Value,
};

const PROBE: &str = "tracepoint:raw_syscalls:sys_enter";
const EXIT: &str = "tracepoint:raw_syscalls:sys_exit";

struct Syscount {
    top: u32,
    /// The kernel's counts by syscall and by process, as declared (`mode=kernel`).
    kernel: (Option<AggId>, Option<AggId>, Option<AggId>),
    /// The kernel count of failures by syscall and return value (`errors`).
    errors: Option<AggId>,
    /// The kernel latency histogram by syscall (`latency`).
    latency: Option<AggId>,
    interval: Interval,
    /// The counts of streamed syscalls by syscall and by process (`mode=stream`).
    by_syscall: Option<Counts<Syscall>>,
    by_process: Option<Counts<Comm>>,
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
                    "count by syscall, by process, or both (syscall,process); syscall-process: by the pair (@syscall_process[getppid, bash])",
                ),
                ParamSpec::new(
                    "mode",
                    ParamKind::Text,
                    "kernel",
                    "kernel: count in the kernel; stream: stream every syscall to the plugin and count there",
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
        let stream = params.choice("mode", &[("kernel", false), ("stream", true)])?;
        let [by_syscall, by_process, by_pair] = params.choices("by", ["syscall", "process", "syscall-process"])?;
        if by_pair && stream {
            return Err("by: syscall-process is counted in the kernel (mode=kernel)".into());
        }
        let filter = Filter { syscalls: params.syscalls("syscall")?, ..Filter::default() };
        let mut subscriptions = Vec::new();
        if stream {
            subscriptions.push(Subscription::new(PROBE).with_filter(filter.clone()));
        }
        let interval = Interval::optional(params, "interval", &mut subscriptions)?;
        let mut plan = Plan::new(subscriptions);
        let count = |name: &str, key| KernelAggregation::count(name, PROBE).by(key).with_filter(filter.clone());
        let kernel = (
            (by_syscall && !stream).then(|| plan.aggregate(count("syscall", AggSource::Syscall))),
            (by_process && !stream).then(|| plan.aggregate(count("process", AggSource::Comm))),
            by_pair.then(|| plan.aggregate(count("syscall_process", AggSource::Syscall).by(AggSource::Comm))),
        );
        let errors = params.bool("errors").then(|| {
            let failed = filter.clone().when("ret", CmpOp::Lt, 0);
            let by_errno = KernelAggregation::count("errors", EXIT).by(AggSource::Syscall);
            plan.aggregate(by_errno.by(AggSource::Field("ret".into())).with_filter(failed))
        });
        let latency = params.bool("latency").then(|| {
            let hist = KernelAggregation::log2_histogram("latency", EXIT, AggSource::Latency).by(AggSource::Syscall);
            let timed = hist.with_filter(filter.clone()).latency_from(PROBE, Correlation::Tid, Correlation::Tid);
            plan.aggregate(timed.start_filter(filter.clone()))
        });
        let by_syscall = (by_syscall && stream).then(Counts::new);
        let by_process = (by_process && stream).then(Counts::new);
        Ok((Syscount { top, kernel, errors, latency, interval, by_syscall, by_process }, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        let Event::SysEnter(sys) = ev else { return };
        if let Some(counts) = &mut self.by_syscall {
            counts.add(sys.syscall(), 1);
        }
        if let Some(counts) = &mut self.by_process {
            counts.add(ev.comm_key(), 1);
        }
    }

    fn on_tick(&mut self, sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        if !self.interval.fired(sub) {
            return Vec::new();
        }
        let aggs = self.aggregations(true);
        self.by_syscall.iter_mut().for_each(Counts::clear);
        self.by_process.iter_mut().for_each(Counts::clear);
        aggs
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        self.aggregations(false)
    }
}

impl Syscount {
    /// `@syscall[name]` and `@process[comm]` (counted in the kernel or streamed), then
    /// `@errors` and the latencies, largest printed last like bpftrace. With `reset`,
    /// the kernel's counts start again from zero.
    fn aggregations(&self, reset: bool) -> Vec<Aggregation> {
        let title = |all: &str, what| if self.top == 0 { all.to_string() } else { format!("Top {} {what}:", self.top) };
        let (syscalls, processes) = (title("Syscalls:", "syscalls"), title("Processes:", "processes"));
        let (order, top) = (AggOrder::ValueAscending, self.top);
        let report = |name, title: &str, keys: &[&str], kind, es| from_entries(name, title, keys, kind, order, top, es);
        let mut aggs = Vec::new();
        if let Some(id) = self.kernel.0 {
            let by_name = id.read(reset).into_iter().map(Syscall::named_entry).collect();
            aggs.push(report("syscall", &syscalls, &["syscall"], AggKind::Count, by_name));
        }
        if let Some(id) = self.kernel.1 {
            aggs.push(report("process", &processes, &["comm"], AggKind::Count, id.read(reset)));
        }
        if let Some(id) = self.kernel.2 {
            let by_pair = id.read(reset).into_iter().map(Syscall::named_entry).collect();
            let title = title("Syscalls by process:", "syscalls by process");
            aggs.push(report("syscall_process", &title, &["syscall", "comm"], AggKind::Count, by_pair));
        }
        if let Some(id) = self.errors {
            let entries = id.read(reset).into_iter().map(errno_entry).collect();
            let title = "Failures by syscall and errno:";
            aggs.push(report("errors", title, &["syscall", "errno"], AggKind::Count, entries));
        }
        if let Some(id) = self.latency {
            let (calls, total_us, avg_ns) = latency_entries(id.read(reset));
            aggs.push(report("calls", "Timed calls:", &["syscall"], AggKind::Count, calls));
            let title = "Time in the syscall, total microseconds:";
            aggs.push(report("total_us", title, &["syscall"], AggKind::Sum, total_us));
            aggs.push(report("avg_ns", "Average nanoseconds per call:", &["syscall"], AggKind::Avg, avg_ns));
        }
        if let Some(counts) = &self.by_syscall {
            aggs.push(counts.to_aggregation("syscall", &syscalls, &["syscall"], order, top));
        }
        if let Some(counts) = &self.by_process {
            aggs.push(counts.to_aggregation("process", &processes, &["comm"], order, top));
        }
        aggs
    }
}

/// A failure entry keyed (syscall number, return value) as (name, errno name).
fn errno_entry(mut e: AggEntry) -> AggEntry {
    if let Some(Value::Int(ret)) = e.key.get(1) {
        let name = wasmtap_sdk::syscalls::errno_name(*ret).map_or_else(|| ret.to_string(), str::to_string);
        e.key[1] = Value::Text(name);
    }
    Syscall::named_entry(e)
}

/// Latency histograms by syscall as three scalar aggregations by syscall name: calls,
/// total microseconds, average nanoseconds.
fn latency_entries(hists: Vec<AggEntry>) -> (Vec<AggEntry>, Vec<AggEntry>, Vec<AggEntry>) {
    let (mut calls, mut total, mut avg) = (Vec::new(), Vec::new(), Vec::new());
    for e in hists.into_iter().map(Syscall::named_entry) {
        let AggValue::Histogram(h) = &e.value else { continue };
        let n = h.buckets.iter().map(|b| b.count).sum::<u64>() as i64;
        let entry = |v: i64| AggEntry { key: e.key.clone(), value: AggValue::Scalar(v) };
        if n > 0 {
            calls.push(entry(n));
            total.push(entry(h.sum / 1000));
            avg.push(entry(h.sum / n));
        }
    }
    (calls, total, avg)
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
        assert_eq!((me.errors.map(AggId::id), me.latency.map(AggId::id)), (Some(1), Some(2)));
        let errors = &plan.aggregations[1];
        assert_eq!((errors.probe.as_str(), errors.keys.len()), (EXIT, 2));
        assert_eq!(
            (errors.filter.predicates[0].op, errors.filter.syscalls.clone()),
            (CmpOp::Lt, vec!["write".to_string()])
        );
        assert_eq!(plan.aggregations[2].start.as_ref().unwrap().probe, PROBE);
    }

    #[test]
    fn syscall_names_go_to_the_kernel_filter_checked() {
        let p = [("mode", "kernel"), ("by", "syscall,process"), ("syscall", "read, write,,openat")];
        let (_, plan) = Syscount::start(&Params::from_pairs(&p)).unwrap();
        assert_eq!(plan.aggregations.len(), 2);
        assert!(plan.aggregations.iter().all(|a| a.filter.syscalls == ["read", "write", "openat"]));
    }

    #[test]
    fn unknown_syscall_name_is_named_in_the_error() {
        let p = [("mode", "kernel"), ("by", "syscall"), ("syscall", "read,opne")];
        let err = Syscount::start(&Params::from_pairs(&p)).err().unwrap();
        assert!(err.starts_with("syscall: ") && err.contains("'opne'"), "{err}");
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
        assert_eq!((me.interval.sub(), plan.aggregations.len()), (Some(1), 0));
        let (_, plan) =
            Syscount::start(&Params::from_pairs(&[("interval", "0"), ("mode", "stream"), ("by", "syscall")])).unwrap();
        assert_eq!(probes(&plan), [PROBE]);
        assert!(
            Syscount::start(&Params::from_pairs(&[("interval", "10"), ("mode", "kernel"), ("by", "process")])).is_err()
        );
        assert!(Syscount::start(&Params::from_pairs(&[("top", "-1"), ("mode", "kernel"), ("by", "process")])).is_err());
        let err = Syscount::start(&Params::from_pairs(&[("mode", "fast")])).err().unwrap();
        assert_eq!(err, "mode: `fast` is not kernel or stream");
        let err = Syscount::start(&Params::from_pairs(&[("mode", "compare")])).err().unwrap();
        assert_eq!(err, "mode: `compare` is not kernel or stream");
        let err = Syscount::start(&Params::from_pairs(&[("mode", "kernel"), ("by", "proces")])).err().unwrap();
        assert_eq!(err, "by: `proces` is not syscall, process or syscall-process");
        let err = Syscount::start(&Params::from_pairs(&[("mode", "kernel"), ("by", " ,")])).err().unwrap();
        assert_eq!(err, "by: name at least one of syscall, process or syscall-process");
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
        assert!(plan.aggregations.iter().all(|a| a.probe == PROBE && a.filter.syscalls == ["read"]));
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
        me.by_syscall.as_mut().unwrap().add(Syscall(0), 3);
        me.by_process.as_mut().unwrap().add(Comm::new(b"cat"), 3);
        let mut out = Output::new();
        assert!(me.on_tick(7, 0, &mut out).is_empty(), "another subscription's tick");
        let aggs = me.on_tick(1, 1_000_000, &mut out);
        let values: Vec<AggValue> = aggs.iter().flat_map(|a| a.entries.iter().map(|e| e.value.clone())).collect();
        assert_eq!(values, [AggValue::Scalar(3), AggValue::Scalar(3)]);
        assert!(me.by_syscall.as_ref().unwrap().is_empty() && me.by_process.as_ref().unwrap().is_empty());
        let aggs = me.on_tick(1, 2_000_000, &mut out);
        assert!(aggs.iter().all(|a| a.entries.is_empty()), "the next interval starts from zero");
    }
}

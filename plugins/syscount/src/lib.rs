//! syscount: which syscalls are called most, and by which processes?
//!
//! The wasmtap take on bpftrace's `tools/syscount.bt` and DTrace's
//! `syscall:::entry { @[execname] = count(); }`. See README.md.

use wasmtap_sdk::{
    export_plugin, AggOrder, Aggregation, Comm, Counts, Event, Filter, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Subscription, Syscall,
};

const PROBE: &str = "tracepoint:raw_syscalls:sys_enter";
/// The plan's subscription of the `interval` timer, when there is one.
const INTERVAL: u32 = 1;
const NS_PER_MS: u64 = 1_000_000;

struct Syscount {
    top: u32,
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
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let top = u32::try_from(params.int("top")).map_err(|_| format!("top: must be between 0 and {}", u32::MAX))?;
        let filter = Filter { syscalls: parse_syscalls(params.text("syscall"))?, ..Filter::default() };
        let mut subscriptions = vec![Subscription::new(PROBE).with_filter(filter)];
        if let Some(ms) = interval_ms(params.duration_ns("interval"))? {
            subscriptions.push(Subscription::new(&format!("interval:ms:{ms}")));
        }
        let plan = Plan::new(subscriptions);
        let me = Syscount { top, by_syscall: Counts::new(), by_process: Counts::new() };
        Ok((me, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        if let Event::SysEnter(sys) = ev {
            self.by_syscall.add(sys.syscall(), 1);
            self.by_process.add(ev.comm_key(), 1);
        }
    }

    fn on_tick(&mut self, sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        if sub != INTERVAL {
            return Vec::new();
        }
        let aggs = self.aggregations();
        self.by_syscall.clear();
        self.by_process.clear();
        aggs
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        self.aggregations()
    }
}

impl Syscount {
    /// `@syscall[name]` and `@process[comm]`, largest printed last like bpftrace.
    fn aggregations(&self) -> Vec<Aggregation> {
        let (syscalls, processes) = match self.top {
            0 => ("Syscalls:".to_string(), "Processes:".to_string()),
            n => (format!("Top {n} syscalls:"), format!("Top {n} processes:")),
        };
        let order = AggOrder::ValueAscending;
        vec![
            self.by_syscall.to_aggregation("syscall", &syscalls, &["syscall"], order, self.top),
            self.by_process.to_aggregation("process", &processes, &["comm"], order, self.top),
        ]
    }
}

/// `"openat, read"` → their x86_64 numbers; decimal numbers pass through.
fn parse_syscalls(list: &str) -> Result<Vec<u32>, String> {
    let names = list.split(',').map(str::trim).filter(|s| !s.is_empty());
    names
        .map(|name| {
            Syscall::from_name(name)
                .map(|s| s.nr() as u32)
                .or_else(|| name.parse().ok())
                .ok_or_else(|| format!("syscall: no x86_64 syscall named '{name}'"))
        })
        .collect()
}

/// The timer period for `interval`, in whole milliseconds; `None` for 0 (off).
fn interval_ms(ns: u64) -> Result<Option<u64>, String> {
    match ns {
        0 => Ok(None),
        1..NS_PER_MS => Err("interval: must be 0 (off) or at least 1ms".to_string()),
        _ => Ok(Some(ns / NS_PER_MS)),
    }
}

export_plugin!(Syscount);

#[cfg(test)]
mod tests {
    use super::*;

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
        let params = Params::from_pairs(&[("top", "5"), ("syscall", ""), ("interval", "1500000000")]);
        let (_, plan) = Syscount::start(&params).unwrap();
        assert_eq!(probes(&plan), [PROBE, "interval:ms:1500"]);
        assert_eq!(plan.subscriptions[INTERVAL as usize].filter, Filter::default());
        let (_, plan) = Syscount::start(&Params::from_pairs(&[("interval", "0")])).unwrap();
        assert_eq!(probes(&plan), [PROBE]);
        assert!(Syscount::start(&Params::from_pairs(&[("interval", "10")])).is_err());
        assert!(Syscount::start(&Params::from_pairs(&[("top", "-1")])).is_err());
    }

    #[test]
    fn each_interval_prints_and_clears_the_counts() {
        let (mut me, _) = Syscount::start(&Params::from_pairs(&[("top", "5"), ("interval", "1000000")])).unwrap();
        me.by_syscall.add(Syscall(0), 3);
        me.by_process.add(Comm::new(b"cat"), 3);
        let mut out = Output::new();
        assert!(me.on_tick(7, 0, &mut out).is_empty(), "another subscription's tick");
        let aggs = me.on_tick(INTERVAL, 1_000_000, &mut out);
        let values: Vec<i64> = aggs.iter().flat_map(|a| a.entries.iter().map(|e| e.value)).collect();
        assert_eq!(values, [3, 3]);
        assert!(me.by_syscall.is_empty() && me.by_process.is_empty());
        let aggs = me.on_tick(INTERVAL, 2_000_000, &mut out);
        assert!(aggs.iter().all(|a| a.entries.is_empty()), "the next interval starts from zero");
    }
}

//! syscount: which syscalls are called most, and by which processes?
//!
//! The wasmtap take on bpftrace's `tools/syscount.bt` and DTrace's
//! `syscall:::entry { @[execname] = count(); }`. See README.md.

use wasmtap_sdk::{
    export_plugin, AggOrder, Aggregation, Comm, Counts, Event, Filter, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Subscription, Syscall,
};

const PROBE: &str = "tracepoint:raw_syscalls:sys_enter";
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
        let tick_ms = interval_ms(params.duration_ns("interval"))?;
        let plan = Plan::new(vec![Subscription::new(PROBE).with_filter(filter)]).with_tick_ms(tick_ms);
        let me = Syscount { top, by_syscall: Counts::new(), by_process: Counts::new() };
        Ok((me, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        if let Event::SysEnter(sys) = ev {
            self.by_syscall.add(sys.syscall(), 1);
            self.by_process.add(ev.comm_key(), 1);
        }
    }

    fn on_tick(&mut self, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
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

/// The tick period for `interval`; `0` (off) stays 0.
fn interval_ms(ns: u64) -> Result<u32, String> {
    if ns == 0 {
        return Ok(0);
    }
    if ns < NS_PER_MS {
        return Err("interval: must be 0 (off) or at least 1ms".to_string());
    }
    u32::try_from(ns / NS_PER_MS).map_err(|_| "interval: too long".to_string())
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

    #[test]
    fn interval_sets_the_tick() {
        let params = Params::from_pairs(&[("top", "5"), ("syscall", ""), ("interval", "1000000000")]);
        let (_, plan) = Syscount::start(&params).unwrap();
        assert_eq!(plan.tick_ms, Some(1000));
        assert_eq!(plan.subscriptions[0].probe, PROBE);
        let (_, plan) = Syscount::start(&Params::from_pairs(&[("interval", "0")])).unwrap();
        assert_eq!(plan.tick_ms, None);
        assert!(Syscount::start(&Params::from_pairs(&[("interval", "10")])).is_err());
        assert!(Syscount::start(&Params::from_pairs(&[("top", "-1")])).is_err());
    }
}

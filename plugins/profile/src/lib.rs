//! profile: where is the CPU time spent? Stacks sampled on every CPU, counted.
//!
//! The wasmtap take on bpftrace's `profile:hz:99 { @[kstack, ustack, comm] = count(); }`
//! and DTrace's `profile-997 { @[stack(), ustack()] = count(); }`. Render the result as
//! bpftrace-style text, as folded stacks (`-o folded`) or as a flame graph
//! (`--flamegraph FILE.svg`). See README.md.

use wasmtap_sdk::{
    export_plugin, AggOrder, Aggregation, Counts, Event, Interval, Output, ParamKind, ParamSpec, Params, Plan, Plugin,
    PluginInfo, Stack, StackMode, Subscription,
};

/// Highest sampling rate: above this the sampling itself is the workload.
const HZ_MAX: i64 = 10_000;

struct Profile {
    top: u32,
    stacks: Counts<Stack>,
    interval: Interval,
}

impl Plugin for Profile {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "profile",
            env!("CARGO_PKG_VERSION"),
            "Where is the CPU time spent? Sampled stacks, by count.",
            vec![
                ParamSpec::new("hz", ParamKind::Integer, "99", "samples per second on each CPU (1 to 10000)"),
                ParamSpec::new("top", ParamKind::Integer, "0", "stacks shown, most frequent; 0: all"),
                ParamSpec::new(
                    "stacks",
                    ParamKind::Text,
                    "kernel,user",
                    "which stacks to sample: kernel, user, or kernel,user",
                ),
                ParamSpec::new(
                    "interval",
                    ParamKind::Duration,
                    "0",
                    "print and clear the counts this often (1s); 0: only at the end",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let hz = params.int("hz");
        if !(1..=HZ_MAX).contains(&hz) {
            return Err(format!("hz: {hz} is not between 1 and {HZ_MAX}"));
        }
        let top = u32::try_from(params.int("top")).map_err(|_| format!("top: must be between 0 and {}", u32::MAX))?;
        let [kernel, user] = params.choices("stacks", ["kernel", "user"])?;
        let pick = |on: bool, stack: StackMode| if on { stack } else { StackMode::empty() };
        let mode = pick(kernel, StackMode::KERNEL) | pick(user, StackMode::USER);
        let mut subs = vec![Subscription::new(&format!("profile:hz:{hz}")).stacks(mode)];
        let interval = Interval::optional(params, "interval", &mut subs)?;
        Ok((Profile { top, stacks: Counts::new(), interval }, Plan::new(subs)))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        if let Some(stack) = ev.stack() {
            self.stacks.add(stack, 1);
        }
    }

    fn on_tick(&mut self, sub: u32, _now_ns: u64, out: &mut Output) -> Vec<Aggregation> {
        if !self.interval.fired(sub) {
            return Vec::new();
        }
        let report = self.finish(out);
        self.stacks.clear();
        report
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        vec![self.stacks.to_stack_aggregation("samples", "", AggOrder::ValueAscending, self.top)]
    }
}

export_plugin!(Profile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked() {
        let start = |hz: &str, stacks: &str| {
            Profile::start(&Params::from_pairs(&[("hz", hz), ("top", "0"), ("stacks", stacks), ("interval", "0")]))
        };
        let (_, plan) = start("99", "user").unwrap();
        assert_eq!(plan.subscriptions[0].probe, "profile:hz:99");
        assert_eq!(plan.subscriptions[0].stacks, StackMode::USER);
        assert!(start("0", "user").err().unwrap().contains("hz: 0"));
        assert_eq!(start("99", "kernel,user").unwrap().1.subscriptions[0].stacks, StackMode::KERNEL | StackMode::USER);
        assert_eq!(start("99", "users").err().unwrap(), "stacks: `users` is not kernel or user");
        assert_eq!(start("99", "").err().unwrap(), "stacks: name kernel, user or both");
    }

    #[test]
    fn each_interval_reports_and_clears_the_stacks() {
        let params = [("hz", "99"), ("top", "0"), ("stacks", "user"), ("interval", "1000000000")];
        let (mut p, plan) = Profile::start(&Params::from_pairs(&params)).unwrap();
        assert_eq!(plan.subscriptions[1].probe, "interval:ms:1000");
        let mut out = Output::default();
        assert!(p.on_tick(0, 0, &mut out).is_empty(), "the sampling subscription is no timer");
        let report = p.on_tick(1, 0, &mut out);
        assert_eq!((report.len(), report[0].name.as_str()), (1, "samples"));
    }
}

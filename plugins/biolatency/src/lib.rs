//! biolatency: how long do block I/O requests take?
//!
//! The wasmtap take on bpftrace's `tools/biolatency.bt` and BCC's `biolatency`: a
//! power-of-two histogram of the time from a request's issue to the device
//! (`block:block_rq_issue`) to its completion (`block:block_rq_complete`), matched by
//! device and sector and computed in the kernel; per disk with `by=disk`. See README.md.

use wasmtap_sdk::{
    export_plugin, AggEntry, AggId, AggKind, AggOrder, AggSource, Aggregation, Correlation, Event, Interval,
    KernelAggregation, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo, Value,
};

const ISSUE: &str = "tracepoint:block:block_rq_issue";
const COMPLETE: &str = "tracepoint:block:block_rq_complete";

struct Biolatency {
    interval: Interval,
    by_disk: bool,
    latency: AggId,
}

impl Plugin for Biolatency {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "biolatency",
            env!("CARGO_PKG_VERSION"),
            "How long do block I/O requests take, issue to completion? A histogram in the kernel.",
            vec![
                ParamSpec::new(
                    "interval",
                    ParamKind::Duration,
                    "0",
                    "print and reset the histogram this often (1s); 0: only at the end",
                ),
                ParamSpec::new("by", ParamKind::Text, "all", "all: one histogram; disk: one per disk (MAJOR:MINOR)"),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mut subs = Vec::new();
        let interval = Interval::optional(params, "interval", &mut subs)?;
        let by_disk = params.choice("by", &[("all", false), ("disk", true)])?;
        // A request is the same sector on issue and completion. One request in flight
        // per sector of a disk; a second device with the same sector in flight at the
        // same moment would take the other's start (the key is the sector alone).
        let mut agg = KernelAggregation::log2_histogram("nsecs", COMPLETE, AggSource::Latency).latency_from(
            ISSUE,
            Correlation::Field("sector".into()),
            Correlation::Field("sector".into()),
        );
        if by_disk {
            agg = agg.by(AggSource::Field("dev".into()));
        }
        let mut plan = Plan::new(subs);
        let latency = plan.aggregate(agg);
        Ok((Biolatency { interval, by_disk, latency }, plan))
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

impl Biolatency {
    /// The kernel histogram(s), in nanoseconds (as runqlat's), disks named `MAJOR:MINOR`.
    fn report(&self, reset: bool) -> Aggregation {
        let entries: Vec<AggEntry> = self
            .latency
            .read(reset)
            .into_iter()
            .map(|e| AggEntry {
                key: e
                    .key
                    .iter()
                    .map(|v| if let Value::Int(dev) = v { Value::Text(disk(*dev as u64)) } else { v.clone() })
                    .collect(),
                value: e.value,
            })
            .collect();
        let keys: &[&str] = if self.by_disk { &["disk"] } else { &[] };
        let title = "Block I/O latency in nanoseconds, issue to completion:";
        wasmtap_sdk::from_entries("nsecs", title, keys, AggKind::Quantize, AggOrder::Key, 0, entries)
    }
}

/// A kernel `dev_t` (major in the bits above 20) as `MAJOR:MINOR`.
fn disk(dev: u64) -> String {
    format!("{}:{}", dev >> 20, dev & ((1 << 20) - 1))
}

export_plugin!(Biolatency);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_has_one_kernel_histogram_from_issue_to_completion_by_sector() {
        let (_, plan) = Biolatency::start(&Params::from_pairs(&[("by", "all"), ("interval", "0")])).unwrap();
        assert_eq!(plan.aggregations.len(), 1);
        let agg = &plan.aggregations[0];
        assert_eq!(agg.probe, COMPLETE);
        let start = agg.start.as_ref().unwrap();
        assert_eq!((start.probe.as_str(), &start.key), (ISSUE, &Correlation::Field("sector".into())));
        assert!(agg.keys.is_empty());
        let (_, plan) = Biolatency::start(&Params::from_pairs(&[("by", "disk"), ("interval", "0")])).unwrap();
        assert_eq!(plan.aggregations[0].keys, [AggSource::Field("dev".into())]);
        assert_eq!(disk((7 << 20) | 3), "7:3");
        assert_eq!(disk((259 << 20) | 1), "259:1");
    }
}

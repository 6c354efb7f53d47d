//! Live drop reports: while a run is losing events, one line every few seconds says
//! what was lost since the last line and why, the way DTrace reports drops as they
//! happen. Nothing is printed while nothing is lost. The final accounting has the
//! totals; these lines say *when*.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::accounting::{KernelCounters, LossReason, PluginStats};

/// How often a live run reports its losses.
pub const REPORT_PERIOD: Duration = Duration::from_secs(5);

/// Every loss counter of a run at one moment, by what is lost and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally(BTreeMap<Cause, u64>);

/// A loss counter: its name in the report and what one count is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The ring buffer was full (the kernel's `dropped`).
    RingFull,
    /// The drain thread could not hand records to the pipeline.
    PipelineFull,
    /// Records the host refused as malformed.
    Malformed,
    /// A reason the collectors count in their `LOSSES` map.
    Kernel(LossReason),
    /// A plugin was over its CPU or output budget.
    Budget(String),
    /// A plugin faulted, was restarting, or was disabled.
    Fault(String),
}

impl Cause {
    fn describe(&self, n: u64) -> String {
        match self {
            Cause::RingFull => format!("ring_full {n} events"),
            Cause::PipelineFull => format!("pipeline_full {n} events"),
            Cause::Malformed => format!("malformed {n} records"),
            Cause::Kernel(r) => format!("{} {n} {}", r.name(), r.unit()),
            Cause::Budget(p) => format!("plugin {p}: dropped_budget {n} events"),
            Cause::Fault(p) => format!("plugin {p}: dropped_fault {n} events"),
        }
    }
}

impl Tally {
    /// The counters of the kernel and of every plugin.
    pub fn of(kernel: &KernelCounters, plugins: &[PluginStats]) -> Tally {
        let mut t = BTreeMap::new();
        t.insert(Cause::RingFull, kernel.kinds.values().map(|k| k.dropped).sum());
        t.insert(Cause::PipelineFull, kernel.pipeline_dropped);
        t.insert(Cause::Malformed, kernel.malformed);
        for (reason, n) in &kernel.losses {
            t.insert(Cause::Kernel(*reason), *n);
        }
        for p in plugins {
            t.insert(Cause::Budget(p.name.clone()), p.dropped_budget);
            t.insert(Cause::Fault(p.name.clone()), p.dropped_fault);
        }
        Tally(t)
    }

    /// What grew since `earlier`, in the order of [`Cause`].
    pub fn since(&self, earlier: &Tally) -> Vec<(Cause, u64)> {
        self.0
            .iter()
            .map(|(c, n)| (c.clone(), n.saturating_sub(earlier.0.get(c).copied().unwrap_or(0))))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// The line of one period's losses: none if nothing was lost.
pub fn report_line(period: Duration, lost: &[(Cause, u64)]) -> Option<String> {
    if lost.is_empty() {
        return None;
    }
    let parts: Vec<String> = lost.iter().map(|(c, n)| c.describe(*n)).collect();
    Some(format!("lost in the last {:.0} s: {}", period.as_secs_f64(), parts.join("; ")))
}

/// When the next report is due, and the counters at the last one.
pub struct Reporter {
    period: Duration,
    last: Instant,
    prev: Tally,
}

impl Reporter {
    pub fn new(period: Duration) -> Reporter {
        Reporter { period, last: Instant::now(), prev: Tally::default() }
    }

    pub fn due(&self) -> bool {
        self.last.elapsed() >= self.period
    }

    /// The line for the losses since the last call, given the counters now. It names
    /// the period, not the time measured: a report is due once a loop turn (a few ms)
    /// has passed the period.
    pub fn report(&mut self, now: Tally) -> Option<String> {
        self.last = Instant::now();
        let line = report_line(self.period, &now.since(&self.prev));
        self.prev = now;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{CounterRow, KindCounters};
    use wasmtap_abi::Kind;

    fn plugin(name: &str, budget: u64) -> PluginStats {
        PluginStats { name: name.into(), dropped_budget: budget, ..PluginStats::default() }
    }

    #[test]
    fn a_report_names_what_grew_and_why_and_nothing_else() {
        let mut k = KernelCounters::default();
        k.add_probe(CounterRow::SysEnter(110), KindCounters { dropped: 10, ..KindCounters::default() });
        let before = Tally::of(&k, &[plugin("slow", 5), plugin("good", 0)]);
        k.add_probe(CounterRow::SysEnter(110), KindCounters { dropped: 30, ..KindCounters::default() });
        k.add_probe(CounterRow::Kind(Kind::Exec), KindCounters { lost: 2, ..KindCounters::default() });
        k.add_loss(LossReason::ExecMapFull, 2);
        k.add_loss(LossReason::TargetsFull, 3);
        let after = Tally::of(&k, &[plugin("slow", 9), plugin("good", 0)]);
        let line = report_line(Duration::from_secs(5), &after.since(&before));
        assert_eq!(
            line.as_deref(),
            Some(
                "lost in the last 5 s: ring_full 30 events; targets_full 3 child processes not followed; \
                 exec_map_full 2 events; plugin slow: dropped_budget 4 events"
            )
        );
        assert_eq!(report_line(Duration::from_secs(5), &after.since(&after)), None, "nothing lost, nothing said");
    }
}

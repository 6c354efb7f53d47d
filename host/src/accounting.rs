//! Where every event went, and what the run cost: the counts the collectors, the
//! pipeline and each plugin keep, gathered into one [`Accounting`] that the output
//! renders and recordings carry. Plain data, below every layer that counts.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use wasmtap_abi::Kind;

use crate::limits::{FaultKind, Limits};

/// Where every event went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Accounting {
    pub kernel: KernelCounters,
    pub plugins: Vec<PluginStats>,
    /// Exit status of the `-c` command (wait(2) status), if there was one.
    pub command_status: Option<i32>,
    /// What the host process itself used.
    pub host: HostUsage,
    /// What the collectors cost the traced system (live runs with the overload guard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collectors: Option<CollectorCost>,
    /// What the run as a whole was held to, beyond its plugins' limits.
    #[serde(skip_serializing_if = "RunBounds::is_empty")]
    pub bounds: RunBounds,
}

/// What a run as a whole is held to beyond its plugins' limits: an events-per-second
/// quota (`--max-events-per-sec`, a tenant's `events_per_sec`) and, for a tenant's run,
/// the cgroup its session holds it in.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RunBounds {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_sec: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupBounds>,
}

impl RunBounds {
    pub fn is_empty(&self) -> bool {
        *self == RunBounds::default()
    }
}

/// A session's cgroup as the kernel holds the run to it, read back from its files.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CgroupBounds {
    /// `v2`, or `v1` (one directory per controller, as on hybrid hosts).
    pub version: String,
    pub dirs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// CPU, in percent of one CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u64>,
}

/// The host process's memory at the end of a run, and what can be told of its parts.
/// The parts are left out of reports when zero (replays have no rings or queue).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct HostUsage {
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    /// Ring buffers mapped from the collectors: resident for the whole run.
    #[serde(skip_serializing_if = "is_zero")]
    pub ring_bytes: u64,
    /// The most bytes of records queued at once between the rings and the plugins.
    #[serde(skip_serializing_if = "is_zero")]
    pub queue_peak_bytes: u64,
    /// The plugins' linear memories and tables at their largest, summed.
    #[serde(skip_serializing_if = "is_zero")]
    pub plugin_memory_peak_bytes: u64,
}

impl HostUsage {
    pub fn now() -> HostUsage {
        let (rss_bytes, peak_rss_bytes) = crate::sys::rss_bytes();
        HostUsage { rss_bytes, peak_rss_bytes, ..HostUsage::default() }
    }

    /// What the parts leave of the peak: code, heap, start-up (at least; the parts' peaks
    /// need not have come at the same moment as the host's).
    pub fn rest_bytes(&self) -> u64 {
        self.peak_rss_bytes.saturating_sub(self.ring_bytes + self.queue_peak_bytes + self.plugin_memory_peak_bytes)
    }
}

impl Accounting {
    /// Events lost before reaching the plugins.
    pub fn lost(&self) -> u64 {
        self.kernel.dropped()
    }

    /// True if the run had problems: lost events, children not followed, disabled
    /// plugins, an overload.
    pub fn has_problems(&self) -> bool {
        self.lost() > 0
            || !self.kernel.losses.is_empty()
            || self.plugins.iter().any(|p| p.disabled.is_some() || p.dropped > 0)
            || self.collectors.as_ref().is_some_and(|c| c.tripped)
    }
}

/// Per-plugin accounting. Every record of a probe the plugin subscribes to ends in
/// exactly one of `filtered`, `delivered` or a `dropped_*` count.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PluginStats {
    pub name: String,
    /// Records handed to the plugin.
    pub delivered: u64,
    /// Records of a subscribed probe that the plugin's own filters rejected in the host.
    pub filtered: u64,
    /// Records lost to this plugin, for any reason (the sum of the `dropped_*` counts).
    pub dropped: u64,
    /// Lost while it was over its CPU or output budget.
    pub dropped_budget: u64,
    /// Lost because it faulted: in the failing batch, while restarting, or once disabled.
    pub dropped_fault: u64,
    pub batches: u64,
    /// Output dropped because it was over its output budget: items and bytes.
    pub output_dropped: u64,
    pub output_dropped_bytes: u64,
    /// Interval ticks not delivered, and tick reports not rendered, while it was over
    /// its budget.
    pub ticks_skipped: u64,
    /// Faults, and restarts from the compiled plugin after one.
    pub faults: u64,
    pub restarts: u64,
    /// Seconds in which it went over its CPU or output budget.
    pub budget_overruns: u64,
    /// `services.symbolize` requests answered with unknown frames because they named a process
    /// the plugin was not shown (or the kernel, where the run may not see it).
    pub symbolize_refused: u64,
    /// Processes its symbolize scope forgot because it was full.
    pub symbolize_scope_forgotten: u64,
    /// CPU time spent in the plugin, and its longest single call.
    pub cpu_ms: u64,
    /// CPU time the host spent rendering its output and reports, charged to its CPU budget.
    pub host_cpu_ms: u64,
    pub longest_call_ms: u64,
    /// The last fault: its callback, kind and reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_fault: Option<FaultReport>,
    /// Why the plugin was disabled, if it was.
    pub disabled: Option<String>,
    /// Problems that did not stop it (optional probes skipped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The limits it ran under.
    pub limits: Limits,
    /// Where its machine code came from: `cached`, `compiled`, `rebuilt (why)`...
    pub code: String,
    /// The same counts per subscribed probe.
    pub probes: Vec<ProbeStats>,
    /// What its kernel aggregations lost, by name (those that lost anything, live runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aggregation_losses: Vec<AggregationLosses>,
}

/// What one of a plugin's kernel aggregations lost, for the accounting.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AggregationLosses {
    pub aggregation: String,
    #[serde(flatten)]
    pub lost: AggLosses,
}

/// A fault, as the accounting reports it.
#[derive(Clone, Debug, Serialize)]
pub struct FaultReport {
    pub callback: &'static str,
    pub kind: FaultKind,
    pub reason: String,
    pub elapsed_ms: u64,
}

/// What became of the events of one subscription. In the kernel: `kernel_filtered`,
/// `ring_dropped`, `kernel_lost` (a full map, a record too big: the reasons are in the
/// kernel's `losses`), and `emitted` to the host; there, each emitted record is
/// `filtered`, `delivered` or dropped with a reason, so `emitted = filtered + delivered
/// + dropped_budget + dropped_fault`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProbeStats {
    pub probe: String,
    /// Events of the probe the collectors saw: kernel_filtered + ring_dropped +
    /// kernel_lost + emitted.
    pub generated: u64,
    pub kernel_filtered: u64,
    pub ring_dropped: u64,
    pub kernel_lost: u64,
    pub emitted: u64,
    pub filtered: u64,
    pub delivered: u64,
    pub dropped_budget: u64,
    pub dropped_fault: u64,
}

/// What one program cost, over every window measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProgramCost {
    pub name: String,
    pub runs: u64,
    pub run_ns: u64,
    /// Its highest share of one CPU over one window, in percent.
    pub peak_percent: f64,
}

/// What the collectors cost the traced system, as measured (`--stats`, JSON accounting).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CollectorCost {
    /// `--max-kernel-cpu`, percent of one CPU.
    pub limit_percent: u32,
    pub window_ms: u64,
    pub period_ms: u64,
    /// Windows measured.
    pub windows: u32,
    /// The highest share of one CPU the programs took together over one window.
    pub peak_percent: f64,
    /// The share over the last window measured.
    pub last_percent: f64,
    /// True when a window went over the limit and the run was stopped.
    pub tripped: bool,
    pub programs: Vec<ProgramCost>,
    /// Why the cost could not be measured, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmeasured: Option<String>,
}

/// Kernel-side counts for one record kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindCounters {
    /// Rejected by an in-kernel filter.
    pub filtered: u64,
    /// Written to the ring buffer.
    pub emitted: u64,
    /// Lost because the ring buffer was full.
    pub dropped: u64,
    /// Lost in the kernel for another reason ([`LossReason`]: a full map, a record too
    /// big); the reasons are in [`KernelCounters::losses`]. Left out of reports when
    /// zero, and absent from older recordings.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl KindCounters {
    /// Every event the collectors saw: `filtered + emitted + dropped + lost`.
    pub fn generated(&self) -> u64 {
        [self.emitted, self.dropped, self.lost].into_iter().fold(self.filtered, u64::saturating_add)
    }
}

/// Saturating: counters may come from a recording, which nobody vouches for.
impl std::ops::AddAssign for KindCounters {
    fn add_assign(&mut self, o: KindCounters) {
        self.filtered = self.filtered.saturating_add(o.filtered);
        self.emitted = self.emitted.saturating_add(o.emitted);
        self.dropped = self.dropped.saturating_add(o.dropped);
        self.lost = self.lost.saturating_add(o.lost);
    }
}

/// Why the kernel lost something other than to a full ring buffer: the reasons of `enum
/// wt_loss` in `bpf/wasmtap.h`, in that order, which each collector counts per CPU in its
/// `LOSSES` map on the failure path only ([`LossReason::ALL`]), then what the kernel
/// counts for the collectors' programs itself ([`LossReason::BpfBusy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LossReason {
    /// A child of a `-c`/`-p` target was not followed: the target set was full. Its
    /// events then count as filtered. A count of processes, not of events.
    TargetsFull,
    /// An exec was not reported: the map of execs in flight was full.
    ExecMapFull,
    /// An open was not reported: the map of opens in flight was full.
    OpenMapFull,
    /// A record larger than the collector's buffer was refused.
    RecordTooBig,
    /// An update of a kernel aggregation was lost: the aggregation map was full.
    AggMapFull,
    /// An interval of a latency aggregation was lost: its start could not be kept, the
    /// map of starts was full.
    StartMapFull,
    /// A thread in the run's scope was not remembered as such (the map was full), so
    /// the intervals other tasks time for it may be missed. A count of threads.
    ScopeMapFull,
    /// An event over the run's events-per-second quota (a tenant's `events_per_sec`),
    /// lost in the kernel before it was written.
    Quota,
    /// An event the kernel did not run a collector's program for, because a BPF program
    /// was already running on that CPU (the kernel's recursion guard: a tracepoint that
    /// fires in an interrupt taken while another tracing program runs). The kernel counts
    /// these per program (`recursion_misses`, Linux 5.12).
    BpfBusy,
}

impl LossReason {
    /// Every reason, in the order of `enum wt_loss` (its index is the map key).
    pub const ALL: [LossReason; 8] = [
        LossReason::TargetsFull,
        LossReason::ExecMapFull,
        LossReason::OpenMapFull,
        LossReason::RecordTooBig,
        LossReason::AggMapFull,
        LossReason::StartMapFull,
        LossReason::ScopeMapFull,
        LossReason::Quota,
    ];

    /// The name in reports: `targets_full`, `exec_map_full`...
    pub fn name(self) -> &'static str {
        match self {
            LossReason::TargetsFull => "targets_full",
            LossReason::ExecMapFull => "exec_map_full",
            LossReason::OpenMapFull => "open_map_full",
            LossReason::RecordTooBig => "record_too_big",
            LossReason::AggMapFull => "agg_map_full",
            LossReason::StartMapFull => "start_map_full",
            LossReason::ScopeMapFull => "scope_map_full",
            LossReason::Quota => "quota",
            LossReason::BpfBusy => "bpf_busy",
        }
    }

    /// What one count is: most reasons count events, two count tasks.
    pub fn unit(self) -> &'static str {
        match self {
            LossReason::TargetsFull => "child processes not followed",
            LossReason::ScopeMapFull => "threads not kept in scope",
            LossReason::StartMapFull => "intervals",
            LossReason::AggMapFull => "aggregation updates",
            _ => "events",
        }
    }

    /// Whether the count is of process state every collector keeps its own copy of (the
    /// target set): the collectors see the same forks, so their counts are of the same
    /// children, and the host takes the largest instead of the sum.
    pub fn per_process(self) -> bool {
        self == LossReason::TargetsFull
    }
}

/// A kernel counter row: the finest probe a collector counts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CounterRow {
    /// A record kind with no finer row: exec, fork, exit, or a syscall id out of range.
    Kind(Kind),
    /// A syscall entry, by syscall id.
    SysEnter(u32),
    /// A syscall exit, by syscall id.
    SysExit(u32),
    /// A tracepoint, by its slot in the probe table (`ProbeTable::tracepoints`).
    Tracepoint(u32),
    /// A uprobe, uretprobe or USDT attachment, by its slot (`ProbeTable::user`).
    User(u32),
    /// A perf software event, by its slot (`ProbeTable::perf`).
    Perf(u32),
}

impl CounterRow {
    /// The kind of the records counted in this row.
    pub fn kind(self) -> Kind {
        match self {
            CounterRow::Kind(k) => k,
            CounterRow::SysEnter(_) => Kind::SysEnter,
            CounterRow::SysExit(_) => Kind::SysExit,
            CounterRow::Tracepoint(_) => Kind::Tracepoint,
            CounterRow::User(_) => Kind::User,
            CounterRow::Perf(_) => Kind::Sample,
        }
    }
}

/// `exec`, `sys_enter:110`, `tracepoint:3`, `user:0`, `perf:1`: the row's key in reports.
impl fmt::Display for CounterRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CounterRow::Kind(k) => f.write_str(kind_name(*k)),
            CounterRow::SysEnter(nr) => write!(f, "sys_enter:{nr}"),
            CounterRow::SysExit(nr) => write!(f, "sys_exit:{nr}"),
            CounterRow::Tracepoint(slot) => write!(f, "tracepoint:{slot}"),
            CounterRow::User(slot) => write!(f, "user:{slot}"),
            CounterRow::Perf(slot) => write!(f, "perf:{slot}"),
        }
    }
}

/// A string that names no counter row.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown counter row `{0}`")]
pub struct BadProbeRow(pub String);

impl FromStr for CounterRow {
    type Err = BadProbeRow;

    fn from_str(s: &str) -> Result<CounterRow, BadProbeRow> {
        let bad = || BadProbeRow(s.to_string());
        let Some((class, n)) = s.split_once(':') else {
            return Kind::ALL.into_iter().find(|k| kind_name(*k) == s).map(CounterRow::Kind).ok_or_else(bad);
        };
        let n: u32 = n.parse().map_err(|_| bad())?;
        match class {
            "sys_enter" => Ok(CounterRow::SysEnter(n)),
            "sys_exit" => Ok(CounterRow::SysExit(n)),
            "tracepoint" => Ok(CounterRow::Tracepoint(n)),
            "user" => Ok(CounterRow::User(n)),
            "perf" => Ok(CounterRow::Perf(n)),
            _ => Err(bad()),
        }
    }
}

/// What the collectors saw, for the accounting report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCounters {
    /// Per record kind: the sum of the kind's rows in `probes`.
    #[serde(with = "kind_map")]
    pub kinds: BTreeMap<Kind, KindCounters>,
    /// Per probe (nonzero rows only), keyed by [`CounterRow`]'s string; recordings made
    /// before rows existed have none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "row_map")]
    pub probes: BTreeMap<CounterRow, KindCounters>,
    /// Records lost between the ring buffer and the plugins (pipeline full).
    pub pipeline_dropped: u64,
    /// Records the host refused as malformed.
    pub malformed: u64,
    /// Events of kernel aggregations: filtered, aggregated (`emitted`), and lost
    /// because the aggregation map was full (`dropped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated: Option<KindCounters>,
    /// What the kernel lost other than to a full ring, by reason (nonzero only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "loss_map")]
    pub losses: BTreeMap<LossReason, u64>,
    /// The kernel aggregations' losses, by aggregation id (nonzero only). Ids mean
    /// nothing outside the run: each plugin's accounting names its own aggregations.
    #[serde(skip)]
    pub agg_losses: BTreeMap<u32, AggLosses>,
}

/// What one kernel aggregation lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AggLosses {
    /// Updates lost: a new key found the aggregation map full.
    pub agg_map_full: u64,
    /// Intervals lost: a start found the map of starts full.
    pub start_map_full: u64,
}

impl KernelCounters {
    /// Add the counts of one row: to the row and to its kind's total.
    pub fn add_probe(&mut self, row: CounterRow, counts: KindCounters) {
        if counts == KindCounters::default() {
            return;
        }
        *self.probes.entry(row).or_default() += counts;
        *self.kinds.entry(row.kind()).or_default() += counts;
    }

    /// Every record lost for any reason, and every aggregation update and interval a
    /// kernel aggregation lost. (Children not followed and threads not kept in scope are
    /// not events: they are in `losses` only.)
    pub fn dropped(&self) -> u64 {
        let agg = self.aggregated.map_or(0, |a| a.dropped);
        let kinds = self.kinds.values().fold(0u64, |sum, k| sum.saturating_add(k.dropped).saturating_add(k.lost));
        [self.pipeline_dropped, self.malformed, agg, self.loss(LossReason::StartMapFull)]
            .into_iter()
            .fold(kinds, u64::saturating_add)
    }

    /// The count of one loss reason.
    pub fn loss(&self, reason: LossReason) -> u64 {
        self.losses.get(&reason).copied().unwrap_or(0)
    }

    /// Add `n` to a loss reason (none if zero, so reports list only what happened).
    pub fn add_loss(&mut self, reason: LossReason, n: u64) {
        if n > 0 {
            let count = self.losses.entry(reason).or_default();
            *count = count.saturating_add(n);
        }
    }
}

/// A stable, human-readable name for a record kind.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::SysEnter => "sys_enter",
        Kind::SysExit => "sys_exit",
        Kind::Exec => "exec",
        Kind::Fork => "fork",
        Kind::Exit => "exit",
        Kind::Tracepoint => "tracepoint",
        Kind::User => "user",
        Kind::Sample => "sample",
        Kind::Open => "open",
    }
}

mod kind_map {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<Kind, KindCounters>, s: S) -> Result<S::Ok, S::Error> {
        let named: BTreeMap<&str, KindCounters> = m.iter().map(|(k, v)| (kind_name(*k), *v)).collect();
        named.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Kind, KindCounters>, D::Error> {
        let named: BTreeMap<String, KindCounters> = BTreeMap::deserialize(d)?;
        named
            .into_iter()
            .map(|(name, v)| {
                Kind::ALL
                    .into_iter()
                    .find(|k| kind_name(*k) == name)
                    .map(|k| (k, v))
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown record kind `{name}`")))
            })
            .collect()
    }
}

mod loss_map {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<LossReason, u64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(r, n)| (r.name(), n)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<LossReason, u64>, D::Error> {
        let named: BTreeMap<String, u64> = BTreeMap::deserialize(d)?;
        named
            .into_iter()
            .map(|(name, n)| {
                LossReason::ALL
                    .into_iter()
                    .chain([LossReason::BpfBusy])
                    .find(|r| r.name() == name)
                    .map(|r| (r, n))
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown loss reason `{name}`")))
            })
            .collect()
    }
}

mod row_map {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<CounterRow, KindCounters>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(row, v)| (row.to_string(), v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<CounterRow, KindCounters>, D::Error> {
        let named: BTreeMap<String, KindCounters> = BTreeMap::deserialize(d)?;
        named.into_iter().map(|(name, v)| name.parse().map(|row| (row, v)).map_err(serde::de::Error::custom)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_rows_print_and_parse_back() {
        let rows = [
            CounterRow::Kind(Kind::Exec),
            CounterRow::Kind(Kind::SysEnter),
            CounterRow::SysEnter(110),
            CounterRow::SysExit(0),
            CounterRow::Tracepoint(3),
            CounterRow::User(0),
            CounterRow::Perf(1),
        ];
        let names: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
        assert_eq!(names, ["exec", "sys_enter", "sys_enter:110", "sys_exit:0", "tracepoint:3", "user:0", "perf:1"]);
        for (row, name) in rows.iter().zip(&names) {
            assert_eq!(name.parse::<CounterRow>().as_ref(), Ok(row));
        }
        for bad in ["", "exec:1", "sys_enter:", "sys_enter:-1", "perf:x", "probe:1", "syscall"] {
            assert_eq!(bad.parse::<CounterRow>(), Err(BadProbeRow(bad.into())), "{bad}");
        }
    }

    #[test]
    fn probes_sum_into_kinds_and_serialize_by_name() {
        let mut k = KernelCounters::default();
        k.add_probe(CounterRow::SysEnter(110), KindCounters { filtered: 1, emitted: 2, dropped: 3, lost: 0 });
        k.add_probe(CounterRow::SysEnter(39), KindCounters { filtered: 0, emitted: 5, dropped: 0, lost: 0 });
        k.add_probe(CounterRow::Kind(Kind::Exec), KindCounters::default());
        assert_eq!(k.kinds[&Kind::SysEnter], KindCounters { filtered: 1, emitted: 7, dropped: 3, lost: 0 });
        assert_eq!(k.probes.len(), 2, "zero rows are left out");
        let json = serde_json::to_value(&k).unwrap();
        assert_eq!(json["probes"]["sys_enter:110"]["dropped"], 3);
        assert_eq!(serde_json::from_value::<KernelCounters>(json).unwrap(), k);
    }

    #[test]
    fn losses_serialize_by_name_and_count_events_only() {
        let mut k = KernelCounters::default();
        k.add_probe(CounterRow::Kind(Kind::Exec), KindCounters { filtered: 0, emitted: 1, dropped: 2, lost: 3 });
        k.add_loss(LossReason::ExecMapFull, 3);
        k.add_loss(LossReason::TargetsFull, 7);
        k.add_loss(LossReason::StartMapFull, 5);
        k.add_loss(LossReason::ScopeMapFull, 0);
        assert_eq!(k.dropped(), 2 + 3 + 5, "ring full, exec map full, intervals; not the children");
        let json = serde_json::to_value(&k).unwrap();
        assert_eq!(json["losses"], serde_json::json!({"targets_full": 7, "exec_map_full": 3, "start_map_full": 5}));
        assert_eq!(serde_json::from_value::<KernelCounters>(json).unwrap(), k);
        let bad = r#"{"kinds":{},"pipeline_dropped":0,"malformed":0,"losses":{"gremlins":1}}"#;
        assert!(serde_json::from_str::<KernelCounters>(bad).is_err());
    }

    #[test]
    fn a_trailer_without_probe_rows_still_loads() {
        let old =
            r#"{"kinds":{"sys_enter":{"filtered":0,"emitted":5,"dropped":0}},"pipeline_dropped":0,"malformed":0}"#;
        let k: KernelCounters = serde_json::from_str(old).unwrap();
        assert_eq!(k.kinds[&Kind::SysEnter].emitted, 5);
        assert!(k.probes.is_empty() && k.losses.is_empty());
        let json = serde_json::to_string(&k).unwrap();
        assert!(!json.contains("probes") && !json.contains("losses"), "no rows, no key: reports stay as they were");
    }
}

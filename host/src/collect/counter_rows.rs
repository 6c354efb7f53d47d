//! The collectors' counter rows (`WT_ROW_*` in `bpf/wasmtap.h`): where each
//! [`CounterRow`] sits in the per-CPU `COUNTERS` array, and which rows a collector can
//! write, so that reading them (at exit, or for periodic stats) skips the rest.
//!
//! `COUNTERS[row * SLOTS + slot]`, slots filtered, emitted, dropped (ring full), lost
//! (another reason, counted by reason in `LOSSES`):
//!
//! | rows            | what                                                    |
//! |-----------------|---------------------------------------------------------|
//! | 0..16           | a record kind with no finer row; 9 is the aggregations' |
//! | 16..528         | `sys_enter` by syscall id                               |
//! | 528..1040       | `sys_exit` by syscall id                                |
//! | 1040..2064      | tracepoints by slot of the probe table                  |
//! | 2064..2320      | uprobe/USDT attachments by slot (the attach cookie)     |
//! | 2320..2332      | perf software events by slot of the probe table         |

use wasmtap_abi::Kind;

use super::agg_maps::AGG_KIND;
use super::probes::Collector;
use super::table::ProbeTable;
use crate::accounting::{CounterRow, KernelCounters, KindCounters};

/// Counter slots per row (`WT_SLOTS`): filtered, emitted, dropped, lost.
pub const SLOTS: u32 = 4;
/// Loss reasons (`WT_LOSSES`): the entries of each collector's `LOSSES` map.
pub const LOSSES: u32 = 8;
/// Rows of record kinds (`WT_KINDS`).
pub const KIND_ROWS: u32 = 16;
/// Syscall ids with a row of their own (`WT_NR_SYSCALLS`).
pub const NR_SYSCALLS: u32 = 512;
/// Tracepoints per run (`WT_TP_SLOTS`).
pub const TP_SLOTS: u32 = 1024;
/// uprobe/USDT attachments per run (`WT_USER_SLOTS`).
pub const USER_SLOTS: u32 = 256;
/// Perf software events (`WT_PERF_EVENTS`).
pub const PERF_EVENTS: u32 = 12;
/// First row of syscall entries (`WT_ROW_SYS_ENTER`).
pub const ROW_SYS_ENTER: u32 = KIND_ROWS;
/// First row of syscall exits (`WT_ROW_SYS_EXIT`).
pub const ROW_SYS_EXIT: u32 = ROW_SYS_ENTER + NR_SYSCALLS;
/// First row of tracepoints (`WT_ROW_TRACEPOINT`).
pub const ROW_TRACEPOINT: u32 = ROW_SYS_EXIT + NR_SYSCALLS;
/// First row of user probes (`WT_ROW_USER`).
pub const ROW_USER: u32 = ROW_TRACEPOINT + TP_SLOTS;
/// First row of perf events (`WT_ROW_PERF`).
pub const ROW_PERF: u32 = ROW_USER + USER_SLOTS;
/// Rows in all (`WT_ROWS`).
pub const ROWS: u32 = ROW_PERF + PERF_EVENTS;

/// The row of index `i` of a class of rows.
type RowOf = fn(u32) -> CounterRow;

/// The classes of rows past the kinds: first row, count, and the row of index `i`.
const RANGES: [(u32, u32, RowOf); 5] = [
    (ROW_SYS_ENTER, NR_SYSCALLS, CounterRow::SysEnter),
    (ROW_SYS_EXIT, NR_SYSCALLS, CounterRow::SysExit),
    (ROW_TRACEPOINT, TP_SLOTS, CounterRow::Tracepoint),
    (ROW_USER, USER_SLOTS, CounterRow::User),
    (ROW_PERF, PERF_EVENTS, CounterRow::Perf),
];

impl CounterRow {
    /// The row's index in `COUNTERS`, if it has one (slots past the caps have none:
    /// the kernel counts those events in their kind's row).
    pub fn index(self) -> Option<u32> {
        let (base, n, i) = match self {
            CounterRow::Kind(k) => return Some(k as u32),
            CounterRow::SysEnter(nr) => (ROW_SYS_ENTER, NR_SYSCALLS, nr),
            CounterRow::SysExit(nr) => (ROW_SYS_EXIT, NR_SYSCALLS, nr),
            CounterRow::Tracepoint(s) => (ROW_TRACEPOINT, TP_SLOTS, s),
            CounterRow::User(s) => (ROW_USER, USER_SLOTS, s),
            CounterRow::Perf(s) => (ROW_PERF, PERF_EVENTS, s),
        };
        (i < n).then_some(base + i)
    }

    /// The probe row at `index` of `COUNTERS`; none for the aggregation row and unused ones.
    pub fn from_index(index: u32) -> Option<CounterRow> {
        if index < KIND_ROWS {
            return Kind::from_u16(index as u16).map(CounterRow::Kind);
        }
        RANGES.iter().find(|(base, n, _)| (*base..base + n).contains(&index)).map(|(base, _, row)| row(index - base))
    }

    /// The row of entry `i` of a table whose rows are `row(0..n)`, as the kernel
    /// picks it (`wt_row`): the kind's own row past the cap.
    pub(crate) fn bounded(kind: Kind, i: usize, n: u32, row: RowOf) -> CounterRow {
        match u32::try_from(i) {
            Ok(i) if i < n => row(i),
            _ => CounterRow::Kind(kind),
        }
    }
}

/// The `COUNTERS` rows collector `c` can write in a run of `table`.
pub fn writable_by(c: Collector, table: &ProbeTable) -> Vec<u32> {
    let kinds = |ks: &[Kind]| ks.iter().map(|k| *k as u32).collect::<Vec<_>>();
    let slots = |kind: Kind, base: u32, n: usize, cap: u32| {
        let mut rows = kinds(&[kind]);
        rows.extend(base..base + (n as u32).min(cap));
        rows
    };
    match c {
        Collector::Syscalls => {
            let mut rows = kinds(&[Kind::SysEnter, Kind::SysExit]);
            rows.extend(ROW_SYS_ENTER..ROW_TRACEPOINT);
            rows
        }
        Collector::Proc => kinds(&[Kind::Exec, Kind::Fork, Kind::Exit]),
        Collector::File => kinds(&[Kind::Open]),
        Collector::Tracepoint => slots(Kind::Tracepoint, ROW_TRACEPOINT, table.tracepoints.len(), TP_SLOTS),
        Collector::User => slots(Kind::User, ROW_USER, table.user.len(), USER_SLOTS),
        Collector::Perf => slots(Kind::Sample, ROW_PERF, table.perf.len(), PERF_EVENTS),
        Collector::Agg => vec![AGG_KIND],
    }
}

impl KernelCounters {
    /// Add the counts read from row `index` of a collector's `COUNTERS`.
    pub fn add_row(&mut self, index: u32, counts: KindCounters) {
        if index == AGG_KIND {
            if counts != KindCounters::default() {
                *self.aggregated.get_or_insert_with(Default::default) += counts;
            }
        } else if let Some(row) = CounterRow::from_index(index) {
            self.add_probe(row, counts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `#define NAME VALUE` lines of the collectors' ABI header.
    fn header_defines() -> Vec<(String, u32)> {
        let text = include_str!("../../../bpf/wasmtap.h");
        text.lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("#define ")?.split_whitespace();
                let (name, value) = (w.next()?, w.next()?);
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn row_layout_matches_the_collectors_header() {
        let defines = header_defines();
        let get = |name: &str| defines.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        for (name, ours) in [
            ("WT_KINDS", KIND_ROWS),
            ("WT_NR_SYSCALLS", NR_SYSCALLS),
            ("WT_TP_SLOTS", TP_SLOTS),
            ("WT_USER_SLOTS", USER_SLOTS),
            ("WT_PERF_EVENTS", PERF_EVENTS),
            ("WT_ROW_SYS_ENTER", ROW_SYS_ENTER),
            ("WT_ROW_SYS_EXIT", ROW_SYS_EXIT),
            ("WT_ROW_TRACEPOINT", ROW_TRACEPOINT),
            ("WT_ROW_USER", ROW_USER),
            ("WT_ROW_PERF", ROW_PERF),
            ("WT_ROWS", ROWS),
            ("WT_AGG_KIND", AGG_KIND),
            ("WT_AGG_COMMS", crate::collect::agg_maps::COMMS_MAX),
            ("WT_AGG_ARRAY_AGGS", crate::collect::agg_maps::ARRAY_AGGS),
            ("WT_AGG_ARRAY_SLOTS", crate::collect::agg_maps::ARRAY_SLOTS),
        ] {
            assert_eq!(get(name), Some(ours), "{name} in bpf/wasmtap.h");
        }
        let text = include_str!("../../../bpf/wasmtap.h");
        let enum_value = |name: &str| {
            let line = text.lines().find(|l| l.trim_start().starts_with(&format!("{name} = ")))?;
            line.split('=').nth(1)?.trim().trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u32>().ok()
        };
        assert_eq!(enum_value("WT_SLOTS"), Some(SLOTS));
        assert_eq!(enum_value("WT_LOSSES"), Some(LOSSES));
        assert_eq!(crate::accounting::LossReason::ALL.len() as u32, LOSSES);
        for (i, reason) in crate::accounting::LossReason::ALL.iter().enumerate() {
            let line = text.lines().find(|l| l.contains(&format!("/* {}:", reason.name())));
            let line = line.unwrap_or_else(|| panic!("{} is not named in enum wt_loss", reason.name()));
            assert!(line.contains(&format!("= {i},")), "{} is reason {i}: {line}", reason.name());
        }
        assert_eq!(super::super::table::NR_SYSCALLS, NR_SYSCALLS);
        assert_eq!(super::super::table::USER_SLOTS_MAX as u32, USER_SLOTS);
    }

    #[test]
    fn every_row_index_maps_back_to_its_row() {
        let mut seen = 0;
        for index in 0..ROWS {
            match CounterRow::from_index(index) {
                Some(row) => {
                    assert_eq!(row.index(), Some(index), "{row}");
                    seen += 1;
                }
                None => assert!(index < KIND_ROWS, "row {index} has no probe"),
            }
        }
        assert_eq!(seen, ROWS - KIND_ROWS + Kind::ALL.len() as u32);
        assert_eq!(CounterRow::from_index(ROWS), None);
        assert_eq!(CounterRow::from_index(AGG_KIND), None);
        assert_eq!(CounterRow::SysEnter(NR_SYSCALLS).index(), None);
        assert_eq!(CounterRow::Perf(PERF_EVENTS - 1).index(), Some(ROWS - 1));
    }

    #[test]
    fn rows_add_to_probes_kinds_and_the_aggregation_row() {
        let mut k = KernelCounters::default();
        let one = KindCounters { filtered: 1, ..KindCounters::default() };
        k.add_row(ROW_SYS_EXIT + 60, one);
        k.add_row(Kind::Exec as u32, one);
        k.add_row(AGG_KIND, one);
        k.add_row(AGG_KIND, one);
        k.add_row(ROW_USER + 1, KindCounters::default());
        assert_eq!(
            k.probes.keys().copied().collect::<Vec<_>>(),
            [CounterRow::Kind(Kind::Exec), CounterRow::SysExit(60)]
        );
        assert_eq!(k.kinds.len(), 2);
        assert_eq!(k.aggregated.map(|a| a.filtered), Some(2));
    }

    #[test]
    fn collectors_read_only_the_rows_they_write() {
        let table = ProbeTable::default();
        assert_eq!(writable_by(Collector::Syscalls, &table).len(), 2 + 2 * NR_SYSCALLS as usize);
        assert_eq!(writable_by(Collector::Proc, &table), [3, 4, 5]);
        assert_eq!(writable_by(Collector::Tracepoint, &table), [Kind::Tracepoint as u32]);
        assert_eq!(writable_by(Collector::Agg, &table), [AGG_KIND]);
    }
}

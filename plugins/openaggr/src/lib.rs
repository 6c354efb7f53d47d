//! openaggr: every interval, how many opens did each process attempt, and how many
//! worked? The DTrace/SystemTap book's Exercise 2: per process, attempts to create a
//! file (O_CREAT or O_TMPFILE), attempts to open an existing one, successes and
//! failures, reset every interval. See README.md.

use wasmtap_sdk::syscalls::creates;
use wasmtap_sdk::{
    export_plugin, wall_ns, BoundedMap, Column, ColumnKind, Comm, Event, Interval, Output, ParamKind, ParamSpec,
    Params, Plan, Plugin, PluginInfo, Subscription, TableSpec, Value,
};

/// Counts of one process in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    create: u64,
    open: u64,
    success: u64,
    fail: u64,
}

struct Openaggr {
    top: usize,
    /// The interval's counts by process; the opens of processes it has no room for are
    /// counted as dropped.
    counts: BoundedMap<(u32, Comm), Tally>,
    interval: Interval,
}

impl Plugin for Openaggr {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "openaggr",
            env!("CARGO_PKG_VERSION"),
            "Every interval, per process: attempts to create and to open files, successes, failures",
            vec![
                ParamSpec::new("interval", ParamKind::Duration, "1s", "print and reset the counts this often"),
                ParamSpec::new("top", ParamKind::Integer, "0", "rows per interval, busiest first; 0: all, by pid"),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mut subs = vec![Subscription::new("file:open")];
        let interval = Interval::required(params, "interval", &mut subs)?;
        let top = usize::try_from(params.int("top")).map_err(|_| "top: must be 0 (all) or more".to_string())?;
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("EXECNAME", ColumnKind::Text, 16),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("CREATE", ColumnKind::Integer, 7),
            Column::new("OPEN", ColumnKind::Integer, 7),
            Column::new("SUCCESS", ColumnKind::Integer, 8),
            Column::new("FAIL", ColumnKind::Integer, 6),
        ];
        let plan = Plan::new(subs).with_table(TableSpec::new("opens", columns));
        Ok((Openaggr { top, counts: BoundedMap::new(), interval }, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        let Event::Open(open) = ev else { return };
        let Some(t) = self.counts.get_or_default((ev.pid(), ev.comm_key())) else { return };
        if creates(open.flags()) {
            t.create += 1;
        } else {
            t.open += 1;
        }
        if open.ret() >= 0 {
            t.success += 1;
        } else {
            t.fail += 1;
        }
    }

    fn on_tick(&mut self, sub: u32, now_ns: u64, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        if self.interval.fired(sub) {
            self.report(now_ns, wall_ns(), out);
        }
        Vec::new()
    }

    fn finish(&mut self, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        self.report(wasmtap_sdk::monotonic_ns(), wall_ns(), out);
        Vec::new()
    }
}

impl Openaggr {
    /// The interval's rows (by pid, or the busiest `top`), then a fresh interval.
    fn report(&mut self, now_ns: u64, wall_ns: u64, out: &mut Output) {
        out.print(&format!("{}\n", utc(wall_ns)));
        let mut rows: Vec<_> = self.counts.drain().collect();
        rows.sort_by_key(|((pid, comm), _)| (*pid, *comm));
        if self.top > 0 && rows.len() > self.top {
            rows.sort_by_key(|(k, t)| (std::cmp::Reverse(t.create + t.open), k.0));
            rows.truncate(self.top);
            rows.sort_by_key(|((pid, _), _)| *pid);
        }
        for ((pid, comm), t) in rows {
            let row = vec![
                Value::from(now_ns),
                Value::Text(comm.to_string()),
                Value::from(pid),
                Value::from(t.create),
                Value::from(t.open),
                Value::from(t.success),
                Value::from(t.fail),
            ];
            out.row(0, row);
        }
        let other = self.counts.take_dropped();
        if other > 0 {
            out.print(&format!("({other} opens of further processes not shown)\n"));
        }
    }
}

/// `2026-11-22 09:41:05 UTC` for nanoseconds since the epoch.
fn utc(ns: u64) -> String {
    let c = wasmtap_sdk::civil((ns / 1_000_000_000) as i64);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", c.year, c.month, c.day, c.hour, c.minute, c.second)
}

export_plugin!(Openaggr);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::{test_records as t, Record};

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_340_465 * 1_000_000_000), "2026-11-22 09:41:05 UTC");
        assert_eq!(utc(951_782_400 * 1_000_000_000), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn opens_are_tallied_per_process_and_reset_each_interval() {
        let (mut me, plan) = Openaggr::start(&Params::from_pairs(&[("interval", "200000000"), ("top", "0")])).unwrap();
        assert_eq!(plan.subscriptions[1].probe, "interval:ms:200");
        let mut out = Output::new();
        for r in [
            t::open(5, 257, b"/a", 0o101, 3, &[]),
            t::open(5, 257, b"/b", 0, -2, &[]),
            t::open(5, 257, b"/c", 0, 4, &[]),
            t::open(4, 2, b"/d", 0o20200002, 5, &[]),
        ] {
            me.on_event(&Event::new(Record::new(&r)).unwrap(), &mut out);
        }
        assert_eq!(me.counts.get(&(5, Comm::new(b"cat"))), Some(&Tally { create: 1, open: 2, success: 2, fail: 1 }));
        assert_eq!(me.counts.get(&(4, Comm::new(b"cat"))), Some(&Tally { create: 1, open: 0, success: 1, fail: 0 }));
        me.report(99, 0, &mut out);
        assert!(out.text().starts_with("1970-01-01 00:00:00 UTC\n"));
        let rows: Vec<_> = out.rows().map(|r| r.values.clone()).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0][2], Value::Int(4), "by pid");
        assert_eq!(rows[1][3..], [Value::Int(1), Value::Int(2), Value::Int(2), Value::Int(1)]);
        assert!(me.counts.is_empty(), "reset after each report");
        assert!(Openaggr::start(&Params::from_pairs(&[("interval", "0"), ("top", "0")])).is_err());
        assert!(Openaggr::start(&Params::from_pairs(&[("interval", "1000000000"), ("top", "-1")])).is_err());
    }
}

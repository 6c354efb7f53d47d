//! wstat: who writes how much, to which file descriptor, every second?
//!
//! The DTrace/SystemTap book's `wstat.d`/`wstat.stp` (Aggregations): per (PID,
//! EXECNAME, FD), the write calls and the kilobytes written in the last interval, sorted
//! by pid and fd, cleared every interval. Counts write, pwrite64, writev, pwritev and
//! pwritev2. The bytes are what the kernel reports written (each call's return value,
//! paired with its fd per thread); the book's `sum(arg2)`, the bytes asked for, is the
//! `requested` parameter. See README.md.

use wasmtap_sdk::syscalls::nr;
use wasmtap_sdk::{
    export_plugin, BoundedMap, Column, ColumnKind, Comm, Event, Interval, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Subscription, TableSpec, Value,
};

const WRITES: [i64; 5] = [nr::WRITE, nr::PWRITE64, nr::WRITEV, nr::PWRITEV, nr::PWRITEV2];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    ops: u64,
    bytes: u64,
    errors: u64,
}

struct Wstat {
    requested: bool,
    fd: Option<i64>,
    name: Vec<u8>,
    top: usize,
    /// Per thread inside a write: (fd, bytes asked for). A write of a thread it has no
    /// room for is not counted, and is counted as lost.
    pending: BoundedMap<u32, (i64, u64)>,
    /// The interval's rows by (pid, comm, fd). A write for a row it has no room for is
    /// counted as lost.
    rows: BoundedMap<(u32, Comm, i64), Tally>,
    interval: Interval,
}

impl Plugin for Wstat {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "wstat",
            env!("CARGO_PKG_VERSION"),
            "Who writes how much, to which file descriptor? Calls and kilobytes per interval",
            vec![
                ParamSpec::new("interval", ParamKind::Duration, "1s", "print and clear the counts this often"),
                ParamSpec::new(
                    "top",
                    ParamKind::Integer,
                    "0",
                    "rows per interval, most bytes first; 0: all, by pid and fd",
                ),
                ParamSpec::new("fd", ParamKind::Integer, "-1", "only this file descriptor; -1: all"),
                ParamSpec::new("name", ParamKind::Text, "", "only processes whose command name contains this"),
                ParamSpec::new(
                    "requested",
                    ParamKind::Boolean,
                    "false",
                    "count the bytes asked for (write's count, like the book's sum(arg2)) instead of those written",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mut subs: Vec<Subscription> = Vec::new();
        for n in WRITES {
            let name = wasmtap_sdk::syscalls::syscall_name(n).expect("write syscalls are in the table");
            subs.push(Subscription::new(&format!("syscall:{name}:entry")));
            subs.push(Subscription::new(&format!("syscall:{name}:exit")));
        }
        let interval = Interval::required(params, "interval", &mut subs)?;
        let top = usize::try_from(params.int("top")).map_err(|_| "top: must be 0 (all) or more".to_string())?;
        let fd = match params.int("fd") {
            -1 => None,
            fd if fd >= 0 => Some(fd),
            fd => return Err(format!("fd: {fd} is not a file descriptor (-1 for all)")),
        };
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("EXECNAME", ColumnKind::Text, 16),
            Column::new("FD", ColumnKind::Integer, 4),
            Column::new("OPS", ColumnKind::Integer, 8),
            Column::new("KBYTES", ColumnKind::Integer, 8),
            Column::new("BYTES", ColumnKind::Integer, 11),
            Column::new("ERRORS", ColumnKind::Integer, 0),
        ];
        let me = Wstat {
            requested: params.bool("requested"),
            fd,
            name: params.text("name").into(),
            top,
            pending: BoundedMap::new(),
            rows: BoundedMap::new(),
            interval,
        };
        Ok((me, Plan::new(subs).with_table(TableSpec::new("writes", columns))))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        match ev {
            Event::SysEnter(s) => {
                let fd = s.arg(0) as i32 as i64;
                if self.fd.is_some_and(|want| want != fd) || !ev.comm_contains(&self.name) {
                    return;
                }
                // writev and the pwritev pair take an iovec count, not bytes: no request size.
                let asked = if matches!(s.id(), nr::WRITE | nr::PWRITE64) { s.arg(2) } else { 0 };
                self.pending.insert(ev.tid(), (fd, asked));
            }
            Event::SysExit(s) => {
                let Some((fd, asked)) = self.pending.remove(&ev.tid()) else { return };
                let Some(t) = self.rows.get_or_default((ev.pid(), ev.comm_key(), fd)) else { return };
                let ret = s.ret();
                t.ops += 1;
                if ret < 0 {
                    t.errors += 1;
                }
                t.bytes += match (self.requested, s.id()) {
                    (true, nr::WRITE | nr::PWRITE64) => asked,
                    _ => ret.max(0) as u64,
                };
            }
            _ => {}
        }
    }

    fn on_tick(&mut self, sub: u32, now_ns: u64, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        if self.interval.fired(sub) {
            self.report(now_ns, out);
        }
        Vec::new()
    }

    fn finish(&mut self, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        self.report(wasmtap_sdk::monotonic_ns(), out);
        let lost = self.pending.dropped() + self.rows.dropped();
        if lost > 0 {
            let (rows, threads) = (self.rows.max(), self.pending.max());
            out.print(&format!("{lost} writes not counted: more than {rows} rows or {threads} threads\n"));
        }
        Vec::new()
    }
}

impl Wstat {
    /// The interval's rows, by pid then fd (or the `top` by bytes), then cleared.
    fn report(&mut self, now_ns: u64, out: &mut Output) {
        let mut rows: Vec<_> = self.rows.drain().collect();
        rows.sort_by(|a, b| (a.0 .0, a.0 .2, &a.0 .1).cmp(&(b.0 .0, b.0 .2, &b.0 .1)));
        if self.top > 0 && rows.len() > self.top {
            rows.sort_by_key(|(k, t)| (std::cmp::Reverse(t.bytes), k.0, k.2));
            rows.truncate(self.top);
            rows.sort_by_key(|(k, _)| (k.0, k.2));
        }
        for ((pid, comm, fd), t) in rows {
            let row = vec![
                Value::from(now_ns),
                Value::from(pid),
                Value::Text(comm.to_string()),
                Value::Int(fd),
                Value::from(t.ops),
                Value::from(t.bytes / 1024),
                Value::from(t.bytes),
                Value::from(t.errors),
            ];
            out.row(0, row);
        }
    }
}

export_plugin!(Wstat);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::{test_records as t, Record};

    fn exit(pid: u32, id: i64, ret: i64) -> Vec<u8> {
        use wasmtap_sdk::abi::{sys_exit, Kind};
        let mut b = t::record(Kind::SysExit, sys_exit::SIZE, pid, b"cat");
        t::put(&mut b, sys_exit::ID, &id.to_le_bytes());
        t::put(&mut b, sys_exit::RET, &ret.to_le_bytes());
        b
    }

    fn run(params: &[(&str, &str)], records: &[Vec<u8>]) -> Vec<Vec<Value>> {
        let mut p = vec![("interval", "1000000000"), ("top", "0"), ("fd", "-1"), ("name", ""), ("requested", "false")];
        for (k, v) in params {
            p.retain(|(n, _)| n != k);
            p.push((k, v));
        }
        let (mut me, plan) = Wstat::start(&Params::from_pairs(&p)).unwrap();
        assert_eq!(plan.subscriptions.len(), 11);
        assert_eq!((plan.subscriptions[10].probe.as_str(), me.interval.sub()), ("interval:ms:1000", Some(10)));
        let mut out = Output::new();
        for r in records {
            me.on_event(&Event::new(Record::new(r)).unwrap(), &mut out);
        }
        me.report(5, &mut out);
        assert!(me.rows.is_empty());
        out.rows().map(|r| r.values.clone()).collect()
    }

    #[test]
    fn writes_are_paired_with_their_fd_and_summed_per_interval() {
        let recs = [
            t::sys_enter(7, nr::WRITE, [4, 0, 4096, 0, 0, 0]),
            exit(7, nr::WRITE, 4096),
            t::sys_enter(7, nr::WRITE, [4, 0, 4096, 0, 0, 0]),
            exit(7, nr::WRITE, 1000), // a short write
            t::sys_enter(7, nr::WRITEV, [1, 0, 3, 0, 0, 0]),
            exit(7, nr::WRITEV, 30),
            t::sys_enter(7, nr::WRITE, [9, 0, 10, 0, 0, 0]),
            exit(7, nr::WRITE, -9), // EBADF
        ];
        let got = run(&[], &recs);
        let fds: Vec<_> = got.iter().map(|r| r[3..].to_vec()).collect();
        let row = |fd, ops, bytes: i64, errors| {
            vec![Value::Int(fd), Value::Int(ops), Value::Int(bytes / 1024), Value::Int(bytes), Value::Int(errors)]
        };
        assert_eq!(fds, [row(1, 1, 30, 0), row(4, 2, 5096, 0), row(9, 1, 0, 1)]);
        let asked = run(&[("requested", "true")], &recs);
        assert_eq!(asked[1][6], Value::Int(8192));
        assert_eq!(run(&[("fd", "4")], &recs).len(), 1);
        assert_eq!(run(&[("top", "1")], &recs)[0][3], Value::Int(4));
    }

    #[test]
    fn parameters_are_checked() {
        let p = |k: &'static str, v: &'static str| {
            let mut p =
                vec![("interval", "1000000000"), ("top", "0"), ("fd", "-1"), ("name", ""), ("requested", "false")];
            p.retain(|(n, _)| *n != k);
            p.push((k, v));
            Wstat::start(&Params::from_pairs(&p)).err()
        };
        assert!(p("interval", "0").unwrap().starts_with("interval:"));
        assert!(p("fd", "-5").unwrap().starts_with("fd: -5"));
        assert!(p("top", "-1").unwrap().starts_with("top:"));
        assert!(p("fd", "3").is_none());
    }
}

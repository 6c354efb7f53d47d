//! proclife: what happens in the life of a command and its children, in order?
//!
//! The DTrace/SystemTap book's "Lifetime of a process" (`proc.d`, `proc.stp`): one line
//! per fork, exec, exit and wait (a parent reaping a child), with the actor and the
//! parent/child ids, in time order. Events of different collectors reach the plugin in
//! batches, each in order but not interleaved with the others; the plugin holds them
//! for a short horizon (100 ms) and prints them sorted by time. See README.md.

use std::collections::BTreeMap;

use wasmtap_sdk::syscalls::{errno_name, wait_status};
use wasmtap_sdk::{
    export_plugin, BoundedMap, BoundedSet, Column, ColumnKind, Event, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Subscription, TableSpec, Value,
};

/// How long an event is held before it is printed, so that the later-drained events of
/// another collector can be put before it.
const HORIZON_NS: u64 = 100_000_000;

/// One line, before printing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    pid: u32,
    comm: String,
    ppid: u32,
    event: &'static str,
    detail: String,
    /// A wait's reaped child, whose status is named when the line prints (its exit,
    /// from another collector, may arrive after the wait).
    reaped: Option<u32>,
}

struct Proclife {
    name: Vec<u8>,
    threads: bool,
    /// Processes followed (when `name` is set): those that exec'd a matching command and
    /// their descendants.
    followed: BoundedSet<u32>,
    /// Exit statuses by pid, for the wait that reaps them.
    statuses: BoundedMap<u32, i32>,
    /// Lines held until the horizon, by (time, arrival).
    held: BTreeMap<(u64, u64), Line>,
    arrivals: u64,
    latest_ns: u64,
}

impl Plugin for Proclife {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "proclife",
            env!("CARGO_PKG_VERSION"),
            "The lifecycle of processes, in order: fork, exec, exit, wait",
            vec![
                ParamSpec::new(
                    "name",
                    ParamKind::Text,
                    "",
                    "follow processes that exec a command whose name contains this, and their descendants; empty: all",
                ),
                ParamSpec::new("threads", ParamKind::Boolean, "false", "also thread creation and thread exits"),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let subs =
            ["proc:fork", "proc:exec", "proc:exit", "syscall:wait4:exit", "syscall:waitid:exit", "interval:ms:50"]
                .map(Subscription::new)
                .to_vec();
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("COMM", ColumnKind::Text, 16),
            Column::new("PPID", ColumnKind::Integer, 7),
            Column::new("EVENT", ColumnKind::Text, 6),
            Column::new("DETAIL", ColumnKind::Text, 0),
        ];
        let me = Proclife {
            name: params.text("name").into(),
            threads: params.bool("threads"),
            followed: BoundedSet::new(),
            statuses: BoundedMap::new(),
            held: BTreeMap::new(),
            arrivals: 0,
            latest_ns: 0,
        };
        Ok((me, Plan::new(subs).with_table(TableSpec::new("lifecycle", columns))))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        let pid = ev.pid();
        let line = match ev {
            Event::Fork(f) => {
                if (f.is_thread() && !self.threads) || !self.is_followed(pid) {
                    return;
                }
                if !f.is_thread() && !self.name.is_empty() {
                    self.followed.insert(f.child_pid());
                }
                let detail = if f.is_thread() {
                    format!("thread {}", f.child_tid())
                } else {
                    format!("child {}", f.child_pid())
                };
                self.line(ev, 0, "fork", detail)
            }
            Event::Exec(e) => {
                let matches = ev.comm_contains(&self.name);
                if matches && !self.name.is_empty() && e.ret() == 0 {
                    self.followed.insert(pid);
                }
                if !self.is_followed(pid) {
                    return;
                }
                let ret =
                    if e.ret() == 0 { "0".to_string() } else { errno_name(i64::from(e.ret())).unwrap_or("?").into() };
                self.line(ev, e.ppid(), "exec", format!("{} = {ret}", e.args_joined()))
            }
            Event::Exit(x) => {
                if (!x.group_dead() && !self.threads) || !self.is_followed(pid) {
                    return;
                }
                if x.group_dead() {
                    self.statuses.insert(pid, x.exit_code());
                }
                let event = if x.group_dead() { "exit" } else { "texit" };
                let line = self.line(ev, x.ppid(), event, wait_status(x.exit_code()));
                if !self.name.is_empty() {
                    self.followed.remove(&pid);
                }
                line
            }
            Event::SysExit(s) => {
                if s.ret() <= 0 || !self.is_followed(pid) {
                    return; // nothing reaped (WNOHANG, an error), or waitid's 0
                }
                let child = s.ret() as u32;
                let mut line = self.line(ev, 0, s.name().unwrap_or("wait"), format!("reaped {child}"));
                line.reaped = Some(child);
                line
            }
            _ => return,
        };
        self.arrivals += 1;
        self.latest_ns = self.latest_ns.max(ev.ts_ns());
        self.held.insert((ev.ts_ns(), self.arrivals), line);
    }

    fn on_tick(&mut self, _sub: u32, now_ns: u64, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        self.flush(now_ns.saturating_sub(HORIZON_NS), out);
        Vec::new()
    }

    fn finish(&mut self, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        self.flush(u64::MAX, out);
        Vec::new()
    }
}

impl Proclife {
    fn is_followed(&self, pid: u32) -> bool {
        self.name.is_empty() || self.followed.contains(&pid)
    }

    fn line(&self, ev: &Event<'_>, ppid: u32, event: &'static str, detail: String) -> Line {
        Line { pid: ev.pid(), comm: ev.comm().into_owned(), ppid, event, detail, reaped: None }
    }

    /// Print the held lines older than `before`, oldest first.
    fn flush(&mut self, before: u64, out: &mut Output) {
        let later = self.held.split_off(&(before, 0));
        for ((ts, _), mut l) in std::mem::replace(&mut self.held, later) {
            if let Some(status) = l.reaped.and_then(|child| self.statuses.remove(&child)) {
                l.detail = format!("{}: {}", l.detail, wait_status(status));
            }
            let ppid = if l.ppid == 0 { Value::Text(String::new()) } else { Value::from(l.ppid) };
            out.row(
                0,
                vec![
                    Value::from(ts),
                    Value::from(l.pid),
                    Value::Text(l.comm),
                    ppid,
                    Value::Text(l.event.into()),
                    Value::Text(l.detail),
                ],
            );
        }
    }
}

export_plugin!(Proclife);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::abi::{exit::FLAG_GROUP_DEAD, header, sys_exit, Kind};
    use wasmtap_sdk::{test_records as t, Record};

    fn at(mut rec: Vec<u8>, ts: u64) -> Vec<u8> {
        t::put(&mut rec, header::TS_NS, &ts.to_le_bytes());
        rec
    }

    fn wait4(pid: u32, reaped: i64) -> Vec<u8> {
        let mut b = t::record(Kind::SysExit, sys_exit::SIZE, pid, b"bash");
        t::put(&mut b, sys_exit::ID, &61i64.to_le_bytes());
        t::put(&mut b, sys_exit::RET, &reaped.to_le_bytes());
        b
    }

    fn run(name: &str, records: &[Vec<u8>]) -> Vec<(String, String)> {
        let (mut me, _) = Proclife::start(&Params::from_pairs(&[("name", name), ("threads", "false")])).unwrap();
        let mut out = Output::new();
        for r in records {
            me.on_event(&Event::new(Record::new(r)).unwrap(), &mut out);
        }
        me.on_tick(5, 150, &mut out); // nothing older than the horizon yet
        assert_eq!(out.rows().count(), 0);
        me.finish(&mut out);
        out.rows()
            .map(|r| match (&r.values[4], &r.values[5]) {
                (Value::Text(e), Value::Text(d)) => (e.clone(), d.clone()),
                v => panic!("{v:?}"),
            })
            .collect()
    }

    #[test]
    fn events_print_in_time_order_with_waits_naming_the_status() {
        // Arrival order is by collector: the wait (syscalls) comes before the proc events.
        let recs = [
            at(wait4(1, 20), 40),
            at(t::fork(1, 20, 20, 0), 10),
            at(t::exec(20, 0, &[b"/bin/true", b"x"]), 20),
            at(t::exit(20, 3 << 8, 10, FLAG_GROUP_DEAD), 30),
        ];
        let got = run("", &recs);
        let want =
            [("fork", "child 20"), ("exec", "/bin/true x = 0"), ("exit", "exit 3"), ("wait4", "reaped 20: exit 3")];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
    }

    #[test]
    fn a_name_follows_the_command_and_its_descendants() {
        let recs = [
            at(t::fork(1, 30, 30, 0), 1),    // bash forks: not followed yet
            at(t::exec(30, 0, &[b"ls"]), 2), // comm "ls" in test records: followed
            at(t::fork(30, 31, 31, 0), 3),   // its child: followed
            at(t::exit(31, 0, 3, FLAG_GROUP_DEAD), 4),
            at(t::exit(99, 0, 3, FLAG_GROUP_DEAD), 5), // unrelated
        ];
        let got: Vec<_> = run("ls", &recs).into_iter().map(|(e, _)| e).collect();
        assert_eq!(got, ["exec", "fork", "exit"]);
    }
}

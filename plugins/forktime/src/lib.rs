//! forktime: where does the time go when a command starts and runs?
//!
//! The DTrace/SystemTap book's Exercise 3 (part 2), per (execname, args), in
//! microseconds: the time inside fork() in the parent (clone, clone3, fork, vfork, entry
//! to exit), the child's set-up (from its creation to its execve), the time inside
//! execve, and the program's run time (from its exec to its exit). Averages and maxima,
//! every interval or at the end. See README.md.

use wasmtap_sdk::syscalls::nr;
use wasmtap_sdk::{
    export_plugin, BoundedMap, Column, ColumnKind, Event, FxHashMap, Interval, Output, ParamKind, ParamSpec, Params,
    Plan, Plugin, PluginInfo, Subscription, TableSpec, Value,
};

const FORKS: [&str; 4] = ["clone", "clone3", "fork", "vfork"];
/// A longer argument list is cut, with "...".
const ARGS_MAX: usize = 200;

/// The four phases.
const FORK: usize = 0;
const SETUP: usize = 1;
const EXEC: usize = 2;
const RUN: usize = 3;

/// What is known of a process on its way from fork to exit.
#[derive(Clone, Debug, Default)]
struct Life {
    fork_ns: Option<u64>,
    created: Option<u64>,
    exec_start: Option<u64>,
    exec_ns: Option<u64>,
    exec_done: Option<u64>,
    setup_ns: Option<u64>,
    key: Option<(String, String)>,
}

/// Count, sum and maximum of one phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stat {
    n: u64,
    sum: u64,
    max: u64,
}

impl Stat {
    fn add(&mut self, ns: u64) {
        self.n += 1;
        self.sum += ns;
        self.max = self.max.max(ns);
    }
}

struct Forktime {
    /// Parents inside a fork syscall: tid → entry time.
    in_fork: BoundedMap<u32, u64>,
    /// Processes on their way from fork to exit. When it is full, a new process makes
    /// it forget all it holds, counted (a process whose fork or exec was not seen is not
    /// timed).
    lives: BoundedMap<u32, Life>,
    stats: FxHashMap<(String, String), [Stat; 4]>,
    interval: Interval,
}

impl Plugin for Forktime {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "forktime",
            env!("CARGO_PKG_VERSION"),
            "Where the time goes when a command starts: fork, child set-up, exec, run (per command)",
            vec![ParamSpec::new(
                "interval",
                ParamKind::Duration,
                "0",
                "print (and reset) the table this often, like the book's 1s; 0: only at the end",
            )],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let mut subs = Vec::new();
        for f in FORKS {
            subs.push(Subscription::new(&format!("syscall:{f}:entry")));
            subs.push(Subscription::new(&format!("syscall:{f}:exit")));
        }
        for p in ["syscall:execve:entry", "syscall:execveat:entry", "proc:fork", "proc:exec", "proc:exit"] {
            subs.push(Subscription::new(p));
        }
        let interval = Interval::optional(params, "interval", &mut subs)?;
        let mut columns = vec![
            Column::new("EXECNAME", ColumnKind::Text, 16),
            Column::new("ARGS", ColumnKind::Text, 24),
            Column::new("COUNT", ColumnKind::Integer, 6),
        ];
        for phase in ["FORK", "SETUP", "EXEC", "RUN"] {
            columns.push(Column::new(&format!("{phase}_AVG_US"), ColumnKind::Integer, 12));
            columns.push(Column::new(&format!("{phase}_MAX_US"), ColumnKind::Integer, 12));
        }
        let me =
            Forktime { in_fork: BoundedMap::new(), lives: BoundedMap::new(), stats: FxHashMap::default(), interval };
        Ok((me, Plan::new(subs).with_table(TableSpec::new("phases", columns))))
    }

    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        let ts = ev.ts_ns();
        match ev {
            Event::SysEnter(s) if matches!(s.id(), nr::EXECVE | nr::EXECVEAT) => {
                self.lives.get_or_default_clearing(ev.pid()).exec_start = Some(ts);
            }
            Event::SysEnter(_) => {
                self.in_fork.insert(ev.tid(), ts);
            }
            Event::SysExit(s) => {
                let Some(t0) = self.in_fork.remove(&ev.tid()) else { return };
                // In the parent the return value is the child; threads are not processes.
                if let Ok(child) = u32::try_from(s.ret()) {
                    if child > 0 {
                        if let Some(life) = self.lives.get_mut(&child) {
                            life.fork_ns = Some(ts.saturating_sub(t0));
                        } else if !self.lives.is_full() {
                            self.lives.insert(child, Life { fork_ns: Some(ts.saturating_sub(t0)), ..Life::default() });
                        }
                    }
                }
            }
            Event::Fork(f) if !f.is_thread() => {
                self.lives.get_or_default_clearing(f.child_pid()).created = Some(ts);
            }
            Event::Exec(e) if e.ret() == 0 => {
                let pid = ev.pid();
                let mut args = e.args_joined();
                if args.len() > ARGS_MAX {
                    let cut = (0..=ARGS_MAX).rev().find(|i| args.is_char_boundary(*i)).unwrap_or(0);
                    args.truncate(cut);
                    args.push_str("...");
                }
                let key = (ev.comm().into_owned(), args);
                let life = self.lives.get_or_default_clearing(pid);
                life.setup_ns = match (life.created, life.exec_start) {
                    (Some(c), Some(s)) if s >= c => Some(s - c),
                    _ => None,
                };
                life.exec_ns = life.exec_start.map(|s| ts.saturating_sub(s));
                life.exec_done = Some(ts);
                life.key = Some(key);
            }
            Event::Exit(x) if x.group_dead() => {
                let Some(life) = self.lives.remove(&ev.pid()) else { return };
                let (Some(key), Some(done)) = (life.key, life.exec_done) else { return };
                let stats = self.stats.entry(key).or_default();
                for (phase, ns) in [(FORK, life.fork_ns), (SETUP, life.setup_ns), (EXEC, life.exec_ns)] {
                    if let Some(ns) = ns {
                        stats[phase].add(ns);
                    }
                }
                stats[RUN].add(ts.saturating_sub(done));
            }
            _ => {}
        }
    }

    fn on_tick(&mut self, sub: u32, _now_ns: u64, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        if self.interval.fired(sub) {
            self.report(out);
        }
        Vec::new()
    }

    fn finish(&mut self, out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        self.report(out);
        if self.lives.dropped() > 0 {
            let (dropped, max) = (self.lives.dropped(), self.lives.max());
            out.print(&format!("{dropped} processes not timed: more than {max} at once\n"));
        }
        Vec::new()
    }
}

impl Forktime {
    /// One row per (execname, args), most frequent first, then cleared.
    fn report(&mut self, out: &mut Output) {
        let mut rows: Vec<_> = self.stats.drain().collect();
        rows.sort_by(|a, b| b.1[RUN].n.cmp(&a.1[RUN].n).then_with(|| a.0.cmp(&b.0)));
        for ((comm, args), stats) in rows {
            let mut row = vec![Value::Text(comm), Value::Text(args), Value::from(stats[RUN].n)];
            for s in stats {
                let avg = s.sum.checked_div(s.n).map_or(Value::Int(-1), |avg| Value::from(avg / 1000));
                let max = if s.n == 0 { Value::Int(-1) } else { Value::from(s.max / 1000) };
                row.push(avg);
                row.push(max);
            }
            out.row(0, row);
        }
    }
}

export_plugin!(Forktime);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::abi::{exit::FLAG_GROUP_DEAD, header, sys_exit, Kind};
    use wasmtap_sdk::{test_records as t, Record};

    fn at(mut rec: Vec<u8>, ts: u64) -> Vec<u8> {
        t::put(&mut rec, header::TS_NS, &ts.to_le_bytes());
        rec
    }

    fn sys_exit(pid: u32, id: i64, ret: i64) -> Vec<u8> {
        let mut b = t::record(Kind::SysExit, sys_exit::SIZE, pid, b"bash");
        t::put(&mut b, sys_exit::ID, &id.to_le_bytes());
        t::put(&mut b, sys_exit::RET, &ret.to_le_bytes());
        b
    }

    #[test]
    fn four_phases_per_command() {
        let us = 1000;
        let (mut me, plan) = Forktime::start(&Params::from_pairs(&[("interval", "0")])).unwrap();
        assert_eq!(plan.subscriptions.len(), 13);
        let mut out = Output::new();
        // Parent 1 (tid 2 in test records) forks child 50 twice over (two lives).
        for (child, base) in [(50u32, 0u64), (51, 1_000_000)] {
            let recs = [
                at(t::sys_enter(1, nr::CLONE, [0; 6]), base),
                at(t::fork(1, child, child, 0), base + 40 * us),
                at(sys_exit(1, nr::CLONE, i64::from(child)), base + 60 * us),
                at(t::sys_enter(child, nr::EXECVE, [0; 6]), base + 140 * us),
                at(t::exec(child, 0, &[b"/bin/true", b"x"]), base + 440 * us),
                at(t::exit(child, 0, 0, FLAG_GROUP_DEAD), base + 940 * us),
            ];
            for r in recs {
                me.on_event(&Event::new(Record::new(&r)).unwrap(), &mut out);
            }
        }
        assert!(me.lives.is_empty() && me.in_fork.is_empty(), "state ends with the process");
        me.report(&mut out);
        let rows: Vec<_> = out.rows().map(|r| r.values.clone()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][..3], [Value::Text("ls".into()), Value::Text("/bin/true x".into()), Value::Int(2)]);
        // fork 60 us, set-up 100 us (created at 40, execve at 140), exec 300 us, run 500 us.
        assert_eq!(rows[0][3..], [60, 60, 100, 100, 300, 300, 500, 500].map(Value::Int));
        assert!(me.stats.is_empty());
    }
}

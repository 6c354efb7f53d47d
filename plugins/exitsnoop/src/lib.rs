//! exitsnoop: which processes end, how, after how long, having used how much CPU?
//!
//! The wasmtap take on libbpf-tools' `exitsnoop` and bpftrace's
//! `tracepoint:sched:sched_process_exit`: one row per process exit (`proc:exit` of the
//! last thread), with the exit code or the signal decoded, the lifetime, and the CPU
//! time the process used, exact (the scheduler's runtime) and split into user and
//! system time. See README.md.

use wasmtap_sdk::syscalls::wait_status;
use wasmtap_sdk::{
    export_plugin, Column, ColumnKind, Event, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo,
    Subscription, TableSpec, Value,
};

const NS_PER_MS: u64 = 1_000_000;

struct Exitsnoop {
    failed: bool,
    threads: bool,
    name: Vec<u8>,
    min_age_ns: u64,
}

impl Plugin for Exitsnoop {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "exitsnoop",
            env!("CARGO_PKG_VERSION"),
            "Which processes end, how (exit code or signal), after how long, having used how much CPU?",
            vec![
                ParamSpec::new("failed", ParamKind::Boolean, "false", "only exits with a non-zero code or a signal"),
                ParamSpec::new("threads", ParamKind::Boolean, "false", "every thread's exit, not just processes'"),
                ParamSpec::new("name", ParamKind::Text, "", "only processes whose command name contains this"),
                ParamSpec::new(
                    "min-age",
                    ParamKind::Duration,
                    "0",
                    "only processes that lived at least this long (10ms)",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("PCOMM", ColumnKind::Text, 16),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("PPID", ColumnKind::Integer, 7),
            Column::new("TID", ColumnKind::Integer, 7),
            Column::new("AGE_MS", ColumnKind::Integer, 8),
            Column::new("CPU_MS", ColumnKind::Integer, 7),
            Column::new("USER_MS", ColumnKind::Integer, 7),
            Column::new("SYS_MS", ColumnKind::Integer, 7),
            Column::new("EXIT", ColumnKind::Text, 0),
        ];
        let me = Exitsnoop {
            failed: params.bool("failed"),
            threads: params.bool("threads"),
            name: params.text("name").into(),
            min_age_ns: params.duration_ns("min-age"),
        };
        Ok((me, Plan::new(vec![Subscription::new("proc:exit")]).with_table(TableSpec::new("exits", columns))))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        let Event::Exit(exit) = ev else { return };
        if !self.threads && !exit.group_dead() {
            return;
        }
        if self.failed && exit.exit_code() == 0 {
            return;
        }
        let age = ev.ts_ns().saturating_sub(exit.start_ns());
        if age < self.min_age_ns || !ev.comm_contains(&self.name) {
            return;
        }
        let ms = |ns: Option<u64>| ns.map_or(Value::Int(-1), |ns| Value::from(ns / NS_PER_MS));
        let (user, sys) = exit.user_sys_ns().unzip();
        let row = vec![
            Value::from(ev.ts_ns()),
            Value::Text(ev.comm().into_owned()),
            Value::from(ev.pid()),
            Value::from(exit.ppid()),
            Value::from(ev.tid()),
            Value::from(age / NS_PER_MS),
            ms(exit.cpu_ns()),
            ms(user),
            ms(sys),
            Value::Text(wait_status(exit.exit_code())),
        ];
        out.row(0, row);
    }
}

export_plugin!(Exitsnoop);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::abi::exit::FLAG_GROUP_DEAD;
    use wasmtap_sdk::{test_records as t, Record};

    fn rows(params: &[(&str, &str)], records: &[Vec<u8>]) -> Vec<Vec<Value>> {
        let mut p = vec![("failed", "false"), ("threads", "false"), ("name", ""), ("min-age", "0")];
        for (k, v) in params {
            p.retain(|(n, _)| n != k);
            p.push((k, v));
        }
        let (mut me, _) = Exitsnoop::start(&Params::from_pairs(&p)).unwrap();
        let mut out = Output::new();
        for r in records {
            me.on_event(&Event::new(Record::new(r)).unwrap(), &mut out);
        }
        out.rows().map(|r| r.values.clone()).collect()
    }

    fn old_exit(pid: u32, status: i32, start_ns: u64) -> Vec<u8> {
        use wasmtap_sdk::abi::{exit, header};
        let mut b = t::exit(pid, status, start_ns, FLAG_GROUP_DEAD);
        b.truncate(exit::SIZE_WITHOUT_CPU);
        t::put(&mut b, header::SIZE, &(exit::SIZE_WITHOUT_CPU as u16).to_le_bytes());
        b
    }

    #[test]
    fn process_exits_with_status_age_and_cpu() {
        let ms = 1_000_000;
        let recs = [
            // ts is 123_456_789 in test records: started 23 ms before.
            t::exit_cpu(10, 3 << 8, 100_456_789, FLAG_GROUP_DEAD, [250 * ms, 240 * ms, 8 * ms]),
            old_exit(11, 9, 123_456_000), // from an old recording: no CPU times
            t::exit(12, 0, 0, 0),         // a thread
        ];
        let got = rows(&[], &recs);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0][2..],
            [10, 1, 11, 23, 250, 240, 8]
                .map(Value::Int)
                .into_iter()
                .chain([Value::Text("exit 3".into())])
                .collect::<Vec<_>>()
        );
        assert_eq!((&got[1][6], &got[1][9]), (&Value::Int(-1), &Value::Text("killed by SIGKILL".into())));
        assert_eq!(rows(&[("threads", "true")], &recs).len(), 3);
        assert_eq!(rows(&[("failed", "true"), ("threads", "true")], &recs).len(), 2);
        assert_eq!(rows(&[("min-age", "20000000")], &recs).len(), 1);
        assert_eq!(rows(&[("name", "slee")], &recs).len(), 2);
    }
}

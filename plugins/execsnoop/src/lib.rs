//! execsnoop: which new processes are being executed, with which arguments?
//!
//! The wasmtap take on bpftrace's `tools/execsnoop.bt` and libbpf-tools' `execsnoop`:
//! one row per exec, including failed ones. See README.md.

use wasmtap_sdk::{
    export_plugin, Column, ColumnKind, Event, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo,
    Subscription, TableSpec, Value,
};

const EXECS: u32 = 0;

struct Execsnoop {
    failed_only: bool,
    name: Vec<u8>,
}

impl Plugin for Execsnoop {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "execsnoop",
            env!("CARGO_PKG_VERSION"),
            "Which new processes are being executed, with which arguments?",
            vec![
                ParamSpec::new("failed", ParamKind::Boolean, "false", "only execs that failed"),
                ParamSpec::new(
                    "name",
                    ParamKind::Text,
                    "",
                    "only execs whose command name (after the exec) contains this",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("PPID", ColumnKind::Integer, 7),
            Column::new("UID", ColumnKind::Integer, 6),
            Column::new("RET", ColumnKind::Integer, 4),
            Column::new("ARGS", ColumnKind::Text, 0),
        ];
        let plan = Plan::new(vec![Subscription::new("proc:exec")]).with_table(TableSpec::new("execs", columns));
        let me = Execsnoop { failed_only: params.bool("failed"), name: params.text("name").into() };
        Ok((me, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        let Event::Exec(exec) = ev else { return };
        if self.failed_only && exec.ret() >= 0 {
            return;
        }
        if !ev.comm_contains(&self.name) {
            return;
        }
        let mut args = exec.args_joined();
        if exec.truncated() {
            args.push_str(" ...");
        }
        let row = vec![
            Value::from(ev.ts_ns()),
            Value::from(ev.pid()),
            Value::from(exec.ppid()),
            Value::from(ev.uid()),
            Value::from(exec.ret()),
            Value::Text(args),
        ];
        out.row(EXECS, row);
    }
}

export_plugin!(Execsnoop);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_declares_the_execs_table() {
        let (me, plan) = Execsnoop::start(&Params::from_pairs(&[("failed", "true"), ("name", "sh")])).unwrap();
        assert!(me.failed_only);
        assert_eq!(plan.subscriptions[0].probe, "proc:exec");
        let names: Vec<_> = plan.tables[0].columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["TIME", "PID", "PPID", "UID", "RET", "ARGS"]);
    }
}

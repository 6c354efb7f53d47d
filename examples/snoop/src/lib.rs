//! printf-style streaming: one row per event of any probe, like
//! `bpftrace -e 'PROBE { printf("%d %d %s\n", pid, tid, comm); }'`.
//! Rows leave the plugin once per batch; the host writes them.

use wasmtap_sdk::{
    export_plugin, Column, ColumnKind, Event, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo,
    Subscription, TableSpec, Value,
};

struct Snoop;

impl Plugin for Snoop {
    fn info() -> PluginInfo {
        let probe =
            ParamSpec::new("probe", ParamKind::Text, "syscall:getppid:entry", "the probe to print (`wasmtap list`)");
        PluginInfo::new("snoop", "0.1.0", "One line per event of a probe", vec![probe])
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("TID", ColumnKind::Integer, 7),
            Column::new("COMM", ColumnKind::Text, 0),
        ];
        let plan =
            Plan::new(vec![Subscription::new(params.text("probe"))]).with_table(TableSpec::new("events", columns));
        Ok((Snoop, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        let row = vec![
            Value::from(ev.ts_ns()),
            Value::from(ev.pid()),
            Value::from(ev.tid()),
            Value::Text(ev.comm().into_owned()),
        ];
        out.row(0, row);
    }
}

export_plugin!(Snoop);

//! The smallest useful plugin: who calls openat? (The README's example.)

use wasmtap_sdk::{
    export_plugin, AggOrder, Aggregation, Comm, Counts, Event, Output, Params, Plan, Plugin, PluginInfo, Subscription,
};

#[derive(Default)]
struct Opens {
    by_comm: Counts<Comm>,
}

impl Plugin for Opens {
    fn info() -> PluginInfo {
        PluginInfo::new("opens", "0.1.0", "Who calls openat?", vec![])
    }

    fn start(_: &Params) -> Result<(Self, Plan), String> {
        // `syscall:openat:entry` is filtered in the kernel: other syscalls never reach us.
        Ok((Opens::default(), Plan::new(vec![Subscription::new("syscall:openat:entry")])))
    }

    // Called in a loop inside the plugin over each batch of events: no host call per event.
    fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
        self.by_comm.add(ev.comm_key(), 1);
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        vec![self.by_comm.to_aggregation("opens", "", &["comm"], AggOrder::ValueAscending, 10)]
    }
}

export_plugin!(Opens);

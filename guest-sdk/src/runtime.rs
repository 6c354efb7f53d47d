//! The glue `export_plugin!` expands to: the WIT exports, implemented once over any
//! [`Plugin`]. Not part of the public API; reached only through the macro.

use std::cell::{Cell, RefCell};

use wasmtap_abi::Records;

use crate::output::{HostSink, Sink};
use crate::{Aggregation, Event, Level, Output, Param, Params, Plan, Plugin};

/// The state of one plugin instance. Wasm components are single-threaded, so the
/// macro keeps one `Slot` in a `thread_local!` and calls into it from each export.
pub struct Slot<P> {
    plugin: RefCell<Option<P>>,
    warned_malformed: Cell<bool>,
}

impl<P> Default for Slot<P> {
    fn default() -> Self {
        Slot::new()
    }
}

impl<P> Slot<P> {
    /// Not started.
    pub const fn new() -> Self {
        Slot { plugin: RefCell::new(None), warned_malformed: Cell::new(false) }
    }
}

impl<P: Plugin> Slot<P> {
    /// `start`: a failed start leaves the plugin stopped. Schemas cached for an
    /// earlier plan are forgotten.
    pub fn start(&self, params: Vec<Param>) -> Result<Plan, String> {
        crate::tracepoint::forget_schemas();
        let started = P::start(&Params::new(params));
        let mut slot = self.plugin.borrow_mut();
        match started {
            Ok((plugin, plan)) => {
                *slot = Some(plugin);
                Ok(plan)
            }
            Err(msg) => {
                *slot = None;
                Err(msg)
            }
        }
    }

    /// `on-batch`.
    pub fn on_batch(&self, batch: &[u8]) {
        self.on_batch_to(batch, &mut HostSink);
    }

    /// `on-tick`.
    pub fn on_tick(&self, sub: u32, now_ns: u64) -> Vec<Aggregation> {
        self.on_tick_to(sub, now_ns, &mut HostSink)
    }

    /// `finish`.
    pub fn finish(&self) -> Vec<Aggregation> {
        self.finish_to(&mut HostSink)
    }

    /// Decode every record in place and hand it to the plugin, then flush the output
    /// once. Ignored before a successful `start` and after `finish`.
    fn on_batch_to(&self, batch: &[u8], sink: &mut impl Sink) {
        let mut out = Output::new();
        let mut used = 0;
        {
            let mut slot = self.plugin.borrow_mut();
            let Some(plugin) = slot.as_mut() else { return };
            for rec in Records::new(batch) {
                used += rec.bytes().len();
                if let Some(ev) = Event::new(rec) {
                    plugin.on_event(&ev, &mut out);
                }
            }
            plugin.on_batch_end(&mut out);
        }
        out.flush(sink);
        if used < batch.len() {
            self.warn_malformed(batch.len() - used, sink);
        }
    }

    /// Timer and lifecycle probes. Ignored before a successful `start` and after `finish`.
    fn on_tick_to(&self, sub: u32, now_ns: u64, sink: &mut impl Sink) -> Vec<Aggregation> {
        let mut out = Output::new();
        let aggs = match self.plugin.borrow_mut().as_mut() {
            Some(plugin) => plugin.on_tick(sub, now_ns, &mut out),
            None => Vec::new(),
        };
        out.flush(sink);
        aggs
    }

    /// The plugin is dropped afterwards; later batches are ignored.
    fn finish_to(&self, sink: &mut impl Sink) -> Vec<Aggregation> {
        let Some(mut plugin) = self.plugin.borrow_mut().take() else {
            return Vec::new();
        };
        let mut out = Output::new();
        let aggs = plugin.finish(&mut out);
        out.flush(sink);
        aggs
    }

    /// A batch whose tail does not parse means a host/plugin layout mismatch; say so
    /// once rather than once per batch.
    fn warn_malformed(&self, skipped: usize, sink: &mut impl Sink) {
        if !self.warned_malformed.replace(true) {
            let msg = format!(
                "skipped {skipped} bytes of a malformed or unknown record \
                 (event layout v{}); further occurrences are not reported",
                wasmtap_abi::LAYOUT_VERSION
            );
            sink.log(Level::Warn, &msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records::sys_enter;
    use crate::{PluginInfo, Row, Subscription, Value};

    /// Counts events; prints a row per event and a line per tick.
    struct Probe {
        seen: i64,
    }

    impl Plugin for Probe {
        fn info() -> PluginInfo {
            PluginInfo::new("probe", "0", "", vec![])
        }
        fn start(params: &Params) -> Result<(Self, Plan), String> {
            match params.text("fail") {
                "" => Ok((Probe { seen: 0 }, Plan::new(vec![Subscription::new("x")]))),
                why => Err(why.to_string()),
            }
        }
        fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
            self.seen += 1;
            out.row(0, vec![Value::from(ev.pid())]);
        }
        fn on_tick(&mut self, sub: u32, now_ns: u64, out: &mut Output) -> Vec<Aggregation> {
            out.print(&format!("tick {sub} at {now_ns}\n"));
            let mut c = crate::Counts::new();
            c.add(sub, self.seen);
            vec![c.to_aggregation("seen", "", &["sub"], crate::AggOrder::Key, 0)]
        }
        fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
            let mut c = crate::Counts::new();
            c.add("events", self.seen);
            vec![c.to_aggregation("n", "", &["what"], crate::AggOrder::Key, 0)]
        }
    }

    #[derive(Default)]
    struct Recorder {
        emits: Vec<Vec<Row>>,
        prints: Vec<String>,
        logs: Vec<String>,
    }

    impl Sink for Recorder {
        fn emit(&mut self, rows: &[Row]) {
            self.emits.push(rows.to_vec());
        }
        fn emit_packed(&mut self, rows: &[u8]) {
            self.emits.push(crate::output::unpack(rows));
        }
        fn print(&mut self, text: &str) {
            self.prints.push(text.to_string());
        }
        fn log(&mut self, _level: Level, msg: &str) {
            self.logs.push(msg.to_string());
        }
    }

    fn batch(pids: &[u32]) -> Vec<u8> {
        pids.iter().flat_map(|&pid| sys_enter(pid, 0, [0; 6])).collect()
    }

    #[test]
    fn batches_before_start_or_after_a_failed_start_are_ignored() {
        let slot = Slot::<Probe>::new();
        let mut rec = Recorder::default();
        slot.on_batch_to(&batch(&[1, 2]), &mut rec);
        assert_eq!(slot.start(Params::from_pairs(&[("fail", "no")]).into_list()), Err("no".into()));
        slot.on_batch_to(&batch(&[1, 2]), &mut rec);
        assert!(rec.emits.is_empty() && rec.logs.is_empty());
        assert!(slot.on_tick_to(1, 0, &mut rec).is_empty());
        assert!(slot.finish_to(&mut rec).is_empty());
    }

    #[test]
    fn one_emit_per_batch_and_nothing_after_finish() {
        let slot = Slot::<Probe>::new();
        let mut rec = Recorder::default();
        slot.start(Vec::new()).unwrap();
        slot.on_batch_to(&batch(&[7, 8, 9]), &mut rec);
        slot.on_batch_to(&[], &mut rec);
        assert_eq!(rec.emits.len(), 1);
        assert_eq!(rec.emits[0].len(), 3);
        assert_eq!(rec.emits[0][2].values, vec![Value::Int(9)]);
        slot.on_tick_to(1, 5, &mut rec);
        assert_eq!(rec.prints, vec!["tick 1 at 5\n".to_string()]);
        let aggs = slot.finish_to(&mut rec);
        assert_eq!(aggs[0].entries[0].value, crate::AggValue::Scalar(3));
        slot.on_batch_to(&batch(&[1]), &mut rec);
        assert_eq!(rec.emits.len(), 1);
    }

    #[test]
    fn malformed_tail_is_reported_once_and_good_records_still_count() {
        let slot = Slot::<Probe>::new();
        let mut rec = Recorder::default();
        slot.start(Vec::new()).unwrap();
        let mut bad = batch(&[1, 2]);
        bad.extend_from_slice(&[0xff; 40]);
        slot.on_batch_to(&bad, &mut rec);
        slot.on_batch_to(&bad, &mut rec);
        assert_eq!(rec.emits.iter().map(Vec::len).sum::<usize>(), 4);
        assert_eq!(rec.logs.len(), 1, "{:?}", rec.logs);
        assert!(rec.logs[0].contains("skipped 40 bytes"));
    }

    #[test]
    fn ticks_reach_the_plugin_with_their_subscription_and_time() {
        let slot = Slot::<Probe>::new();
        let mut rec = Recorder::default();
        slot.start(Vec::new()).unwrap();
        slot.on_batch_to(&batch(&[1, 2]), &mut rec);
        let first = slot.on_tick_to(3, 1_000_000_000, &mut rec);
        let second = slot.on_tick_to(0, 2_000_000_000, &mut rec);
        assert_eq!(first[0].entries[0].key, vec![Value::Int(3)]);
        assert_eq!(second[0].entries[0].key, vec![Value::Int(0)]);
        assert_eq!(rec.prints, ["tick 3 at 1000000000\n", "tick 0 at 2000000000\n"]);
        slot.finish_to(&mut rec);
        assert!(slot.on_tick_to(3, 3, &mut rec).is_empty(), "no ticks after finish");
    }

    /// Prints one tracepoint field per event.
    struct Signals;

    impl Plugin for Signals {
        fn info() -> PluginInfo {
            PluginInfo::new("signals", "0", "", vec![])
        }
        fn start(_: &Params) -> Result<(Self, Plan), String> {
            Ok((Signals, Plan::new(vec![Subscription::new("tracepoint:signal:signal_generate")])))
        }
        fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
            if let Event::Tracepoint(tp) = ev {
                out.print(&format!("{:?} ", tp.i64("sig")));
            }
        }
    }

    fn sig_schema(offset: u32) -> crate::ProbeSchema {
        let sig = crate::Field {
            name: "sig".into(),
            c_type: "int".into(),
            kind: crate::FieldType::Signed,
            offset,
            size: 4,
            count: 1,
            signed: true,
        };
        crate::ProbeSchema { probe: "tracepoint:signal:signal_generate".into(), fields: vec![sig], args: vec![] }
    }

    #[test]
    fn tracepoint_fields_decode_with_the_schema_of_the_current_start() {
        let mut entry = [0u8; 16];
        entry[8..12].copy_from_slice(&9i32.to_le_bytes());
        entry[12..16].copy_from_slice(&15i32.to_le_bytes());
        let batch = crate::test_records::tracepoint(1, 0, 200, &entry);
        let slot = Slot::<Signals>::new();
        let mut rec = Recorder::default();

        crate::testing::set_schema(0, sig_schema(8));
        slot.start(Vec::new()).unwrap();
        slot.on_batch_to(&batch, &mut rec);
        // Within one run the layout is fetched once; a new start fetches it again.
        crate::testing::set_schema(0, sig_schema(12));
        slot.on_batch_to(&batch, &mut rec);
        slot.start(Vec::new()).unwrap();
        slot.on_batch_to(&batch, &mut rec);
        assert_eq!(rec.prints, ["Some(9) ", "Some(9) ", "Some(15) "]);
    }
}

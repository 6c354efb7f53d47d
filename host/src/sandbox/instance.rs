//! One running plugin instance: the calls into it, each metered and bounded, and what
//! they hand back checked against the contract's limits.

use super::*;
use crate::wit::previous::Convert;

/// What the calls into one instance cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meter {
    /// CPU time of the host thread while in the plugin, nanoseconds.
    pub cpu_ns: u64,
    /// Longest single call, wall time.
    pub longest: Duration,
    pub calls: u64,
}

/// The exports of an instance, of the version of the world it was built for; calls on
/// a plugin of the previous version convert what crosses.
pub(super) enum Bindings {
    Current(crate::wit::Plugin),
    Previous(previous::Plugin),
}

impl Bindings {
    fn call_info(&self, s: &mut Store<StoreState>) -> wasmtime::Result<types::PluginInfo> {
        match self {
            Bindings::Current(b) => b.call_info(s),
            Bindings::Previous(b) => Ok(b.call_info(s)?.convert()),
        }
    }

    fn call_start(
        &self,
        s: &mut Store<StoreState>,
        params: &[types::Param],
    ) -> wasmtime::Result<Result<types::Plan, String>> {
        match self {
            Bindings::Current(b) => b.call_start(s, params),
            Bindings::Previous(b) => Ok(b.call_start(s, &params.to_vec().convert())?.map(Convert::convert)),
        }
    }

    fn call_on_batch(&self, s: &mut Store<StoreState>, batch: &[u8]) -> wasmtime::Result<()> {
        match self {
            Bindings::Current(b) => b.call_on_batch(s, batch),
            Bindings::Previous(b) => b.call_on_batch(s, batch),
        }
    }

    fn call_on_tick(
        &self,
        s: &mut Store<StoreState>,
        sub: u32,
        now_ns: u64,
    ) -> wasmtime::Result<Vec<types::Aggregation>> {
        match self {
            Bindings::Current(b) => b.call_on_tick(s, sub, now_ns),
            Bindings::Previous(b) => Ok(b.call_on_tick(s, sub, now_ns)?.convert()),
        }
    }

    fn call_finish(&self, s: &mut Store<StoreState>) -> wasmtime::Result<Vec<types::Aggregation>> {
        match self {
            Bindings::Current(b) => b.call_finish(s),
            Bindings::Previous(b) => Ok(b.call_finish(s)?.convert()),
        }
    }
}

/// One running plugin instance.
pub struct Instance {
    pub(super) store: Store<StoreState>,
    pub(super) bindings: Bindings,
    pub(super) limits: Limits,
    pub(super) deadline_ticks: u64,
    pub(super) meter: Meter,
}

impl Instance {
    /// Call one export with a fresh deadline, metering its CPU time; any error is a
    /// fault that names the export.
    fn call<R>(
        &mut self,
        export: &'static str,
        f: impl FnOnce(&Bindings, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        self.store.set_epoch_deadline(self.deadline_ticks);
        let (cpu0, wall0) = (crate::sys::thread_cpu_ns(), Instant::now());
        self.store.data_mut().host.symbolize.deadline = wall0 + self.limits.deadline;
        let r = f(&self.bindings, &mut self.store);
        let elapsed = wall0.elapsed();
        // The symbolizer works on a thread of its own while this one waits: its time is added.
        let symbolizer_ns = std::mem::take(&mut self.store.data_mut().host.symbolize.cpu_ns);
        self.meter.cpu_ns += crate::sys::thread_cpu_ns().saturating_sub(cpu0) + symbolizer_ns;
        self.meter.longest = self.meter.longest.max(elapsed);
        self.meter.calls += 1;
        r.map_err(|e| Fault::from_error(export, &e, &self.store, &self.limits, elapsed))
    }

    /// What the calls so far cost.
    pub fn meter(&self) -> Meter {
        self.meter
    }

    /// `info`.
    pub fn info(&mut self) -> Result<types::PluginInfo, Fault> {
        self.call("info", |b, s| b.call_info(s))
    }

    /// `start`.
    pub fn start(&mut self, params: &[types::Param]) -> Result<Result<types::Plan, String>, Fault> {
        let host = &mut self.store.data_mut().host;
        host.expand_calls = super::host_api::probes::EXPAND_CALLS;
        host.describe_calls = super::host_api::probes::DESCRIBE_CALLS;
        host.strings_calls = super::host_api::probes::STRINGS_CALLS;
        host.strings_asked.clear();
        let plan = self.call("start", |b, s| b.call_start(s, params));
        let host = &mut self.store.data_mut().host;
        host.expand_calls = 0;
        host.describe_calls = 0;
        host.strings_calls = 0;
        plan
    }

    /// The strings the last `start` asked its probes' records to carry
    /// (`probes.user-strings`): (probe, pointer fields).
    pub fn strings_asked(&self) -> Vec<(String, Vec<String>)> {
        self.store.data().host.strings_asked.clone()
    }

    /// `on-batch`.
    pub fn on_batch(&mut self, batch: &[u8]) -> Result<(), Fault> {
        self.call("on-batch", |b, s| b.call_on_batch(s, batch))
    }

    /// `on-tick` for subscription `sub`.
    pub fn on_tick(&mut self, sub: u32, now_ns: u64) -> Result<Vec<types::Aggregation>, Fault> {
        let aggs = self.call("on-tick", |b, s| b.call_on_tick(s, sub, now_ns))?;
        self.check_state("on-tick", aggs)
    }

    /// `finish`.
    pub fn finish(&mut self) -> Result<Vec<types::Aggregation>, Fault> {
        let aggs = self.call("finish", |b, s| b.call_finish(s))?;
        self.check_state("finish", aggs)
    }

    /// Reports larger than the plugin's state limit, or with an entry larger than any
    /// entry may be, are a fault: the host sorts and formats every part of them.
    fn check_state(
        &self,
        callback: &'static str,
        aggs: Vec<types::Aggregation>,
    ) -> Result<Vec<types::Aggregation>, Fault> {
        let fault = |reason: String| Fault {
            callback,
            kind: FaultKind::Output,
            reason,
            backtrace: None,
            elapsed: Duration::ZERO,
        };
        let entries: usize = aggs.iter().map(|a| a.entries.len()).sum();
        if entries > self.limits.state_entries {
            return Err(fault(format!(
                "reported {entries} aggregation entries, more than its state limit of {}",
                self.limits.state_entries
            )));
        }
        for agg in &aggs {
            if let Some(why) = agg.entries.iter().find_map(entry_too_large) {
                return Err(fault(format!("reported an entry of @{} with {why}", crate::wit::printable(&agg.name))));
            }
        }
        Ok(aggs)
    }

    /// Answer the plugin's `read-aggregation` calls with `aggs`.
    pub fn set_aggregates(&mut self, aggs: Box<dyn Aggregates>) {
        self.store.data_mut().host.aggregates = Some(aggs);
    }

    /// The schemas `probes.schema` answers with, by subscription index.
    pub fn set_schemas(&mut self, schemas: Vec<Option<types::ProbeSchema>>) {
        self.store.data_mut().host.schemas = schemas;
    }

    /// The processes `services.symbolize` may name for this plugin.
    pub fn set_symbol_scope(&mut self, scope: SharedScope) {
        self.store.data_mut().host.symbolize.scope = scope;
    }

    /// Bytes of linear memory and tables the instance holds (they never shrink).
    pub fn memory_bytes(&self) -> u64 {
        self.store.data().limits.used() as u64
    }

    /// Set the time `monotonic-ns`/`wall-ns` report (replay drives it from the recording).
    pub fn set_clock(&mut self, clock: Clock) {
        self.store.data_mut().host.clock = clock;
    }

    /// Output bytes the plugin may still produce before what it emits is dropped (and counted).
    pub fn set_output_budget(&mut self, bytes: u64) {
        self.store.data_mut().host.set_output_budget(bytes);
    }

    /// Take what the plugin emitted since the last call.
    pub fn take_output(&mut self) -> GuestOutput {
        self.store.data_mut().host.take_output()
    }
}

/// Parts of one aggregation entry: key values, stack frames, histogram buckets, percentiles.
pub const ENTRY_KEYS: usize = 16;
pub const ENTRY_FRAMES: usize = 1024;
pub const ENTRY_BUCKETS: usize = 4096;
pub const ENTRY_PERCENTILES: usize = 256;

/// What makes an entry larger than any may be, if anything.
pub(super) fn entry_too_large(e: &types::AggEntry) -> Option<String> {
    let over = |what: &str, n: usize, max: usize| (n > max).then(|| format!("{n} {what}, more than the {max} allowed"));
    let frames = e.key.iter().map(|v| if let types::Value::Stack(f) = v { f.len() } else { 0 }).max().unwrap_or(0);
    let parts = match &e.value {
        types::AggValue::Scalar(_) => None,
        types::AggValue::Histogram(h) => over("histogram buckets", h.buckets.len(), ENTRY_BUCKETS),
        types::AggValue::Quantiles(q) => over("percentiles", q.points.len(), ENTRY_PERCENTILES),
    };
    over("key values", e.key.len(), ENTRY_KEYS).or_else(|| over("stack frames", frames, ENTRY_FRAMES)).or(parts)
}

pub(super) fn first_line(s: &str) -> String {
    truncate(s.lines().next().unwrap_or(""), 400)
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

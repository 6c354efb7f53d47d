//! Write wasmtap tracing plugins in Rust.
//!
//! A plugin is a WebAssembly component that the `wasmtap` host feeds with kernel
//! events. It implements [`Plugin`] and exports it with [`export_plugin!`]; the SDK
//! does the rest: it implements the WIT world `wasmtap:plugin/plugin@0.1.0`, keeps the
//! plugin's state between calls, decodes each batch of events in place (no copy, no
//! host call per event) and sends everything the plugin wrote to its [`Output`] to
//! the host in one call per batch.
//!
//! The life of a plugin:
//!
//! 1. [`Plugin::info`] names it and declares its parameters ([`ParamSpec`]).
//! 2. [`Plugin::start`] reads the validated [`Params`] and returns the plugin's state
//!    and a [`Plan`]: which probes to subscribe to (with kernel-side filters and
//!    predicates, and the stacks to record: [`Subscription`]'s builders) and which
//!    tables it will print rows into. Timers are subscriptions too:
//!    `Subscription::new("interval:s:1")`, `"begin"`, `"end"`.
//! 3. [`Plugin::on_event`] sees each [`Event`]; [`Plugin::on_tick`] runs when a timer
//!    or `begin`/`end` subscription fires and may return [`Aggregation`]s to print now.
//! 4. [`Plugin::finish`] returns the final aggregations.
//!
//! Build with the workspace's `wasm` profile for `wasm32-wasip2`; rustc emits the
//! component directly:
//!
//! ```text
//! cargo build --profile wasm --target wasm32-wasip2 -p myplugin
//! wasmtap run target/wasm32-wasip2/wasm/myplugin.wasm
//! ```
//!
//! The plugin crate is a `cdylib` that depends on this crate under its own name,
//! `wasmtap_sdk` (the generated export code refers to it by that path).
//!
//! # Example: who calls exec, and who fails to
//!
//! ```no_run
//! use wasmtap_sdk::{
//!     export_plugin, AggOrder, Aggregation, Comm, Counts, Event, Output, ParamKind, ParamSpec,
//!     Params, Plan, Plugin, PluginInfo, Subscription,
//! };
//!
//! struct ExecCount {
//!     top: u32,
//!     ok: Counts<Comm>,
//!     failed: Counts<Comm>,
//! }
//!
//! impl Plugin for ExecCount {
//!     fn info() -> PluginInfo {
//!         let top = ParamSpec::new("top", ParamKind::Integer, "10", "entries to show");
//!         PluginInfo::new("execcount", "0.1.0", "Which programs run, and which fail to?", vec![top])
//!     }
//!
//!     fn start(params: &Params) -> Result<(Self, Plan), String> {
//!         let top = u32::try_from(params.int("top")).map_err(|_| "top: must be >= 0")?;
//!         let me = ExecCount { top, ok: Counts::new(), failed: Counts::new() };
//!         Ok((me, Plan::new(vec![Subscription::new("proc:exec")])))
//!     }
//!
//!     fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
//!         if let Event::Exec(exec) = ev {
//!             let counts = if exec.ret() < 0 { &mut self.failed } else { &mut self.ok };
//!             counts.add(ev.comm_key(), 1);
//!         }
//!     }
//!
//!     fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
//!         let order = AggOrder::ValueAscending;
//!         vec![
//!             self.ok.to_aggregation("exec", "", &["comm"], order, self.top),
//!             self.failed.to_aggregation("failed", "", &["comm"], order, self.top),
//!         ]
//!     }
//! }
//!
//! export_plugin!(ExecCount);
//! ```
//!
//! The host prints the result bpftrace-style (`@exec[sh]: 12`).
//!
//! # Example: any tracepoint, by its fields
//!
//! A `tracepoint:CAT:NAME` event is the kernel's raw entry ([`Tracepoint`]); the SDK
//! decodes its fields with the layout the host read from tracefs, fetched once per
//! subscription. Predicates on numeric fields run in the kernel.
//!
//! ```no_run
//! use wasmtap_sdk::{
//!     export_plugin, AggOrder, Aggregation, CmpOp, Comm, Counts, Event, LazyField, Output,
//!     Params, Plan, Plugin, PluginInfo, Subscription,
//! };
//!
//! /// Who sends SIGKILL, to which programs? (bpftrace's `killsnoop`, counted.)
//! struct Kills {
//!     target: LazyField,
//!     by_sender: Counts<(Comm, String)>,
//! }
//!
//! impl Plugin for Kills {
//!     fn info() -> PluginInfo {
//!         PluginInfo::new("kills", "0.1.0", "Who sends SIGKILL, to whom?", vec![])
//!     }
//!
//!     fn start(_: &Params) -> Result<(Self, Plan), String> {
//!         let sub = Subscription::new("tracepoint:signal:signal_generate").when("sig", CmpOp::Eq, 9);
//!         let me = Kills { target: LazyField::new("comm"), by_sender: Counts::new() };
//!         Ok((me, Plan::new(vec![sub])))
//!     }
//!
//!     fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
//!         let Event::Tracepoint(tp) = ev else { return };
//!         // By name: `tp.str("comm")`. Through a LazyField the name is looked up once.
//!         let target = self.target.get(tp).map(|v| v.to_string()).unwrap_or_default();
//!         self.by_sender.add((ev.comm_key(), target), 1);
//!     }
//!
//!     fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
//!         let keys = ["sender", "target"];
//!         vec![self.by_sender.to_aggregation("kills", "", &keys, AggOrder::ValueAscending, 0)]
//!     }
//! }
//!
//! export_plugin!(Kills);
//! ```
//!
//! # Aggregations
//!
//! [`Agg`] is DTrace's aggregations, computed in the plugin with no host call per
//! event: `count`, `sum`, `avg`, `min`, `max`, `stddev`, the `quantize`, `lquantize`
//! and `llquantize` histograms, and percentiles (within 1 %). It keeps a bounded
//! number of keys and reports what it had to drop ([`Eviction`]). [`Counts`] is the
//! plain `count()`/`sum()` map. The classic periodic report, DTrace's
//! `tick-1s { printa(@); clear(@); }`:
//!
//! ```no_run
//! use wasmtap_sdk::{
//!     export_plugin, Agg, AggOrder, Aggregation, Comm, Event, Output, Params, Plan, Plugin, PluginInfo,
//!     Subscription,
//! };
//!
//! /// How many bytes does each read return, by program, second by second?
//! struct ReadSizes {
//!     bytes: Agg<Comm>,
//! }
//!
//! impl Plugin for ReadSizes {
//!     fn info() -> PluginInfo {
//!         PluginInfo::new("readsize", "0.1.0", "How large are reads?", vec![])
//!     }
//!
//!     fn start(_: &Params) -> Result<(Self, Plan), String> {
//!         let subs = vec![Subscription::new("syscall:read:exit"), Subscription::new("interval:s:1")];
//!         Ok((ReadSizes { bytes: Agg::quantize() }, Plan::new(subs)))
//!     }
//!
//!     fn on_event(&mut self, ev: &Event<'_>, _out: &mut Output) {
//!         if let Event::SysExit(read) = ev {
//!             self.bytes.add(ev.comm_key(), read.ret()); // @bytes[comm] = quantize(ret)
//!         }
//!     }
//!
//!     fn on_tick(&mut self, _sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
//!         let report = self.bytes.to_aggregation("bytes", "", &["comm"], AggOrder::Key, 0);
//!         self.bytes.clear(); // keys stay, values restart from zero; trunc(0) forgets the keys
//!         vec![report]
//!     }
//! }
//!
//! export_plugin!(ReadSizes);
//! ```
//!
//! Aggregations the kernel computes (declared in the [`Plan`], see
//! [`KernelAggregation`]) arrive as snapshots from [`read_aggregation`]; fold one into
//! an [`Agg`] with [`Agg::merge_entries`] to translate its keys (a syscall number into
//! its name), or report it as it is with [`from_entries`]. [`Plan::aggregate`]
//! declares one and hands back its [`AggId`], which reads it.
//!
//! # What every plugin needs
//!
//! - [`Params::choice`] and [`Params::choices`]: a text parameter that names one
//!   option (`mode=kernel`) or several (`stacks=kernel,user`), checked, with the
//!   error message users see for a typo.
//! - [`Interval`]: a `duration` parameter as a report timer (`interval=1s`), and
//!   whether a tick is its own.
//! - [`BoundedMap`] and [`BoundedSet`]: state per pid or tid that cannot grow without
//!   limit, and counts what it had to refuse.
//!
//! ```
//! use wasmtap_sdk::{AggSource, BoundedMap, Interval, KernelAggregation, Params, Plan};
//! let params = Params::from_pairs(&[("mode", "kernel"), ("interval", "1000000000")]);
//! let in_kernel = params.choice("mode", &[("kernel", true), ("stream", false)])?;
//! let mut subs = Vec::new();
//! let interval = Interval::optional(&params, "interval", &mut subs)?;
//! let mut plan = Plan::new(subs);
//! let by_comm = in_kernel.then(|| plan.aggregate(KernelAggregation::count("c", "proc:exec").by(AggSource::Comm)));
//! let entered: BoundedMap<u32, u64> = BoundedMap::new(); // tid → entry time, 65,536 threads at most
//! assert!(interval.fired(0) && by_comm.is_some() && entered.is_empty());
//! # Ok::<(), String>(())
//! ```
//!
//! # Stacks
//!
//! Ask for stacks with [`Subscription::stacks`]; [`Event::stack`] turns an event's into
//! a [`Stack`] key for [`Counts`] or [`Agg`], and [`Counts::to_stack_aggregation`] or
//! [`Agg::to_stack_aggregation`] symbolizes the reported stacks in as few host calls as
//! possible; the host prints them bpftrace-style, folded for `flamegraph.pl`, or as a
//! flame graph. [`symbolize`], [`render_stack`] and [`render_folded`] ([`StackStyle`])
//! are there for anything else.
//!
//! ```
//! use wasmtap_sdk::{Counts, Event, Stack};
//! fn on_event(profile: &mut Counts<Stack>, ev: &Event<'_>) {
//!     if let Some(stack) = ev.stack() {
//!         profile.add(stack, 1); // @[kstack, ustack] = count()
//!     }
//! }
//! ```
//!
//! # What a plugin can reach
//!
//! Only the host's interface: rows and text through [`Output`], diagnostics through
//! [`log`], the clocks ([`monotonic_ns`], [`wall_ns`]), its subscriptions' layouts
//! ([`schema`]), symbols ([`symbolize`]) and its kernel aggregations
//! ([`read_aggregation`]). There are no files, no network, no environment. Keep maps
//! on [`FxHashMap`], [`BoundedMap`], [`Counts`] or [`Agg`]: `std`'s default hasher
//! would pull in `wasi:random`.
//!
//! # Testing a plugin
//!
//! A plugin's unit tests run natively (`cargo test`), where there is no host:
//! [`Params::from_pairs`] builds parameters, [`Output::rows`] and [`Output::text`] show
//! what it printed, and `testing` stands in for the host's `schema`, `symbolize` and
//! `read-aggregation` and keeps what the plugin logs. [`test_records`] builds records
//! of every kind as the collectors write them; `Event::new(Record::new(&bytes))` views one.

mod agg;
mod bounded;
mod civil;
mod counts;
mod event;
mod imports;
mod interval;
mod kernel;
mod output;
mod params;
pub mod procs;
#[cfg(test)]
mod prop_tests;
mod runtime;
mod stack;
pub mod syscalls;
pub mod test_records;
mod tracepoint;
mod types;
#[cfg(test)]
mod vectors;

// The generated code names this crate by path so that plugin crates, where
// `export_plugin!` expands, can reach it without depending on wit-bindgen.
extern crate self as wasmtap_sdk;

/// Bindings generated from `wit/` (`wasmtap:plugin@0.2.0`). Plugins use the re-exports below.
#[doc(hidden)]
#[allow(unsafe_code, reason = "wit-bindgen's canonical-ABI glue; generated, not written")]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "wasmtap:plugin/plugin@0.2.0",
        pub_export_macro: true,
        export_macro_name: "__export_world",
        default_bindings_module: "wasmtap_sdk::bindings",
        runtime_path: "wasmtap_sdk::__rt",
        additional_derives: [PartialEq, Eq, PartialOrd, Ord, Hash],
    });
}

#[doc(hidden)]
pub use wit_bindgen::rt as __rt;

pub use agg::{from_entries, Agg, Eviction};
pub use bindings::wasmtap::plugin::aggregations::{
    AggEntry, AggKind, AggOrder, AggValue, Aggregation, Bucket, Histogram, Percentile, Quantiles,
};
pub use bindings::wasmtap::plugin::kernel_aggregations::{
    AggSource, Correlation, KernelAggregation, KernelFunction, LinearBuckets, MoreStart, StartEvent,
};
pub use bindings::wasmtap::plugin::lifecycle::{Param, ParamKind, ParamSpec, Plan, PluginInfo};
pub use bindings::wasmtap::plugin::output::{Column, ColumnKind, Row, TableSpec, Value};
pub use bindings::wasmtap::plugin::probes::{
    CmpOp, Field, FieldType, Filter, Predicate, ProbeSchema, StackMode, Subscription,
};
pub use bindings::wasmtap::plugin::services::{Frame, Level, StackRequest};
pub use bounded::{BoundedMap, BoundedSet, BOUNDED_MAX};
pub use civil::{civil, Civil};
pub use counts::{Counts, FxBuildHasher, FxHashMap, FxHashSet, FxHasher, Key};
pub use event::{Args, Comm, Event, Exec, Exit, Fork, Open, Sample, SysEnter, SysExit, Syscall, UserProbe, AT_FDCWD};
#[cfg(not(target_arch = "wasm32"))]
pub use imports::testing;
pub use imports::{describe, exit, expand, read_aggregation, user_strings};
pub use interval::Interval;
pub use kernel::AggId;
pub use output::Output;
pub use params::Params;
pub use stack::{render_folded, render_stack, symbolize, Stack, StackStyle, SYMBOLIZE_MAX_ADDRS};
pub use tracepoint::{schema, FieldRef, FieldValue, IntArray, LazyField, Schema, Tracepoint};
pub use wasmtap_abi as abi;
pub use wasmtap_abi::{Frames, Record};

use bindings::wasmtap::plugin::services;

/// A wasmtap plugin. Implement it on your state and export it with [`export_plugin!`].
pub trait Plugin: Sized + 'static {
    /// Name, version, one-line description and parameters. Called before `start`,
    /// and perhaps without ever starting (`wasmtap run PLUGIN --help`).
    fn info() -> PluginInfo;

    /// Start with the parameters the host validated against `info().params`; return
    /// the state and what to trace, or a message for the user (`Err("syscall: no
    /// syscall named 'opne'")`).
    fn start(params: &Params) -> Result<(Self, Plan), String>;

    /// One event from one of the plan's subscriptions ([`Event::sub`] says which).
    /// Runs in a loop over each batch; rows and text written to `out` reach the host
    /// when the batch is done.
    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output);

    /// The batch whose events [`on_event`](Plugin::on_event) just saw is done: a place
    /// for per-batch work (flushing a buffer, checking a budget of one's own).
    fn on_batch_end(&mut self, _out: &mut Output) {}

    /// A timer or lifecycle probe of the plan fired: subscription `sub` (its index in
    /// the plan) is an `interval:ms:N` / `interval:s:N` timer, `begin` (every probe is
    /// attached) or `end` (just before [`finish`](Plugin::finish)); `now_ns` is
    /// CLOCK_MONOTONIC. Return the aggregations to print now (the classic
    /// `interval:s:1 { print(@); clear(@); }`).
    fn on_tick(&mut self, _sub: u32, _now_ns: u64, _out: &mut Output) -> Vec<Aggregation> {
        Vec::new()
    }

    /// The end of the trace: return the final aggregations. The plugin is dropped
    /// afterwards.
    fn finish(&mut self, _out: &mut Output) -> Vec<Aggregation> {
        Vec::new()
    }
}

/// Export a [`Plugin`] implementation as this component's `wasmtap:plugin/plugin`
/// world. Use it once, at the plugin crate's top level: `export_plugin!(MyPlugin);`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        const _: () = {
            ::std::thread_local! {
                static SLOT: $crate::__private::Slot<$plugin> =
                    const { $crate::__private::Slot::new() };
            }

            struct WasmtapExports;

            impl $crate::bindings::Guest for WasmtapExports {
                fn info() -> $crate::PluginInfo {
                    <$plugin as $crate::Plugin>::info()
                }
                fn start(
                    params: ::std::vec::Vec<$crate::Param>,
                ) -> ::core::result::Result<$crate::Plan, ::std::string::String> {
                    SLOT.with(|slot| slot.start(params))
                }
                fn on_batch(batch: ::std::vec::Vec<u8>) {
                    SLOT.with(|slot| slot.on_batch(&batch))
                }
                fn on_tick(sub: u32, now_ns: u64) -> ::std::vec::Vec<$crate::Aggregation> {
                    SLOT.with(|slot| slot.on_tick(sub, now_ns))
                }
                fn finish() -> ::std::vec::Vec<$crate::Aggregation> {
                    SLOT.with(|slot| slot.finish())
                }
            }

    $crate::bindings::__export_world!(WasmtapExports with_types_in $crate::bindings);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::runtime::Slot;
}

/// Send a diagnostic to the user's stderr, tagged with the plugin's name. This is a
/// host call: use it for rare conditions, not per event.
pub fn log(level: Level, msg: &str) {
    imports::log(level, msg);
}

/// Nanoseconds of CLOCK_MONOTONIC, the clock of [`Event::ts_ns`] (replay: the recorded clock).
pub fn monotonic_ns() -> u64 {
    services::monotonic_ns()
}

/// Nanoseconds since the Unix epoch (replay: the recorded clock).
pub fn wall_ns() -> u64 {
    services::wall_ns()
}

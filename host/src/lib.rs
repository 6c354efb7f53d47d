//! wasmtap: a tracing runtime for Linux. Vetted eBPF collectors feed kernel events,
//! filtered in the kernel, to WebAssembly plugins that run in a bounded sandbox.
//!
//! Modules, with dependencies pointing one way (`cli → {collect, pipeline, plugin, output}`,
//! `plugin → {sandbox, output}`): [`collect`] is the only module touching BPF, [`sandbox`]
//! the only one configuring wasmtime, [`output`] the only one printing, and [`sys`] the
//! only one with `unsafe`.

pub mod agg;
pub mod cli;
pub mod collect;
pub mod drops;
pub mod output;
pub mod pipeline;
pub mod plugin;
pub mod private;
pub mod privilege;
pub mod sandbox;
pub mod symbolize;
pub mod sys;
pub mod watchdog;

//! wasmtap: a tracing runtime for Linux. Vetted eBPF collectors feed kernel events,
//! filtered in the kernel, to WebAssembly plugins that run in a bounded sandbox.
//!
//! # Layers
//!
//! Every module uses only modules of lower layers (`host/tests/layers.rs` fails the build's
//! tests otherwise), so each can be read, tested and later moved to a process of its own
//! without what sits above it:
//!
//! | layer | modules | what lives there |
//! |---|---|---|
//! | 8 | [`cli`] | the command line: parses, starts a run or a replay, privileges |
//! | 7 | [`service`] | the shared host: the daemon, its wire protocol, a tenant's rule, the client |
//! | 6 | [`pipeline`] | the run loop: chunks from an event source to the plugins, ticks, the end |
//! | 5 | [`plugin`] | each plugin's lifecycle: plan, subscriptions, dispatch in batches, budgets, faults, restarts |
//! | 4 | [`kernel_agg`], [`export`] | kernel aggregations: compiled from plugins' requests, evaluated from maps or recordings; fleet export: running totals of the plugins' reports, served to Prometheus and pushed over OTLP |
//! | 3 | [`collect`], [`sandbox`], [`output`], [`drops`] | events from the collectors (the only BPF) or a recording; wasmtime (the only engine setup); printing (fed plain data); live loss reports |
//! | 2 | [`accounting`], [`package`] | where every event went, what the run cost; plugin packages: manifests, signatures, the trust policy |
//! | 1 | [`wit`], [`clock`], [`limits`], [`private`], [`privilege`], [`symbolize`], [`watchdog`], [`policy`] | the contract's types, the plugin's clock, limits and fault kinds, private files, capabilities, symbols, the run's watchdog, the shared host's policy |
//! | 0 | [`sys`] | system calls |
//!
//! `unsafe` is denied everywhere but in [`sys`] and in `sandbox/cache/deserialize.rs`, whose
//! one call loads a compiled plugin the cache has proven it wrote. Every `unsafe` block
//! there carries a `SAFETY:` comment (`clippy::undocumented_unsafe_blocks` is denied).

pub mod accounting;
pub mod cli;
pub mod clock;
pub mod collect;
pub mod drops;
pub mod export;
pub mod kernel_agg;
pub mod limits;
pub mod output;
pub mod package;
pub mod pipeline;
pub mod plugin;
pub mod policy;
pub mod private;
pub mod privilege;
pub mod sandbox;
pub mod service;
pub mod symbolize;
pub mod sys;
pub mod watchdog;
pub mod wit;

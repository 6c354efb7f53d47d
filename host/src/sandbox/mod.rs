//! The only module that configures wasmtime: one engine, one store per plugin, memory and
//! instance caps, a deadline per call (epoch interruption) and a capability allow-list.
//!
//! A plugin sees the `wasmtap:plugin/host` interface and, because Rust's `wasm32-wasip2`
//! standard library always imports them, the WASI cli/io/clocks/random interfaces with a
//! context that grants nothing: no preopened directories, no environment, no arguments,
//! no network. A component importing anything else (files, sockets, http) is refused
//! at load time.

pub mod cache;
mod host_api;
pub mod limiter;
pub mod packed;
pub mod symbolize;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker, ResourceTable, WasmList};
use wasmtime::{AsContextMut, Config, Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use cache::{Cache, Outcome};
use limiter::PluginLimiter;

use crate::wit::types;
use crate::wit::{Plugin, PluginPre};

use crate::clock::Clock;
use crate::limits::{FaultKind, Limits};
pub use host_api::{GuestItem, GuestOutput, LogLine};
pub use symbolize::{Answer, SharedScope, Symbols, SymbolsError};

/// What answers a plugin's `read-aggregation` calls: the kernel collector's maps, or
/// the host's evaluation of a recording.
pub trait Aggregates: Send {
    /// A snapshot of the plugin's aggregation `id`; with `reset`, the next starts from zero.
    fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, String>;
}

/// The symbol source every plugin of a sandbox shares.
pub type SharedSymbols = Arc<Mutex<Option<Box<dyn Symbols>>>>;

/// How often the engine's epoch advances; deadlines are whole ticks.
pub const TICK: Duration = Duration::from_millis(5);
/// Bytes the host copies out of a plugin in one call (arguments of a host call, or the
/// results of an export), counted as wasmtime lifts them, before anything is allocated
/// past it: a list of strings that all point at one big buffer costs its real size.
pub const COPY_BYTES_PER_CALL: usize = 64 << 20;
/// Frames of a wasm backtrace kept in a fault message.
const BACKTRACE_FRAMES: usize = 6;
/// Bytes of a guest's stderr kept for fault messages (Rust panics print there).
const STDERR_CAPACITY: usize = 64 * 1024;
/// WASI resources (streams, pollables) a plugin may hold at once; Rust's standard
/// library needs a handful.
const WASI_RESOURCES: usize = 1024;
/// Bytes one `wasi:random` call may ask for; Rust's standard library asks for 16.
const RANDOM_BYTES_PER_CALL: u64 = 64 << 10;

/// Interfaces a plugin may import. Everything else is refused at load time.
const ALLOWED_IMPORTS: &[&str] = &[
    "wasmtap:plugin/",
    "wasi:io/",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-",
    "wasi:clocks/",
    "wasi:random/",
];

/// Why a plugin could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot read plugin {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a WebAssembly component: {reason}")]
    NotAComponent { path: PathBuf, reason: String },
    #[error("{path} imports `{import}`, which plugins are not granted (allowed: wasmtap:plugin/host and WASI cli, io, clocks, random; no files, sockets or http)")]
    ForbiddenImport { path: PathBuf, import: String },
    #[error("{path} is not a wasmtap plugin (world wasmtap:plugin/plugin@0.1.0): {reason}")]
    WrongWorld { path: PathBuf, reason: String },
    #[error("plugin {path} is too large: {bytes} bytes (at most {max})")]
    TooLarge { path: PathBuf, bytes: u64, max: u64 },
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
}

impl Limits {
    /// The deadline in epoch ticks, at least one. A call is interrupted when that many
    /// ticks have passed since it began, so after `(ticks - 1) * TICK` at the earliest
    /// and `ticks * TICK` plus the ticker's lateness at the latest.
    fn deadline_ticks(&self) -> u64 {
        (self.deadline.as_millis() as u64 / TICK.as_millis() as u64).max(1)
    }
}

/// The engine every plugin runs in, and the thread that advances its epoch.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<StoreState>,
    ticker_stop: Arc<AtomicBool>,
    symbols: SharedSymbols,
    cache: Cache,
}

impl Sandbox {
    /// Build the engine and the linker with the host API.
    pub fn new() -> Result<Sandbox, SandboxError> {
        let engine_err = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
        let mut config = Config::new();
        config.epoch_interruption(true);
        // Per-call overhead drops from ~650 to ~170 ns without the async machinery.
        config.concurrency_support(false);
        // No plugin toolchain (Rust, C, Python, JavaScript) emits a core module with more
        // than one memory; the limiter sums memories across core instances anyway.
        config.wasm_multi_memory(false);
        let engine = Engine::new(&config).map_err(engine_err)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(engine_err)?;
        refuse_blocking(&mut linker).map_err(engine_err)?;
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(engine_err)?;
        symbolize_counted_first(&mut linker).map_err(engine_err)?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (eng, stop) = (engine.clone(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("wasmtap-epoch".into())
            .spawn(move || {
                // Real-time where allowed, so that deadlines hold on a busy machine; ticks
                // on an absolute schedule, so that sleeps that overshoot do not add up.
                crate::sys::set_realtime();
                let mut next = Instant::now() + TICK;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    eng.increment_epoch();
                    next = (next + TICK).max(Instant::now());
                }
            })
            .map_err(|e| SandboxError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Sandbox { engine, linker, ticker_stop, symbols: Arc::default(), cache: Cache::from_env() })
    }

    /// Answer plugins' `symbolize` calls with `symbols` from now on.
    pub fn set_symbols(&self, symbols: Box<dyn Symbols>) {
        *self.symbols.lock().unwrap_or_else(|e| e.into_inner()) = Some(symbols);
    }

    /// Keep compiled plugins in `cache` from now on (the default comes from the environment).
    pub fn set_cache(&mut self, cache: Cache) {
        self.cache = cache;
    }

    /// Compile (or take from the cache) and type-check a plugin file.
    pub fn load(&self, path: &Path) -> Result<LoadedPlugin, SandboxError> {
        let bytes = cache::read_plugin(path)?;
        let digest = cache::sha256(&bytes);
        let (component, outcome) = self
            .cache
            .component_with_digest(&self.engine, &bytes, &digest)
            .map_err(|e| SandboxError::NotAComponent { path: path.into(), reason: first_line(&format!("{e:#}")) })?;
        for (name, _) in component.component_type().imports(&self.engine) {
            if !ALLOWED_IMPORTS.iter().any(|allowed| name.starts_with(allowed)) {
                return Err(SandboxError::ForbiddenImport { path: path.into(), import: name.to_string() });
            }
        }
        let wrong =
            |e: wasmtime::Error| SandboxError::WrongWorld { path: path.into(), reason: first_line(&format!("{e:#}")) };
        let pre = self.linker.instantiate_pre(&component).map_err(wrong)?;
        let pre = PluginPre::new(pre).map_err(wrong)?;
        Ok(LoadedPlugin { pre, path: path.into(), symbols: self.symbols.clone(), digest, outcome })
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// A compiled, type-checked plugin, ready to be instantiated any number of times.
pub struct LoadedPlugin {
    pre: PluginPre<StoreState>,
    path: PathBuf,
    symbols: SharedSymbols,
    digest: cache::Digest,
    outcome: Outcome,
}

impl LoadedPlugin {
    /// The file the plugin came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sha-256 of the plugin file's bytes.
    pub fn digest(&self) -> cache::Digest {
        self.digest
    }

    /// Whether the compiled code came from the cache.
    pub fn cache_outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// A fresh instance in a store of its own, bounded by `limits`.
    pub fn instantiate(&self, clock: Clock, limits: &Limits) -> Result<Instance, Fault> {
        let mut store = new_store(self.pre.engine(), clock, limits, self.symbols.clone());
        let deadline_ticks = limits.deadline_ticks();
        let started = Instant::now();
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| Fault::from_error("instantiate", &e, &store, limits, started.elapsed()))?;
        Ok(Instance { store, bindings, limits: limits.clone(), deadline_ticks, meter: Meter::default() })
    }
}

/// Start the Tokio runtime wasmtime-wasi runs some WASI calls on (a plugin's writes to
/// its stderr), which it otherwise starts on first use, from whichever thread that is.
pub fn start_wasi_runtime() {
    wasmtime_wasi::runtime::in_tokio(async {});
}

/// A store bounded by `limits`: one memory cap summed over every memory and table,
/// counts of instances, tables and memories, WASI resources and random bytes, the
/// copy cap, and the deadline.
fn new_store(engine: &Engine, clock: Clock, limits: &Limits, symbols: SharedSymbols) -> Store<StoreState> {
    let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
    let wasi = WasiCtx::builder()
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .max_random_size(RANDOM_BYTES_PER_CALL)
        .build();
    let mut table = ResourceTable::new();
    table.set_max_capacity(WASI_RESOURCES);
    let mut state = StoreState {
        wasi,
        table,
        limits: PluginLimiter::new(limits.memory_bytes, limits.instances),
        stderr,
        host: host_api::HostState::new(clock, symbols),
    };
    state.host.symbolize.kernel_allowed = limits.kernel_symbols;
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_hostcall_fuel(COPY_BYTES_PER_CALL);
    store.set_epoch_deadline(limits.deadline_ticks());
    store
}

/// `wasi:io/poll` would let a plugin sleep inside the host, where the deadline cannot
/// reach it (epochs interrupt wasm code only). Plugins get the rest of WASI io, but
/// waiting traps at once.
fn refuse_blocking(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance("wasi:io/poll@0.2.12")?;
    for name in ["poll", "[method]pollable.block"] {
        poll.func_new(name, move |_, _, _, _| Err(wasmtime::Error::new(Blocked(name))))?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// `host.symbolize` as bindgen makes it copies every request out of the plugin before the
/// host sees one: a million empty requests cost the host 32 MiB before it can refuse them.
/// This one takes the list where it lies in the plugin's memory, counts it, and copies the
/// requests only when there are few enough.
fn symbolize_counted_first(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut host = linker.instance("wasmtap:plugin/host@0.1.0")?;
    host.func_wrap(
        "symbolize",
        |mut store: wasmtime::StoreContextMut<'_, StoreState>, (stacks,): (WasmList<types::StackRequest>,)| {
            symbolize::check_count(stacks.len()).map_err(wasmtime::Error::new)?;
            let stacks: Vec<types::StackRequest> = stacks.iter(store.as_context_mut())?.collect::<Result<_, _>>()?;
            let frames = store.data_mut().host.symbolize.answer(&stacks).map_err(wasmtime::Error::new)?;
            Ok((frames,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// A plugin tried to wait in a host call.
#[derive(Debug)]
struct Blocked(&'static str);

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tried to block in the host (wasi:io/poll {}); plugins may not sleep or wait", self.0)
    }
}

impl std::error::Error for Blocked {}

/// What the store of one plugin holds.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: PluginLimiter,
    stderr: MemoryOutputPipe,
    host: host_api::HostState,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A plugin call that failed: the instance is unusable afterwards.
#[derive(Clone, Debug)]
pub struct Fault {
    /// The export being called (`on-batch`…).
    pub callback: &'static str,
    pub kind: FaultKind,
    /// What went wrong, for the user.
    pub reason: String,
    /// The innermost wasm frames, when wasmtime captured them.
    pub backtrace: Option<String>,
    /// How long the call ran before it was stopped.
    pub elapsed: Duration,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in {}: {}", self.callback, self.reason)?;
        if let Some(bt) = &self.backtrace {
            write!(f, " [wasm backtrace: {bt}]")?;
        }
        Ok(())
    }
}

impl Fault {
    fn from_error(
        callback: &'static str,
        err: &wasmtime::Error,
        store: &Store<StoreState>,
        limits: &Limits,
        elapsed: Duration,
    ) -> Fault {
        let stderr = store.data().stderr.contents();
        let said = panic_message(&String::from_utf8_lossy(&stderr));
        let msg = format!("{err:#}");
        let (kind, reason) = match err.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) => (
                FaultKind::Deadline,
                format!(
                    "ran past its deadline of {} ms (stopped after {} ms; infinite loop?)",
                    limits.deadline.as_millis(),
                    elapsed.as_millis()
                ),
            ),
            Some(wasmtime::Trap::UnreachableCodeReached) if said.is_some() => (FaultKind::Panic, "panicked".into()),
            Some(wasmtime::Trap::UnreachableCodeReached) => (FaultKind::Trap, "aborted (wasm `unreachable`)".into()),
            Some(wasmtime::Trap::StackOverflow) => (FaultKind::Trap, "overflowed its stack".into()),
            Some(trap) => (FaultKind::Trap, format!("trapped: {trap}")),
            None if err.downcast_ref::<symbolize::SymbolizeFault>().is_some() => {
                let fault = err.downcast_ref::<symbolize::SymbolizeFault>();
                (fault.map_or(FaultKind::Contract, |f| f.kind()), fault.map(|f| f.to_string()).unwrap_or_default())
            }
            None if err.downcast_ref::<Blocked>().is_some() => {
                (FaultKind::Blocked, err.downcast_ref::<Blocked>().map(Blocked::to_string).unwrap_or_default())
            }
            None if err.downcast_ref::<limiter::MemoryCap>().is_some() => (
                FaultKind::Memory,
                format!(
                    "exceeded its memory limit of {} MiB (all memories and tables together)",
                    limits.memory_bytes >> 20
                ),
            ),
            // The two limits wasmtime enforces itself fail with error types it keeps
            // private, so only these are told apart by their text.
            None if msg.contains("resource limit exceeded") || msg.contains("instance count too high") => {
                (FaultKind::Memory, format!("exceeded its instance/table limit: {}", first_line(&msg)))
            }
            None if msg.contains("fuel allocated for hostcalls has been exhausted") => (
                FaultKind::Output,
                format!("passed more than {} MiB to the host in one call", COPY_BYTES_PER_CALL >> 20),
            ),
            None if err.downcast_ref::<host_api::OutputLimit>().is_some() => (
                FaultKind::Output,
                err.downcast_ref::<host_api::OutputLimit>().map(|e| e.to_string()).unwrap_or_default(),
            ),
            None => (FaultKind::Contract, first_line(&err.root_cause().to_string())),
        };
        let reason = match said {
            Some(line) => format!("{reason}: {}", truncate(&line, 300)),
            None => reason,
        };
        Fault { callback, kind, reason, backtrace: backtrace(err), elapsed }
    }
}

/// `f <- g <- h`, innermost first: function names where the plugin kept them, else indices.
fn backtrace(err: &wasmtime::Error) -> Option<String> {
    let bt = err.downcast_ref::<wasmtime::WasmBacktrace>()?;
    let frames: Vec<String> = bt
        .frames()
        .iter()
        .take(BACKTRACE_FRAMES)
        .map(|f| match f.func_name() {
            Some(name) => truncate(name, 80),
            None => format!("func[{}]", f.func_index()),
        })
        .collect();
    if frames.is_empty() {
        return None;
    }
    let more = bt.frames().len().saturating_sub(BACKTRACE_FRAMES);
    let tail = if more > 0 { format!(" <- … {more} more") } else { String::new() };
    Some(format!("{}{tail}", frames.join(" <- ")))
}

/// The message of a Rust panic printed to the guest's stderr, if there is one.
fn panic_message(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines().skip_while(|l| !l.contains("panicked at"));
    let at = lines.next()?;
    let msg: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    if msg.is_empty() {
        at.split_once("panicked at").map(|(_, rest)| rest.trim().to_string())
    } else {
        Some(msg.join(" "))
    }
}

/// What the calls into one instance cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meter {
    /// CPU time of the host thread while in the plugin, nanoseconds.
    pub cpu_ns: u64,
    /// Longest single call, wall time.
    pub longest: Duration,
    pub calls: u64,
}

/// One running plugin instance.
pub struct Instance {
    store: Store<StoreState>,
    bindings: Plugin,
    limits: Limits,
    deadline_ticks: u64,
    meter: Meter,
}

impl Instance {
    /// Call one export with a fresh deadline, metering its CPU time; any error is a
    /// fault that names the export.
    fn call<R>(
        &mut self,
        export: &'static str,
        f: impl FnOnce(&Plugin, &mut Store<StoreState>) -> wasmtime::Result<R>,
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
        self.call("start", |b, s| b.call_start(s, params))
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
                return Err(fault(format!("reported an entry of @{} with {why}", host_api::printable(&agg.name))));
            }
        }
        Ok(aggs)
    }

    /// Answer the plugin's `read-aggregation` calls with `aggs`.
    pub fn set_aggregates(&mut self, aggs: Box<dyn Aggregates>) {
        self.store.data_mut().host.aggregates = Some(aggs);
    }

    /// The schemas `host.schema` answers with, by subscription index.
    pub fn set_schemas(&mut self, schemas: Vec<Option<types::ProbeSchema>>) {
        self.store.data_mut().host.schemas = schemas;
    }

    /// The processes `host.symbolize` may name for this plugin.
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
fn entry_too_large(e: &types::AggEntry) -> Option<String> {
    let over = |what: &str, n: usize, max: usize| (n > max).then(|| format!("{n} {what}, more than the {max} allowed"));
    let frames = e.key.iter().map(|v| if let types::Value::Stack(f) = v { f.len() } else { 0 }).max().unwrap_or(0);
    let parts = match &e.value {
        types::AggValue::Scalar(_) => None,
        types::AggValue::Histogram(h) => over("histogram buckets", h.buckets.len(), ENTRY_BUCKETS),
        types::AggValue::Quantiles(q) => over("percentiles", q.points.len(), ENTRY_PERCENTILES),
    };
    over("key values", e.key.len(), ENTRY_KEYS).or_else(|| over("stack frames", frames, ENTRY_FRAMES)).or(parts)
}

fn first_line(s: &str) -> String {
    truncate(s.lines().next().unwrap_or(""), 400)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests;

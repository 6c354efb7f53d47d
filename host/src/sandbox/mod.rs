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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use cache::{Cache, Outcome};

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
    imports: { default: trappable },
});

pub use self::wasmtap::plugin::types;
pub use host_api::{Clock, GuestItem, GuestOutput, LogLine};

/// What answers a plugin's `symbolize` calls: live symbolization, or a recording's table.
pub trait Symbols: Send {
    /// One frame per address: user addresses of `pid`, or kernel addresses.
    fn frames(&mut self, pid: u32, kernel: bool, addrs: &[u64]) -> Vec<types::Frame>;
}

impl Default for types::Filter {
    /// A filter that constrains nothing.
    fn default() -> Self {
        types::Filter {
            syscalls: Vec::new(),
            uids: Vec::new(),
            comms: Vec::new(),
            pids: Vec::new(),
            cgroups: Vec::new(),
            predicates: Vec::new(),
        }
    }
}

/// What answers a plugin's `read-aggregation` calls: the kernel collector's maps, or
/// the host's evaluation of a recording.
pub trait Aggregates: Send {
    /// A snapshot of the plugin's aggregation `id`; with `reset`, the next starts from zero.
    fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, String>;
}

/// The symbol source every plugin of a sandbox shares.
pub type SharedSymbols = Arc<Mutex<Option<Box<dyn Symbols>>>>;

/// How often the engine's epoch advances; deadlines are whole ticks.
const TICK: Duration = Duration::from_millis(5);
/// Bytes of a guest's stderr kept for fault messages (Rust panics print there).
const STDERR_CAPACITY: usize = 64 * 1024;

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

/// Per-plugin resource limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Linear memory cap per plugin.
    pub memory_bytes: usize,
    /// Longest a single call into the plugin may run.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_bytes: 64 << 20, deadline: Duration::from_millis(250) }
    }
}

/// The engine every plugin runs in, and the thread that advances its epoch.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<StoreState>,
    limits: Limits,
    ticker_stop: Arc<AtomicBool>,
    symbols: SharedSymbols,
    cache: Cache,
}

impl Sandbox {
    /// Build the engine and the linker with the host API.
    pub fn new(limits: Limits) -> Result<Sandbox, SandboxError> {
        let engine_err = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
        let mut config = Config::new();
        config.epoch_interruption(true);
        // Per-call overhead drops from ~650 to ~170 ns without the async machinery.
        config.concurrency_support(false);
        let engine = Engine::new(&config).map_err(engine_err)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(engine_err)?;
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(engine_err)?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (eng, stop) = (engine.clone(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("wasmtap-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    eng.increment_epoch();
                }
            })
            .map_err(|e| SandboxError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Sandbox { engine, linker, limits, ticker_stop, symbols: Arc::default(), cache: Cache::from_env() })
    }

    /// Answer plugins' `symbolize` calls with `symbols` from now on.
    pub fn set_symbols(&self, symbols: Box<dyn Symbols>) {
        *self.symbols.lock().unwrap_or_else(|e| e.into_inner()) = Some(symbols);
    }

    /// Keep compiled plugins in `cache` from now on (the default comes from the environment).
    pub fn set_cache(&mut self, cache: Cache) {
        self.cache = cache;
    }

    /// The limits every plugin gets.
    pub fn limits(&self) -> &Limits {
        &self.limits
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
        Ok(LoadedPlugin { pre, path: path.into(), digest, outcome })
    }

    /// A fresh instance of a loaded plugin in its own store.
    pub fn instantiate(&self, plugin: &LoadedPlugin, clock: Clock) -> Result<Instance, Fault> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.limits.memory_bytes)
            .instances(16)
            .tables(16)
            .memories(8)
            .table_elements(100_000)
            .trap_on_grow_failure(true)
            .build();
        let state = StoreState {
            wasi,
            table: ResourceTable::new(),
            limits,
            stderr,
            host: host_api::HostState::new(clock, self.symbols.clone()),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(self.deadline_ticks());
        let bindings = plugin.pre.instantiate(&mut store).map_err(|e| Fault::from_error("instantiate", &e, &store))?;
        Ok(Instance { store, bindings, deadline_ticks: self.deadline_ticks() })
    }

    fn deadline_ticks(&self) -> u64 {
        (self.limits.deadline.as_millis() as u64 / TICK.as_millis() as u64).max(1)
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
}

/// What the store of one plugin holds.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
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
    /// What went wrong, for the user.
    pub reason: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in {}: {}", self.callback, self.reason)
    }
}

impl Fault {
    fn from_error(callback: &'static str, err: &wasmtime::Error, store: &Store<StoreState>) -> Fault {
        let stderr = store.data().stderr.contents();
        let said = panic_message(&String::from_utf8_lossy(&stderr));
        let reason = match err.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) => "ran past its deadline (infinite loop?)".to_string(),
            Some(wasmtime::Trap::OutOfFuel) => "ran out of CPU budget".to_string(),
            Some(wasmtime::Trap::UnreachableCodeReached) if said.is_some() => "panicked".to_string(),
            Some(wasmtime::Trap::UnreachableCodeReached) => "aborted (wasm `unreachable`)".to_string(),
            Some(trap) => format!("trapped: {trap}"),
            None => {
                let msg = err.root_cause().to_string();
                if msg.contains("forcing trap when growing memory") {
                    "exceeded its memory limit".to_string()
                } else {
                    first_line(&msg)
                }
            }
        };
        let reason = match said {
            Some(line) => format!("{reason}: {}", truncate(&line, 300)),
            None => reason,
        };
        Fault { callback, reason }
    }
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

/// One running plugin instance.
pub struct Instance {
    store: Store<StoreState>,
    bindings: Plugin,
    deadline_ticks: u64,
}

impl Instance {
    /// Call one export with a fresh deadline; any error is a fault that names the export.
    fn call<R>(
        &mut self,
        export: &'static str,
        f: impl FnOnce(&Plugin, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        self.store.set_epoch_deadline(self.deadline_ticks);
        let r = f(&self.bindings, &mut self.store);
        r.map_err(|e| Fault::from_error(export, &e, &self.store))
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
        self.call("on-tick", |b, s| b.call_on_tick(s, sub, now_ns))
    }

    /// The schemas `host.schema` answers with, by subscription index.
    /// Answer the plugin's `read-aggregation` calls with `aggs`.
    pub fn set_aggregates(&mut self, aggs: Box<dyn Aggregates>) {
        self.store.data_mut().host.aggregates = Some(aggs);
    }

    pub fn set_schemas(&mut self, schemas: Vec<Option<types::ProbeSchema>>) {
        self.store.data_mut().host.schemas = schemas;
    }

    /// `finish`.
    pub fn finish(&mut self) -> Result<Vec<types::Aggregation>, Fault> {
        self.call("finish", |b, s| b.call_finish(s))
    }

    /// Set the time `monotonic-ns`/`wall-ns` report (replay drives it from the recording).
    pub fn set_clock(&mut self, clock: Clock) {
        self.store.data_mut().host.clock = clock;
    }

    /// Take what the plugin emitted since the last call.
    pub fn take_output(&mut self) -> GuestOutput {
        self.store.data_mut().host.take_output()
    }
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

//! The only module that configures wasmtime: one engine, one store per plugin, memory and
//! instance caps, a deadline per call (epoch interruption) and a capability allow-list.
//!
//! A plugin sees the interfaces of the `wasmtap:plugin` world, of the version it was
//! built for (the current 0.2.0 or the previous 0.1.0), and, because Rust's `wasm32-wasip2`
//! standard library always imports them, the WASI cli/io/clocks/random interfaces with a
//! context that grants nothing: no preopened directories, no environment, no arguments,
//! no network. A component importing anything else (files, sockets, http) is refused
//! at load time.
//!
//! Here: the engine, loading (which tells the versions apart), and each plugin's store.
//! Beside it: `instance.rs` (calls into a running instance, of either version),
//! `fault.rs` (what a failed call was), `host_api/` (the imports, one file an interface)
//! and `packed.rs` (what the plugin hands the host), `limiter.rs` (memories and tables),
//! `footprint.rs` (the instances, memories and tables a plugin creates, counted at load),
//! `symbolize.rs` (the symbolizer a plugin asks), `cache.rs` (compiled plugins on disk).

pub mod cache;
mod fault;
pub mod footprint;
mod host_api;
mod instance;
pub mod limiter;
pub mod link;
pub mod packed;
pub mod symbolize;

pub use fault::Fault;
use fault::*;
use instance::*;
pub use instance::{Instance, Meter, ENTRY_BUCKETS, ENTRY_FRAMES, ENTRY_KEYS, ENTRY_PERCENTILES};

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

use crate::wit::previous;
use crate::wit::{types, World};

use crate::clock::Clock;
use crate::limits::{FaultKind, Limits};
use crate::package::trust::{Admitted, Origin, Trust};
use crate::package::{Package, PackageError};
pub use host_api::{GuestItem, GuestOutput, LogLine};
pub use symbolize::{Answer, SharedScope, Symbols, SymbolsError};

/// What answers a plugin's `read-aggregation` calls: the kernel collector's maps, or
/// the host's evaluation of a recording.
pub trait Aggregates: Send {
    /// A snapshot of the plugin's aggregation `id`; with `reset`, the next starts from zero.
    fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, ReadError>;
}

/// Why there is no snapshot of a kernel aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The plan declared no aggregation `id`: a plugin's mistake.
    NoSuch { id: u32, declared: usize },
    /// Its maps could not be read: the host's trouble, not the plugin's.
    Failed { id: u32, reason: String },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NoSuch { id, declared: 0 } => write!(f, "no kernel aggregation {id} (the plan declared none)"),
            ReadError::NoSuch { id, declared } => {
                write!(f, "no kernel aggregation {id} (the plan declared {declared})")
            }
            ReadError::Failed { id, reason } => write!(f, "kernel aggregation {id} could not be read: {reason}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// The symbol source every plugin of a sandbox shares.
pub type SharedSymbols = Arc<Mutex<Option<Box<dyn Symbols>>>>;

/// What answers `probes.expand`: the tracepoints whose names match a pattern (`*`
/// wildcards), as `tracepoint:CATEGORY:NAME`. None: nothing to expand to (a run sets
/// the live system's, a replay the recording's).
pub type Lister = Box<dyn Fn(&str) -> Result<Vec<String>, String> + Send>;
pub type SharedLister = Arc<Mutex<Option<Lister>>>;

/// What answers `probes.describe`: the schema a subscription to a tracepoint
/// (`tracepoint:CATEGORY:NAME`) would have. None: nothing to describe (a run sets the
/// live system's, a replay the recording's).
pub type Describer = Box<dyn Fn(&str) -> Result<crate::wit::types::ProbeSchema, String> + Send>;
pub type SharedDescriber = Arc<Mutex<Option<Describer>>>;

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
    "wasmtap:proc/",
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
    #[error("{path} imports `{import}`, which plugins are not granted (allowed: the wasmtap:plugin interfaces and WASI cli, io, clocks, random; no files, sockets or http)")]
    ForbiddenImport { path: PathBuf, import: String },
    #[error("{path} is not a wasmtap plugin (world wasmtap:plugin/plugin@0.2.0 or @0.1.0): {reason}")]
    WrongWorld { path: PathBuf, reason: String },
    #[error("plugin {path} is refused: {reason}")]
    Unbounded { path: PathBuf, reason: footprint::Unbounded },
    #[error("plugin {path} is too large: {bytes} bytes (at most {max})")]
    TooLarge { path: PathBuf, bytes: u64, max: u64 },
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    #[error("plugin {path} is not a valid package: {error}")]
    Package { path: PathBuf, error: crate::package::PackageError },
    #[error("plugin {path} {reason}")]
    Untrusted { path: PathBuf, reason: String },
    #[error("plugin {path} imports `{import}`, but no tapset `{tapset}` is installed (looked for tapsets/{tapset}.wasm in: {searched})")]
    NoTapset { path: PathBuf, import: String, tapset: String, searched: String },
    #[error("tapset {path} (imported by {plugin}) {reason}")]
    TapsetUntrusted { path: PathBuf, plugin: PathBuf, reason: String },
    #[error("plugin {path} cannot be linked with its tapsets: {reason}")]
    Link { path: PathBuf, reason: String },
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
    lister: SharedLister,
    describer: SharedDescriber,
    cache: Cache,
    /// What may run; checked on a plugin's bytes before they are compiled.
    trust: Trust,
}

impl Sandbox {
    /// Build the engine and the linker with the host API.
    pub fn new() -> Result<Sandbox, SandboxError> {
        let engine_err = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
        let mut config = Config::new();
        config.epoch_interruption(true);
        // Per-call overhead drops from ~650 to ~170 ns without the async machinery.
        config.concurrency_support(false);
        // A plugin linked with a tapset calls it through adapters that wasmtime generates,
        // which read one memory and write the other: they need multi-memory. A module of
        // any plugin may then have several memories too; the limiter sums every memory of
        // the store and the footprint counts them before instantiation, so one memory or
        // many is bounded the same.
        config.wasm_multi_memory(true);
        let engine = Engine::new(&config).map_err(engine_err)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(engine_err)?;
        refuse_blocking(&mut linker).map_err(engine_err)?;
        crate::wit::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(engine_err)?;
        previous::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(engine_err)?;
        symbolize_counted_first(&mut linker).map_err(engine_err)?;
        proc_lookup(&mut linker).map_err(engine_err)?;
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
        Ok(Sandbox {
            engine,
            linker,
            ticker_stop,
            symbols: Arc::default(),
            lister: Arc::default(),
            describer: Arc::default(),
            cache: Cache::from_env(),
            trust: Trust::anything(),
        })
    }

    /// Answer plugins' `symbolize` calls with `symbols` from now on.
    pub fn set_symbols(&self, symbols: Box<dyn Symbols>) {
        *self.symbols.lock().unwrap_or_else(|e| e.into_inner()) = Some(symbols);
    }

    /// Answer plugins' `probes.expand` with `lister` from now on (a recording's
    /// tracepoints in a replay; the collectors' side's in a tenant's executor).
    pub fn set_lister(&self, lister: Lister) {
        *self.lister.lock().unwrap_or_else(|e| e.into_inner()) = Some(lister);
    }

    /// Answer plugins' `probes.describe` with `describer` from now on.
    pub fn set_describer(&self, describer: Describer) {
        *self.describer.lock().unwrap_or_else(|e| e.into_inner()) = Some(describer);
    }

    /// Keep compiled plugins in `cache` from now on (the default comes from the environment).
    pub fn set_cache(&mut self, cache: Cache) {
        self.cache = cache;
    }

    /// Admit plugins under `trust` from now on (the default admits anything).
    pub fn set_trust(&mut self, trust: Trust) {
        self.trust = trust;
    }

    /// Read a plugin file as a package, admit it under the trust policy (before any
    /// of it is compiled), then compile it (or take it from the cache) and type-check it.
    pub fn load(&self, path: &Path, origin: Origin) -> Result<LoadedPlugin, SandboxError> {
        let bytes = cache::read_plugin(path)?;
        let package = Package::parse(&bytes).map_err(|error| match error {
            PackageError::Header | PackageError::Truncated { .. } => {
                SandboxError::NotAComponent { path: path.into(), reason: error.to_string() }
            }
            _ => SandboxError::Package { path: path.into(), error },
        })?;
        let admitted = self
            .trust
            .admit(&package, origin)
            .map_err(|reason| SandboxError::Untrusted { path: path.into(), reason })?;
        let (bytes, tapsets) = self.link(path, bytes)?;
        // The compiled code is keyed by the whole file (with its tapsets linked in);
        // without signatures or tapsets the package's digest is that already.
        let digest = if package.signed_len == bytes.len() && tapsets.is_empty() {
            package.digest
        } else {
            cache::sha256(&bytes)
        };
        let (component, outcome) = self
            .cache
            .component_with_digest(&self.engine, &bytes, &digest)
            .map_err(|e| SandboxError::NotAComponent { path: path.into(), reason: first_line(&format!("{e:#}")) })?;
        let mut footprint =
            footprint::of(&bytes).map_err(|reason| SandboxError::Unbounded { path: path.into(), reason })?;
        // The calls between a plugin and a tapset go through adapters wasmtime generates
        // and instantiates as one core module of its own per tapset (measured: a plugin
        // linked with one tapset needs exactly one instance more than its binary shows).
        footprint.instances += tapsets.len() as u64;
        let mut imported = None;
        let mut asks_processes = false;
        for (name, _) in component.component_type().imports(&self.engine) {
            if !ALLOWED_IMPORTS.iter().any(|allowed| name.starts_with(allowed)) {
                return Err(SandboxError::ForbiddenImport { path: path.into(), import: name.to_string() });
            }
            imported = imported.or(World::of_import(name));
            asks_processes |= name.starts_with("wasmtap:proc/");
        }
        let wrong =
            |e: wasmtime::Error| SandboxError::WrongWorld { path: path.into(), reason: first_line(&format!("{e:#}")) };
        let pre = self.linker.instantiate_pre(&component).map_err(wrong)?;
        // The version its imports name; a plugin importing nothing of the contract is
        // whichever version its exports type-check against, the current one first.
        let pre = match imported {
            Some(World::Previous) => Pre::Previous(previous::PluginPre::new(pre).map_err(wrong)?),
            Some(World::Current) => Pre::Current(crate::wit::PluginPre::new(pre).map_err(wrong)?),
            None => match crate::wit::PluginPre::new(pre.clone()) {
                Ok(current) => Pre::Current(current),
                Err(e) => Pre::Previous(previous::PluginPre::new(pre).map_err(|_| wrong(e))?),
            },
        };
        Ok(LoadedPlugin {
            pre,
            path: path.into(),
            symbols: self.symbols.clone(),
            lister: self.lister.clone(),
            describer: self.describer.clone(),
            digest,
            outcome,
            footprint,
            package,
            admitted,
            tapsets,
            asks_processes,
        })
    }

    /// The plugin's bytes with every tapset it imports linked in (each found in the
    /// package index and admitted under the trust policy, before anything is compiled),
    /// and those tapsets; the bytes as they are when it imports none.
    fn link(&self, path: &Path, bytes: Vec<u8>) -> Result<(Vec<u8>, Vec<LinkedTapset>), SandboxError> {
        let imports =
            link::tapset_imports(&bytes).map_err(|reason| SandboxError::NotAComponent { path: path.into(), reason })?;
        if imports.is_empty() {
            return Ok((bytes, Vec::new()));
        }
        let mut names: Vec<&str> = imports.iter().map(|i| i.tapset.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut linked = Vec::new();
        let mut parts = Vec::new();
        for name in names {
            let Some(tapset_path) = crate::package::index::tapset(name) else {
                let import = imports.iter().find(|i| i.tapset == name).map(|i| i.import.clone()).unwrap_or_default();
                let searched: Vec<String> =
                    crate::package::index::dirs().iter().map(|d| d.display().to_string()).collect();
                return Err(SandboxError::NoTapset {
                    path: path.into(),
                    import,
                    tapset: name.into(),
                    searched: searched.join(", "),
                });
            };
            let tapset_bytes = cache::read_plugin(&tapset_path)?;
            let untrusted = |reason: String| SandboxError::TapsetUntrusted {
                path: tapset_path.clone(),
                plugin: path.into(),
                reason,
            };
            let package =
                Package::parse(&tapset_bytes).map_err(|e| untrusted(format!("is not a valid package: {e}")))?;
            let admitted = self.trust.admit_tapset(&package).map_err(untrusted)?;
            let version = package.manifest.as_ref().map_or_else(|| "(no manifest)".to_string(), |m| m.version.clone());
            linked.push(LinkedTapset {
                name: name.into(),
                version: version.clone(),
                path: tapset_path.clone(),
                digest: package.digest,
                admitted,
            });
            parts.push((name.to_string(), version, tapset_bytes));
        }
        let composed = link::compose(&bytes, &imports, &parts)
            .map_err(|reason| SandboxError::Link { path: path.into(), reason })?;
        Ok((composed, linked))
    }
}

/// A tapset linked into a plugin.
#[derive(Clone, Debug)]
pub struct LinkedTapset {
    pub name: String,
    pub version: String,
    pub path: PathBuf,
    /// The sha-256 of its signed bytes.
    pub digest: cache::Digest,
    /// Why the trust policy let it run.
    pub admitted: Admitted,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// A compiled plugin, type-checked against the version of the world it was built for.
enum Pre {
    Current(crate::wit::PluginPre<StoreState>),
    Previous(previous::PluginPre<StoreState>),
}

/// A compiled, type-checked plugin, ready to be instantiated any number of times.
pub struct LoadedPlugin {
    pre: Pre,
    path: PathBuf,
    symbols: SharedSymbols,
    lister: SharedLister,
    describer: SharedDescriber,
    digest: cache::Digest,
    outcome: Outcome,
    /// What one instantiation creates, checked against the limits before each.
    footprint: footprint::Footprint,
    /// Its manifest and signatures.
    package: Package,
    /// Why the trust policy let it run.
    admitted: Admitted,
    /// The tapsets linked into it.
    tapsets: Vec<LinkedTapset>,
    /// Whether it imports the `proc` tapset: its scope then holds the pid of every record
    /// it is given, not only of those with addresses.
    asks_processes: bool,
}

impl LoadedPlugin {
    /// The tapsets linked into it, by name.
    pub fn tapsets(&self) -> &[LinkedTapset] {
        &self.tapsets
    }

    /// Whether it may ask the `proc` tapset about the processes it is shown.
    pub fn asks_processes(&self) -> bool {
        self.asks_processes
    }

    /// The file the plugin came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sha-256 of the plugin file's bytes.
    pub fn digest(&self) -> cache::Digest {
        self.digest
    }

    /// Its manifest and signatures, as read before it was compiled.
    pub fn package(&self) -> &Package {
        &self.package
    }

    /// `limits` with what its manifest asks for granted ([`Limits::granting`]).
    pub fn granted(&self, limits: &Limits) -> Limits {
        limits.clone().granting(self.package.manifest.as_ref().and_then(|m| m.instances_asked()))
    }

    /// Why the trust policy let it run.
    pub fn admitted(&self) -> &Admitted {
        &self.admitted
    }

    /// The version of the `plugin` world it was built for.
    pub fn world(&self) -> World {
        match self.pre {
            Pre::Current(_) => World::Current,
            Pre::Previous(_) => World::Previous,
        }
    }

    /// Whether the compiled code came from the cache.
    pub fn cache_outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// A fresh instance in a store of its own, bounded by `limits`.
    pub fn instantiate(&self, clock: Clock, limits: &Limits) -> Result<Instance, Fault> {
        self.footprint.check(limits.instances).map_err(|cap| Fault {
            callback: "instantiate",
            kind: FaultKind::Memory,
            reason: cap.to_string(),
            backtrace: None,
            elapsed: Duration::ZERO,
        })?;
        let engine = match &self.pre {
            Pre::Current(pre) => pre.engine(),
            Pre::Previous(pre) => pre.engine(),
        };
        let mut store = new_store(engine, clock, limits, self.symbols.clone());
        store.data_mut().host.lister = self.lister.clone();
        store.data_mut().host.describer = self.describer.clone();
        let deadline_ticks = limits.deadline_ticks();
        let started = Instant::now();
        let bindings = match &self.pre {
            Pre::Current(pre) => pre.instantiate(&mut store).map(Bindings::Current),
            Pre::Previous(pre) => pre.instantiate(&mut store).map(Bindings::Previous),
        };
        let bindings = bindings.map_err(|e| Fault::from_error("instantiate", &e, &store, limits, started.elapsed()))?;
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

/// `services.symbolize` as bindgen makes it copies every request out of the plugin before the
/// host sees one: a million empty requests cost the host 32 MiB before it can refuse them.
/// This one takes the list where it lies in the plugin's memory, counts it, and copies the
/// requests only when there are few enough.
/// Both versions of the world: their requests and frames have the same shape.
fn symbolize_counted_first(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    for interface in ["wasmtap:plugin/services@0.2.0", "wasmtap:plugin/host@0.1.0"] {
        linker.instance(interface)?.func_wrap(
            "symbolize",
            |mut store: wasmtime::StoreContextMut<'_, StoreState>, (stacks,): (WasmList<types::StackRequest>,)| {
                symbolize::check_count(stacks.len()).map_err(wasmtime::Error::new)?;
                let stacks: Vec<types::StackRequest> =
                    stacks.iter(store.as_context_mut())?.collect::<Result<_, _>>()?;
                let frames = store.data_mut().host.symbolize.answer(&stacks).map_err(wasmtime::Error::new)?;
                Ok((frames,))
            },
        )?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// The `proc` tapset, `wasmtap:proc/info@0.1.0`, which the host answers itself: the
/// pids are counted where they lie in the plugin's memory before any is copied.
fn proc_lookup(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.instance("wasmtap:proc/info@0.1.0")?.func_wrap(
        "lookup",
        |mut store: wasmtime::StoreContextMut<'_, StoreState>, (pids,): (WasmList<u32>,)| {
            if pids.len() > symbolize::PROC_PIDS_PER_CALL {
                return Err(wasmtime::Error::new(symbolize::SymbolizeFault::TooManyPids(pids.len())));
            }
            let pids: Vec<u32> = pids.iter(store.as_context_mut())?.collect::<Result<_, _>>()?;
            let answer = store.data_mut().host.symbolize.processes(&pids).map_err(wasmtime::Error::new)?;
            Ok((answer,))
        },
    )
}

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

#[cfg(test)]
mod tests;

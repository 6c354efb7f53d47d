//! The live event source: loads the collectors with aya, writes the kernel-side
//! filters into their maps, and drains their ring buffers on a thread of its own so a
//! slow plugin never stalls the kernel side: when the pipeline falls too far behind,
//! the thread stops draining and the kernel counts what it cannot write, per probe
//! ([`super::counter_rows`]). Needs the capabilities in [`crate::privilege::ATTACH`].
//!
//! Ring buffers are written with `BPF_RB_NO_WAKEUP` (a wakeup costs a VM exit per event
//! on these machines), so the drain thread polls every millisecond instead of waiting.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use std::os::fd::AsFd;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint, TracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};
use wasmtap_abi::Kind;

use super::agg_maps::{
    agg_ids, tid_aggs_bytes, tid_keyed_aggs, KernelValues, SiteAttach, SiteConfig, AGG_IDS, VALUES_MAX,
};
use super::counter_rows::{self, writable_by};
use super::map_sizes::MapSizes;
use super::probes::{collector_of, Collector};
use super::table::{Pred, ProbeTable, KERNEL_PREDS_MAX};
use super::Chunk;
use crate::accounting::{AggLosses, KernelCounters, KindCounters, LossReason};

static SYSCALLS_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syscalls.bpf.o"));
static PROC_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/proc.bpf.o"));
static FILE_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/file.bpf.o"));
static TRACEPOINT_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracepoint.bpf.o"));
static USER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/user.bpf.o"));
static PERF_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/perf.bpf.o"));
static AGG_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agg.bpf.o"));

/// Ring buffer of the syscall collector: ~150 k syscall records, 100 ms of a storm at
/// 1.5 M calls a second, before the queue behind it takes almost as many again. Measured:
/// a stream of 10 M getppid calls at 1 M a second, and 2-second bursts up to the 1.3 to
/// 1.5 M a second one traced CPU makes, lose nothing; the ring was 64 MiB (128 MiB of
/// RSS) before.
const RING_BYTES: u32 = 16 << 20;
/// Ring buffer of the tracepoint, user-probe and perf collectors.
const SMALL_RING_BYTES: u32 = 16 << 20;
/// Ring buffer of the process collector: execs, forks and exits come thousands a second
/// at most; 2 MiB holds ~1,000 full execs or ~20,000 exits, drained every millisecond.
/// (A ring's pages are mapped twice into the host and count twice in its RSS.)
const PROC_RING_BYTES: u32 = 2 << 20;
/// Ring buffer of the file collector: 8 MiB holds ~40,000 opens, ~30 ms of an
/// open storm at full speed on one CPU.
const FILE_RING_BYTES: u32 = 8 << 20;
/// Records per chunk handed to the pipeline (bytes).
const CHUNK_BYTES: usize = 256 << 10;
/// Bytes of records queued between the drain thread and the pipeline, in resident pages
/// ([`super::queue`]). Past it the drain thread waits and the rings fill: the kernel
/// counts what it cannot write, per probe. 12 MiB holds ~110,000 syscalls or ~60,000
/// opens, beside the ring's own: with the syscall ring, a plugin stalled for 250 ms (the
/// default deadline) loses nothing at 1 M events a second. A queued byte costs the host
/// one resident byte, a ring byte two (a ring is mapped twice, all of it from the start),
/// so a stream at full rate peaks at the rings' RSS + 12 MiB + the plugins + ~14 MiB:
/// 58-59 MiB for one syscall stream measured at 1 to 1.5 M calls a second, nothing lost.
const BYTES_IN_FLIGHT: u64 = 12 << 20;

/// Why the live source could not start.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Privilege(#[from] crate::privilege::PrivilegeError),
    #[error("cannot load the {collector:?} collector: {reason}")]
    Load { collector: Collector, reason: String },
    #[error("cannot attach {what}: {reason}")]
    Attach { what: String, reason: String },
    #[error("cannot configure the {collector:?} collector's {map} map: {reason}")]
    Map { collector: Collector, map: &'static str, reason: String },
    #[error("cannot start the ring buffer thread: {0}")]
    Thread(std::io::Error),
    #[error("{0} kernel aggregations time intervals by thread; at most {max} may", max = super::agg_maps::TID_AGGS_MAX)]
    TooManyTidAggs(usize),
}

/// Filters applied in the kernel, for every collector.
#[derive(Clone, Debug, Default)]
pub struct KernelFilter {
    /// Only these processes (`-p`, `-c`), plus their descendants if `follow_children`.
    pub targets: Option<Vec<u32>>,
    pub follow_children: bool,
    pub uids: Option<Vec<u32>>,
    pub comms: Option<Vec<String>>,
    /// cgroup ids with their levels: tasks in them or below them.
    pub cgroups: Option<Vec<(u64, u32)>>,
    pub syscalls: Option<Vec<u32>>,
}

/// What to collect.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub kinds: BTreeSet<Kind>,
    pub filter: KernelFilter,
    /// Tracepoints, uprobes and perf events to attach, with their per-probe settings.
    pub table: ProbeTable,
    /// Kernel aggregations: probe sites and their actions (none: no aggregation collector).
    pub aggs: Vec<SiteConfig>,
    /// The filter of the aggregation collector, which the host cannot re-check.
    pub agg_filter: KernelFilter,
    /// Bookkeeping maps resized (`WASMTAP_MAP_ENTRIES`).
    pub map_sizes: MapSizes,
    /// The overload guard's measuring process, never traced (like the host itself).
    pub meter_tgid: Option<u32>,
}

/// A loader made early by [`prefetch_loader`], for [`Live::start`] to take.
static LOADER_JOB: std::sync::Mutex<Option<JoinHandle<EbpfLoader<'static>>>> = std::sync::Mutex::new(None);

/// Make the run's loader on a thread now, for a [`Live::start`] to come: making it parses
/// the kernel's BTF, the longest step of a start, which needs nothing from the plugins.
pub fn prefetch_loader() {
    let job = std::thread::Builder::new().name("wasmtap-btf".into()).spawn(EbpfLoader::new);
    if let Ok(job) = job {
        *LOADER_JOB.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
    }
}

/// The prefetched loader, or a new one.
fn take_loader() -> EbpfLoader<'static> {
    let job = LOADER_JOB.lock().unwrap_or_else(|e| e.into_inner()).take();
    job.and_then(|j| j.join().ok()).unwrap_or_default()
}

/// Running collectors and their drain thread.
pub struct Live {
    objects: Vec<(Collector, Ebpf)>,
    /// The `COUNTERS` rows each collector can write.
    counted: Vec<(Collector, Vec<u32>)>,
    /// Tracepoint, uprobe and USDT attachments (detached when dropped).
    _links: Vec<crate::sys::PerfLink>,
    stop: Arc<AtomicBool>,
    drain: Option<JoinHandle<()>>,
    pipeline_drops: Arc<AtomicU64>,
    malformed: Arc<AtomicU64>,
    /// The aggregation collector's values, until the plugins' reader takes them.
    values: Option<KernelValues>,
    /// Aggregation ids in use, whose losses are read.
    agg_ids: u32,
    /// Bytes of ring buffer the drain thread maps (each ring's data twice, plus its two
    /// position pages).
    ring_bytes: u64,
}

impl Live {
    /// Load, configure and attach what `config` needs; events arrive on the receiver.
    pub fn start(config: &LiveConfig) -> Result<(Live, ChunkReceiver), CollectError> {
        crate::privilege::check_attach(!config.table.user.is_empty())?;
        crate::collect::tracefs::ensure_mounted();
        let collectors: BTreeSet<Collector> = config.kinds.iter().map(|k| collector_of(*k)).collect();
        let mut objects = Vec::new();
        let mut user_links = Vec::new();
        let (agg_globals, globals) = (Globals::new(&config.agg_filter, config), Globals::new(&config.filter, config));
        let mut loader = take_loader();
        for (map, entries) in &config.map_sizes.0 {
            loader.map_max_entries(map, *entries);
        }
        if !config.aggs.is_empty() {
            let c = Collector::Agg;
            let mut obj = load(&mut loader, c, &agg_globals)?;
            configure(c, &mut obj, &config.agg_filter, config)?;
            objects.push((c, obj));
        }
        for c in collectors {
            let mut obj = load(&mut loader, c, &globals)?;
            configure(c, &mut obj, &config.filter, config)?;
            objects.push((c, obj));
        }
        drop(loader);
        let mut rings = Vec::new();
        let mut ring_bytes = 0;
        let mut values = None;
        // In order: the aggregation collector first, so its programs run first (a
        // latency's start is stamped after the aggregation's own work, its end before).
        for (c, obj) in &mut objects {
            let c = *c;
            if c == Collector::Agg {
                attach_aggs(obj, config, &mut user_links)?;
                let map = obj.take_map("AGG_VALUES").ok_or(CollectError::Map {
                    collector: c,
                    map: "AGG_VALUES",
                    reason: "missing".into(),
                })?;
                values = Some(KernelValues::new(map).map_err(|reason| CollectError::Map {
                    collector: c,
                    map: "AGG_VALUES",
                    reason,
                })?);
                continue;
            }
            attach(c, obj, config, &mut user_links)?;
            let ring = obj.take_map("EVENTS").ok_or(CollectError::Map {
                collector: c,
                map: "EVENTS",
                reason: "missing".into(),
            })?;
            let ring = RingBuf::try_from(ring).map_err(|e| CollectError::Map {
                collector: c,
                map: "EVENTS",
                reason: e.to_string(),
            })?;
            rings.push(ring);
            ring_bytes += 2 * u64::from(ring_size(c)) + 2 * 4096;
        }
        let (tx, rx) = super::queue::bounded(BYTES_IN_FLIGHT);
        let stop = Arc::new(AtomicBool::new(false));
        let pipeline_drops = Arc::new(AtomicU64::new(0));
        let malformed = Arc::new(AtomicU64::new(0));
        let drainer = Drainer {
            rings,
            tx: ChunkSender { tx, drops: pipeline_drops.clone() },
            stop: stop.clone(),
            malformed: malformed.clone(),
        };
        let counted = objects.iter().map(|(c, _)| (*c, writable_by(*c, &config.table))).collect();
        let drain = std::thread::Builder::new()
            .name("wasmtap-ring".into())
            .spawn(move || drainer.run())
            .map_err(CollectError::Thread)?;
        Ok((
            Live {
                objects,
                counted,
                _links: user_links,
                stop,
                drain: Some(drain),
                pipeline_drops,
                malformed,
                values,
                agg_ids: agg_ids(&config.aggs).min(AGG_IDS),
                ring_bytes,
            },
            ChunkReceiver { rx },
        ))
    }

    /// Add a process to the target set of every collector (for `-c`, before it execs).
    pub fn add_target(&mut self, pid: u32) -> Result<(), CollectError> {
        for (c, obj) in &mut self.objects {
            let map = obj.map_mut("TARGETS").ok_or(CollectError::Map {
                collector: *c,
                map: "TARGETS",
                reason: "missing".into(),
            })?;
            let mut targets: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| CollectError::Map {
                collector: *c,
                map: "TARGETS",
                reason: e.to_string(),
            })?;
            targets.insert(pid, 1, 0).map_err(|e| CollectError::Map {
                collector: *c,
                map: "TARGETS",
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// The collectors' loaded programs, for the overload guard to measure.
    pub fn programs(&self) -> Vec<super::overload::Program> {
        let programs = self.objects.iter().flat_map(|(_, obj)| obj.programs());
        let loaded = programs.filter_map(|(name, p)| p.info().ok().map(|i| (name.to_string(), i.id())));
        loaded.map(|(name, id)| super::overload::Program { name, id }).collect()
    }

    /// The kernel aggregations' values, for the plugins' reader (once).
    pub fn take_values(&mut self) -> Option<KernelValues> {
        self.values.take()
    }

    /// Read now, on the calling thread, what reading the maps needs from a file: the
    /// number of possible CPUs, which aya reads once per thread. The thread then reads
    /// counters and aggregations with bpf(2) alone, which its seccomp filter allows.
    pub fn prepare_reads(&self) {
        let _ = aya::util::nr_cpus();
    }

    /// The kernel's counters, summed over CPUs, plus the drain thread's. Reads only the
    /// rows each collector can write (about 4 k map lookups with the syscall collector),
    /// so it may be called while running.
    pub fn counters(&self) -> KernelCounters {
        let mut out = KernelCounters::default();
        for ((_, obj), (_, counted)) in self.objects.iter().zip(&self.counted) {
            let Some(map) = obj.map("COUNTERS") else { continue };
            let Ok(arr) = PerCpuArray::<_, u64>::try_from(map) else { continue };
            let get = |row: u32, s: u32| -> u64 {
                arr.get(&(row * counter_rows::SLOTS + s), 0).map(|v| v.iter().sum()).unwrap_or(0)
            };
            for &row in counted {
                let counts = KindCounters {
                    filtered: get(row, 0),
                    emitted: get(row, 1),
                    dropped: get(row, 2),
                    lost: get(row, 3),
                };
                out.add_row(row, counts);
            }
        }
        for (reason, n) in self.losses() {
            out.add_loss(reason, n);
        }
        out.agg_losses = self.agg_losses();
        out.pipeline_dropped = self.pipeline_drops.load(Ordering::Relaxed);
        out.malformed = self.malformed.load(Ordering::Relaxed);
        out
    }

    /// Bytes of ring buffer mapped into the host: each ring's data twice (so a record
    /// that wraps reads in one piece) and two pages of positions. The kernel maps every
    /// page when the ring is mapped, so all of it is resident from the start.
    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// The aggregation collector's `AGG_LOSSES`, summed over CPUs, for the ids in use.
    fn agg_losses(&self) -> std::collections::BTreeMap<u32, AggLosses> {
        let mut out = std::collections::BTreeMap::new();
        let Some((_, obj)) = self.objects.iter().find(|(c, _)| *c == Collector::Agg) else { return out };
        let Some(Ok(arr)) = obj.map("AGG_LOSSES").map(PerCpuArray::<_, u64>::try_from) else { return out };
        let get = |key: u32| -> u64 { arr.get(&key, 0).map(|v| v.iter().sum()).unwrap_or(0) };
        for id in 0..self.agg_ids {
            let l = AggLosses { agg_map_full: get(2 * id), start_map_full: get(2 * id + 1) };
            if l != AggLosses::default() {
                out.insert(id, l);
            }
        }
        out
    }

    /// Every collector's `LOSSES`, summed over CPUs, then over collectors, except what
    /// each collector keeps a copy of (the target set): the largest of its counts.
    fn losses(&self) -> Vec<(LossReason, u64)> {
        let mut totals = [0u64; counter_rows::LOSSES as usize];
        for (_, obj) in &self.objects {
            let Some(map) = obj.map("LOSSES") else { continue };
            let Ok(arr) = PerCpuArray::<_, u64>::try_from(map) else { continue };
            for (i, reason) in LossReason::ALL.iter().enumerate() {
                let n: u64 = arr.get(&(i as u32), 0).map(|v| v.iter().sum()).unwrap_or(0);
                totals[i] = if reason.per_process() { totals[i].max(n) } else { totals[i] + n };
            }
        }
        LossReason::ALL.into_iter().zip(totals).collect()
    }

    /// Detach every collector; the drain thread then reads what the kernel has written
    /// once more and ends the stream (idempotent). It does not wait for that: the
    /// pipeline keeps taking chunks until the receiver says the stream ended, so the
    /// last drain stays within the queue's bound. Detaching first makes the counters
    /// final: what they say was emitted is exactly what the last drain reads.
    pub fn stop(&mut self) {
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        self._links.clear();
        for (_, obj) in &mut self.objects {
            for (_, prog) in obj.programs_mut() {
                detach(prog);
            }
        }
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for Live {
    /// Stop, and wait for the drain thread's last pass. Drop the [`ChunkReceiver`] first
    /// (or take every chunk until the stream ends): the last pass waits for room in the
    /// queue while someone may still take from it.
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.drain.take() {
            let _ = h.join();
        }
    }
}

/// The values of a collector's `cfg_*` globals; the loader borrows them until it is
/// dropped, so they are built before it.
struct Globals {
    self_tgid: u32,
    meter_tgid: u32,
    targets: u32,
    follow: u32,
    uids: u32,
    comms: u32,
    cgroups: u32,
    levels: u32,
    syscalls: u32,
    args: u32,
    emit_fork: u32,
    emit_exit: u32,
}

impl Globals {
    fn new(f: &KernelFilter, config: &LiveConfig) -> Self {
        let flag = |b: bool| u32::from(b);
        Globals {
            self_tgid: std::process::id(),
            meter_tgid: config.meter_tgid.unwrap_or(0),
            targets: flag(f.targets.is_some()),
            follow: flag(f.follow_children),
            uids: flag(f.uids.is_some()),
            comms: flag(f.comms.is_some()),
            cgroups: flag(f.cgroups.is_some()),
            levels: f.cgroups.iter().flatten().map(|(_, level)| *level).max().unwrap_or(0),
            syscalls: flag(f.syscalls.is_some()),
            args: flag(!config.table.syscall_preds.is_empty()),
            emit_fork: flag(config.kinds.contains(&Kind::Fork)),
            emit_exit: flag(config.kinds.contains(&Kind::Exit)),
        }
    }
}

/// Load collector `c` with the run's one loader. Every collector is loaded by it: a loader
/// parses the kernel's BTF when made, the longest step of a start and the largest
/// allocation of a run (about 16 MiB), so there is one. The globals of a collector stay
/// set for the next ones: those every collector has must exist, the others may not.
fn load<'a>(loader: &mut EbpfLoader<'a>, c: Collector, g: &'a Globals) -> Result<Ebpf, CollectError> {
    let ring = ring_size(c);
    loader
        .map_max_entries("EVENTS", ring)
        .map_max_entries("AGG_VALUES", VALUES_MAX)
        .override_global("cfg_filter_cgroups", &g.cgroups, true)
        .override_global("cfg_cgroup_levels", &g.levels, true)
        .override_global("cfg_self_tgid", &g.self_tgid, true)
        .override_global("cfg_meter_tgid", &g.meter_tgid, true)
        .override_global("cfg_filter_targets", &g.targets, true)
        .override_global("cfg_follow_children", &g.follow, true)
        .override_global("cfg_filter_uids", &g.uids, true)
        .override_global("cfg_filter_comms", &g.comms, true)
        .override_global("cfg_filter_syscalls", &g.syscalls, false)
        .override_global("cfg_filter_args", &g.args, false)
        .override_global("cfg_emit_fork", &g.emit_fork, false)
        .override_global("cfg_emit_exit", &g.emit_exit, false);
    let bytes = match c {
        Collector::Syscalls => SYSCALLS_OBJ,
        Collector::Proc => PROC_OBJ,
        Collector::File => FILE_OBJ,
        Collector::Tracepoint => TRACEPOINT_OBJ,
        Collector::User => USER_OBJ,
        Collector::Perf => PERF_OBJ,
        Collector::Agg => AGG_OBJ,
    };
    loader.load(bytes).map_err(|e| CollectError::Load { collector: c, reason: format!("{e:#}") })
}

/// Bytes of collector `c`'s ring buffer.
fn ring_size(c: Collector) -> u32 {
    match c {
        Collector::Syscalls => RING_BYTES,
        Collector::Proc => PROC_RING_BYTES,
        Collector::File => FILE_RING_BYTES,
        // Nothing is streamed; the smallest ring there is (a page).
        Collector::Agg => 4096,
        _ => SMALL_RING_BYTES,
    }
}

fn map_of<'a>(c: Collector, obj: &'a mut Ebpf, map: &'static str) -> Result<&'a mut aya::maps::Map, CollectError> {
    obj.map_mut(map).ok_or(CollectError::Map { collector: c, map, reason: "missing".into() })
}

fn configure(c: Collector, obj: &mut Ebpf, f: &KernelFilter, config: &LiveConfig) -> Result<(), CollectError> {
    let table = &config.table;
    let map_err = |map: &'static str| {
        move |e: aya::maps::MapError| CollectError::Map { collector: c, map, reason: e.to_string() }
    };
    if c == Collector::Tracepoint && table.tracepoints.len() > counter_rows::TP_SLOTS as usize {
        let reason = format!("{} tracepoints, at most {} per run", table.tracepoints.len(), counter_rows::TP_SLOTS);
        return Err(CollectError::Map { collector: c, map: "TP_CONFIG", reason });
    }
    if let Some(targets) = &f.targets {
        let mut m: HashMap<_, u32, u8> = HashMap::try_from(map_of(c, obj, "TARGETS")?).map_err(map_err("TARGETS"))?;
        for pid in targets {
            m.insert(pid, 1, 0).map_err(map_err("TARGETS"))?;
        }
    }
    if let Some(uids) = &f.uids {
        let mut m: HashMap<_, u32, u8> = HashMap::try_from(map_of(c, obj, "UIDS")?).map_err(map_err("UIDS"))?;
        for uid in uids {
            m.insert(uid, 1, 0).map_err(map_err("UIDS"))?;
        }
    }
    if let Some(comms) = &f.comms {
        let mut m: HashMap<_, [u8; 16], u8> = HashMap::try_from(map_of(c, obj, "COMMS")?).map_err(map_err("COMMS"))?;
        for comm in comms {
            m.insert(comm_key(comm), 1, 0).map_err(map_err("COMMS"))?;
        }
    }
    if let Some(cgroups) = &f.cgroups {
        let mut m: HashMap<_, u64, u8> = HashMap::try_from(map_of(c, obj, "CGROUPS")?).map_err(map_err("CGROUPS"))?;
        for (id, _) in cgroups {
            m.insert(id, 1, 0).map_err(map_err("CGROUPS"))?;
        }
    }
    if let (Collector::Syscalls, Some(nrs)) = (c, &f.syscalls) {
        let mut m: Array<_, u8> = Array::try_from(map_of(c, obj, "SYSCALLS")?).map_err(map_err("SYSCALLS"))?;
        for nr in nrs {
            m.set(*nr, 1, 0).map_err(map_err("SYSCALLS"))?;
        }
    }
    match c {
        Collector::Syscalls if !table.syscall_preds.is_empty() => {
            let mut m: Array<_, [u8; PREDS_BYTES]> =
                Array::try_from(map_of(c, obj, "ARG_PREDS")?).map_err(map_err("ARG_PREDS"))?;
            for (key, preds) in &table.syscall_preds {
                m.set(*key, preds_bytes(preds), 0).map_err(map_err("ARG_PREDS"))?;
            }
        }
        Collector::Tracepoint => {
            let mut m: HashMap<_, u32, [u8; 80]> =
                HashMap::try_from(map_of(c, obj, "TP_CONFIG")?).map_err(map_err("TP_CONFIG"))?;
            for (slot, tp) in table.tracepoints.iter().enumerate() {
                let mut v = [0u8; 80];
                let fmt = &tp.format;
                v[0..2].copy_from_slice(&(fmt.fixed_size().min(u16::MAX as u32) as u16).to_le_bytes());
                let dynamic: Vec<&super::tracefs::Field> = fmt.dynamic_fields().take(4).collect();
                v[2] = dynamic.len() as u8;
                v[3] = tp.stacks;
                for (i, f) in dynamic.iter().enumerate() {
                    let off = f.offset as u16 | if f.relative { 0x8000 } else { 0 };
                    v[4 + 2 * i..6 + 2 * i].copy_from_slice(&off.to_le_bytes());
                }
                v[12..16].copy_from_slice(&(slot as u32).to_le_bytes());
                v[16..80].copy_from_slice(&preds_bytes(&tp.preds));
                m.insert(fmt.id, v, 0).map_err(map_err("TP_CONFIG"))?;
            }
        }
        Collector::User => {
            let mut m: Array<_, [u8; 264]> =
                Array::try_from(map_of(c, obj, "USER_CONFIG")?).map_err(map_err("USER_CONFIG"))?;
            for (slot, u) in table.user.iter().enumerate() {
                let mut v = [0u8; 264];
                v[0] = match (&u.usdt, u.ret) {
                    (Some(_), _) => 3,
                    (None, true) => 2,
                    (None, false) => 1,
                };
                v[1] = u.usdt.as_ref().map_or(0, |a| a.len().min(wasmtap_abi::user::ARGS_MAX)) as u8;
                v[2] = u.stacks;
                for (i, a) in u.usdt.iter().flatten().take(wasmtap_abi::user::ARGS_MAX).enumerate() {
                    let o = 8 + 16 * i;
                    v[o] = a.loc;
                    v[o + 1] = a.size;
                    v[o + 2] = u8::from(a.signed);
                    v[o + 4..o + 6].copy_from_slice(&a.reg_off.to_le_bytes());
                    v[o + 8..o + 16].copy_from_slice(&a.value.to_le_bytes());
                }
                v[200..264].copy_from_slice(&preds_bytes(&u.preds));
                m.set(slot as u32, v, 0).map_err(map_err("USER_CONFIG"))?;
            }
        }
        Collector::Perf => {
            let mut m: Array<_, [u8; 72]> =
                Array::try_from(map_of(c, obj, "PERF_CONFIG")?).map_err(map_err("PERF_CONFIG"))?;
            for (slot, p) in table.perf.iter().enumerate() {
                let mut v = [0u8; 72];
                v[0] = p.stacks;
                v[4..8].copy_from_slice(&(slot as u32).to_le_bytes());
                v[8..72].copy_from_slice(&preds_bytes(&p.preds));
                m.set(p.event, v, 0).map_err(map_err("PERF_CONFIG"))?;
            }
        }
        Collector::Agg => {
            let mut m: Array<_, [u8; super::agg_maps::SITE_BYTES]> =
                Array::try_from(map_of(c, obj, "AGG_SITES")?).map_err(map_err("AGG_SITES"))?;
            for site in &config.aggs {
                let bytes: [u8; super::agg_maps::SITE_BYTES] =
                    site.to_bytes().try_into().map_err(|_| map_err("AGG_SITES")(aya::maps::MapError::KeyNotFound))?;
                m.set(site.site, bytes, 0).map_err(map_err("AGG_SITES"))?;
            }
            let ids = tid_keyed_aggs(&config.aggs);
            let bytes = tid_aggs_bytes(&ids).ok_or(CollectError::TooManyTidAggs(ids.len()))?;
            let mut m: Array<_, [u8; super::agg_maps::TID_AGGS_BYTES]> =
                Array::try_from(map_of(c, obj, "AGG_TID_AGGS")?).map_err(map_err("AGG_TID_AGGS"))?;
            m.set(0, bytes, 0).map_err(map_err("AGG_TID_AGGS"))?;
        }
        _ => {}
    }
    Ok(())
}

/// `struct wt_preds`: four `struct wt_pred` of 16 bytes; op 0 ends the list.
pub(crate) const PREDS_BYTES: usize = 16 * KERNEL_PREDS_MAX;

pub(crate) fn preds_bytes(preds: &[Pred]) -> [u8; PREDS_BYTES] {
    let mut v = [0u8; PREDS_BYTES];
    for (i, p) in preds.iter().take(KERNEL_PREDS_MAX).enumerate() {
        let o = 16 * i;
        v[o..o + 2].copy_from_slice(&p.off.to_le_bytes());
        v[o + 2] = p.size;
        v[o + 3] = u8::from(p.signed);
        v[o + 4] = p.op as u8;
        v[o + 8..o + 16].copy_from_slice(&p.value.to_le_bytes());
    }
    v
}

/// A comm as the kernel stores it: at most 15 bytes, NUL-padded.
pub fn comm_key(comm: &str) -> [u8; 16] {
    let mut key = [0u8; 16];
    let n = comm.len().min(15);
    key[..n].copy_from_slice(&comm.as_bytes()[..n]);
    key
}

fn attach(
    c: Collector,
    obj: &mut Ebpf,
    config: &LiveConfig,
    user_links: &mut Vec<crate::sys::PerfLink>,
) -> Result<(), CollectError> {
    let kinds = &config.kinds;
    let tracking = config.filter.targets.is_some();
    let prefix = match c {
        Collector::Tracepoint => Some("wt_tracepoint"),
        Collector::User => Some("wt_user"),
        Collector::Perf => Some("wt_perf"),
        _ => None,
    };
    if let Some(prefix) = prefix {
        if tracking && config.filter.follow_children {
            attach_raw(obj, &format!("{prefix}_track_fork"), "sched_process_fork")?;
        }
        if tracking {
            attach_raw(obj, &format!("{prefix}_untrack_exit"), "sched_process_exit")?;
        }
    }
    match c {
        Collector::Tracepoint => {
            let what = "the tracepoint collector (wt_tracepoint)";
            let p: &mut TracePoint = program(obj, "wt_tracepoint", what)?;
            p.load().map_err(|e| attach_error(what, verifier_error(&e)))?;
            let fd = p.fd().map_err(|e| attach_error(what, e))?.try_clone().map_err(|e| attach_error(what, e))?;
            for tp in &config.table.tracepoints {
                let (cat, name) = (&tp.format.category, &tp.format.name);
                if cat == "btf" {
                    attach_raw(obj, &format!("wt_btf_{name}"), name)?;
                    continue;
                }
                let link = crate::sys::attach_tracepoint(tp.format.id, fd.as_fd(), u64::from(tp.format.id))
                    .map_err(|e| attach_error(&format!("tracepoint:{cat}:{name}"), e))?;
                user_links.push(link);
            }
        }
        Collector::User => {
            for (slot, u) in config.table.user.iter().enumerate() {
                let prog = if u.ret { "wt_uretprobe" } else { "wt_uprobe" };
                let what = format!("{} ({}, offset {:#x})", u.probe, u.path.display(), u.offset);
                let p: &mut UProbe = program(obj, prog, &what)?;
                if p.fd().is_err() {
                    p.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
                }
                let fd = p.fd().map_err(|e| attach_error(&what, e))?;
                let link = crate::sys::attach_uprobe(
                    &u.path,
                    u.offset,
                    u.semaphore.unwrap_or(0),
                    u.ret,
                    fd.as_fd(),
                    slot as u64,
                )
                .map_err(|e| attach_error(&what, e))?;
                user_links.push(link);
            }
        }
        Collector::Perf => {
            let cpus = aya::util::online_cpus()
                .map_err(|(what, e)| attach_error("perf events", format!("cannot list CPUs ({what}): {e}")))?;
            for p in &config.table.perf {
                let what = format!("software:{}", p.name);
                let event = software_event(p.event).ok_or_else(|| attach_error(&what, "unknown software event"))?;
                let prog: &mut PerfEvent = program(obj, &format!("wt_perf_{}", p.event), &what)?;
                prog.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
                let policy = match p.freq {
                    Some(hz) => SamplePolicy::Frequency(hz),
                    None => SamplePolicy::Period(p.period),
                };
                for cpu in &cpus {
                    prog.attach(
                        PerfEventConfig::Software(event),
                        PerfEventScope::AllProcessesOneCpu { cpu: *cpu },
                        policy,
                        false,
                    )
                    .map_err(|e| attach_error(&format!("{what} on CPU {cpu}"), e))?;
                }
            }
        }
        _ => {}
    }
    match c {
        Collector::Syscalls => {
            if kinds.contains(&Kind::SysEnter) {
                attach_raw(obj, "wt_sys_enter", "sys_enter")?;
            }
            if kinds.contains(&Kind::SysExit) {
                attach_raw(obj, "wt_sys_exit", "sys_exit")?;
            }
            if tracking && config.filter.follow_children {
                attach_raw(obj, "wt_syscalls_track_fork", "sched_process_fork")?;
            }
            if tracking {
                attach_raw(obj, "wt_syscalls_untrack_exit", "sched_process_exit")?;
            }
        }
        Collector::Proc => {
            if kinds.contains(&Kind::Exec) {
                attach_tp(obj, "wt_execve_enter", "syscalls", "sys_enter_execve")?;
                attach_tp(obj, "wt_execveat_enter", "syscalls", "sys_enter_execveat")?;
                attach_tp(obj, "wt_execve_exit", "syscalls", "sys_exit_execve")?;
                attach_tp(obj, "wt_execveat_exit", "syscalls", "sys_exit_execveat")?;
            }
            if kinds.contains(&Kind::Fork) || (tracking && config.filter.follow_children) {
                attach_raw(obj, "wt_fork", "sched_process_fork")?;
            }
            if kinds.contains(&Kind::Exit) || tracking {
                attach_raw(obj, "wt_exit", "sched_process_exit")?;
            }
        }
        Collector::File => {
            for sys in ["open", "openat", "openat2", "creat"] {
                attach_tp(obj, &format!("wt_open_enter_{sys}"), "syscalls", &format!("sys_enter_{sys}"))?;
                attach_tp(obj, &format!("wt_open_exit_{sys}"), "syscalls", &format!("sys_exit_{sys}"))?;
            }
            if tracking && config.filter.follow_children {
                attach_raw(obj, "wt_file_track_fork", "sched_process_fork")?;
            }
            if tracking {
                attach_raw(obj, "wt_file_untrack_exit", "sched_process_exit")?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Attach the aggregation collector's programs to the sites that have actions.
fn attach_aggs(obj: &mut Ebpf, config: &LiveConfig, links: &mut Vec<crate::sys::PerfLink>) -> Result<(), CollectError> {
    let f = &config.agg_filter;
    if f.targets.is_some() && f.follow_children {
        attach_raw(obj, "wt_agg_track_fork", "sched_process_fork")?;
    }
    // The exit program also forgets the starts of a thread's intervals.
    if f.targets.is_some() || !tid_keyed_aggs(&config.aggs).is_empty() {
        attach_raw(obj, "wt_agg_untrack_exit", "sched_process_exit")?;
    }
    let mut fd = None;
    for site in &config.aggs {
        match &site.attach {
            SiteAttach::SysEnter => attach_raw(obj, "wt_agg_sys_enter", "sys_enter")?,
            SiteAttach::SysExit => attach_raw(obj, "wt_agg_sys_exit", "sys_exit")?,
            SiteAttach::Tracepoint { id, name } => {
                let what = "the aggregation collector (wt_agg_tracepoint)";
                if fd.is_none() {
                    let p: &mut TracePoint = program(obj, "wt_agg_tracepoint", what)?;
                    p.load().map_err(|e| attach_error(what, verifier_error(&e)))?;
                    let owned =
                        p.fd().map_err(|e| attach_error(what, e))?.try_clone().map_err(|e| attach_error(what, e))?;
                    fd = Some(owned);
                }
                let Some(fd) = fd.as_ref() else { continue };
                let link = crate::sys::attach_tracepoint(*id, fd.as_fd(), u64::from(site.site))
                    .map_err(|e| attach_error(&format!("tracepoint:{name} (aggregation)"), e))?;
                links.push(link);
            }
        }
    }
    Ok(())
}

fn software_event(config: u32) -> Option<SoftwareEvent> {
    use SoftwareEvent::*;
    [
        CpuClock,
        TaskClock,
        PageFaults,
        ContextSwitches,
        CpuMigrations,
        PageFaultsMin,
        PageFaultsMaj,
        AlignmentFaults,
        EmulationFaults,
        Dummy,
        BpfOutput,
        CgroupSwitches,
    ]
    .into_iter()
    .find(|e| *e as u32 == config)
}

/// Detach and unload one collector program (the maps stay).
fn detach(prog: &mut aya::programs::Program) {
    use aya::programs::Program;
    let _ = match prog {
        Program::TracePoint(p) => p.unload(),
        Program::RawTracePoint(p) => p.unload(),
        Program::PerfEvent(p) => p.unload(),
        Program::UProbe(p) => p.unload(),
        _ => Ok(()),
    };
}

/// A raw tracepoint: no kernel BTF to parse for it, unlike a BTF-typed one.
fn attach_raw(obj: &mut Ebpf, prog: &str, event: &str) -> Result<(), CollectError> {
    let what = format!("raw_tp/{event} ({prog})");
    let p: &mut RawTracePoint = program(obj, prog, &what)?;
    p.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
    p.attach(event).map_err(|e| attach_error(&what, e))?;
    Ok(())
}

fn attach_tp(obj: &mut Ebpf, prog: &str, category: &str, name: &str) -> Result<(), CollectError> {
    let what = format!("tracepoint:{category}:{name} ({prog})");
    let p: &mut TracePoint = program(obj, prog, &what)?;
    p.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
    p.attach(category, name).map_err(|e| attach_error(&what, e))?;
    Ok(())
}

/// A collector program, typed as the attach type it was written for.
fn program<'a, T>(obj: &'a mut Ebpf, prog: &str, what: &str) -> Result<&'a mut T, CollectError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = obj.program_mut(prog).ok_or_else(|| attach_error(what, "program missing from the collector"))?;
    p.try_into().map_err(|e| attach_error(what, e))
}

fn attach_error(what: &str, reason: impl std::fmt::Display) -> CollectError {
    CollectError::Attach { what: what.to_string(), reason: reason.to_string() }
}

fn verifier_error(e: &aya::programs::ProgramError) -> String {
    let full = format!("{e:#}");
    let tail: Vec<&str> = full.lines().rev().take(6).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

struct Drainer {
    rings: Vec<RingBuf<MapData>>,
    tx: ChunkSender,
    stop: Arc<AtomicBool>,
    malformed: Arc<AtomicU64>,
}

impl Drainer {
    fn run(mut self) {
        let mut chunk = Chunk::with_capacity(CHUNK_BYTES + 4096);
        loop {
            // Once stopping, the collectors are detached: this pass is the last, and it
            // reads everything they wrote, still within the queue's bound (the pipeline
            // keeps taking chunks until this thread is done).
            let stopping = self.stop.load(Ordering::Relaxed);
            self.tx.wait_for_room();
            let got = self.drain_once(&mut chunk);
            if !chunk.bytes.is_empty() {
                self.tx.send(&mut chunk);
            }
            if stopping {
                return;
            }
            if got == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn drain_once(&mut self, chunk: &mut Chunk) -> usize {
        let mut n = 0;
        for ring in &mut self.rings {
            while let Some(item) = ring.next() {
                n += 1;
                match wasmtap_abi::check_record(&item) {
                    Ok((_, size)) => {
                        chunk.bytes.extend_from_slice(&item[..size]);
                        chunk.records += 1;
                    }
                    Err(_) => {
                        self.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drop(item);
                if chunk.bytes.len() >= CHUNK_BYTES {
                    self.tx.send(chunk);
                    self.tx.wait_for_room();
                }
            }
        }
        n
    }
}

/// The drain thread's end of the pipeline. It never drops: past [`BYTES_IN_FLIGHT`]
/// queued bytes the thread stops draining ([`ChunkSender::wait_for_room`]), the rings
/// fill, and the kernel counts the events it cannot write in their probes' rows.
struct ChunkSender {
    tx: super::queue::QueueSender,
    drops: Arc<AtomicU64>,
}

impl ChunkSender {
    /// Hand a chunk to the pipeline; its records count as dropped only if the pipeline
    /// is gone.
    fn send(&self, chunk: &mut Chunk) {
        let full = std::mem::replace(chunk, Chunk::with_capacity(CHUNK_BYTES + 4096));
        if let Err(lost) = self.tx.send(full) {
            self.drops.fetch_add(lost.records, Ordering::Relaxed);
        }
    }

    /// Backpressure: wait while the pipeline is [`BYTES_IN_FLIGHT`] or more behind, also
    /// for the last drain after `Live::stop`; returns at once when the pipeline is gone.
    fn wait_for_room(&self) {
        self.tx.wait_for_room();
    }
}

/// The pipeline's end: chunks in the order the rings gave them.
pub struct ChunkReceiver {
    rx: super::queue::QueueReceiver,
}

impl ChunkReceiver {
    /// The next chunk, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Chunk, std::sync::mpsc::RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// The most bytes of chunks queued at once, in resident pages.
    pub fn peak_bytes(&self) -> u64 {
        self.rx.peak_bytes()
    }
}

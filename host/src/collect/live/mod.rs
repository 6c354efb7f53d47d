//! The live event source: loads the collectors with aya, writes the kernel-side
//! filters into their maps, and drains their ring buffers on a thread of its own so a
//! slow plugin never stalls the kernel side: when the pipeline falls too far behind,
//! the thread stops draining and the kernel counts what it cannot write, per probe
//! ([`super::counter_rows`]). Needs the capabilities in [`crate::privilege::ATTACH`].
//!
//! Ring buffers are written with `BPF_RB_NO_WAKEUP` (a wakeup costs a VM exit per event
//! on these machines), so the drain thread polls every millisecond instead of waiting.
//!
//! Here: [`Live`] (start, counters, stop). Beside it: `load.rs` (the collectors' objects,
//! globals, ring sizes and kernel-side filters), `attach.rs` (programs attached and
//! detached), `drain.rs` (the drain thread and its end of the queue).

mod attach;
mod drain;
mod load;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use std::os::fd::AsFd;

use aya::maps::{Array, ArrayOfMaps, HashMap, MapData, PerCpuArray};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint, TracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};
use wasmtap_abi::Kind;

use super::counter_rows::{self, writable_by};
use super::map_sizes::MapSizes;
use super::probes::{collector_of, Collector};
use super::table::{self, Pred, ProbeTable, KERNEL_PREDS_MAX};
use super::Chunk;
use crate::accounting::{AggLosses, KernelCounters, KindCounters, LossReason};
use crate::collect::agg_maps::{
    agg_ids, sys_hist_entries, tid_aggs_bytes, tid_keyed_aggs, KernelValues, SchedTp, SiteAttach, SiteConfig, AGG_IDS,
    VALUES_MAX,
};

use attach::*;
use drain::*;
use load::*;

pub use drain::ChunkReceiver;
pub use load::{comm_key, preds_bytes, prefetch_loader};

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
    #[error("{0} kernel aggregations time intervals by thread; at most {max} may", max = crate::collect::agg_maps::TID_AGGS_MAX)]
    TooManyTidAggs(usize),
}

/// Filters applied in the kernel, for every collector.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct KernelFilter {
    /// Only these processes (`-p`, `-c`), plus their descendants if `follow_children`.
    pub targets: Option<Vec<u32>>,
    pub follow_children: bool,
    pub uids: Option<Vec<u32>>,
    /// The effective uid must be in `uids` too, not only the real one (a tenant's scope:
    /// a setuid program the user starts is not the user's to trace).
    pub effective_uids: bool,
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
    /// A tenant's executor, which runs the plugins: never traced either.
    pub executor_tgid: Option<u32>,
    /// At most this many events a second reach the host, over every collector of the
    /// run together ([`EventQuota`]); the rest are lost in the kernel under `quota`.
    pub quota: Option<EventQuota>,
}

/// An events-per-second quota as the kernel keeps it: a budget per window, shared by
/// every collector of the run, each window started by the host (`bpf/filter.bpf.h`).
/// Windows of 100 ms, so that a flood is cut off within a tenth of a second rather than
/// let through for a whole second at a time; quotas under 100 a second keep one-second
/// windows, so that they are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventQuota {
    pub per_sec: u64,
}

impl EventQuota {
    /// Events let through per window, and the window.
    pub fn window(self) -> (u64, Duration) {
        if self.per_sec >= 100 {
            (self.per_sec / 10, Duration::from_millis(100))
        } else {
            (self.per_sec.max(1), Duration::from_secs(1))
        }
    }
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
        // The scheduler's BTF tracepoints need the kernel's BTF to load: parsed meanwhile.
        let sched = config.aggs.iter().any(|s| matches!(s.attach, SiteAttach::Tracepoint { btf: Some(_), .. }));
        let mut btf =
            sched.then(|| std::thread::Builder::new().name("wasmtap-btf".into()).spawn(aya::Btf::from_sys_fs));
        let mut loader = take_loader();
        for (map, entries) in &config.map_sizes.0 {
            loader.map_max_entries(map, *entries);
        }
        if !config.aggs.is_empty() {
            let c = Collector::Agg;
            loader.map_max_entries("AGG_SYS_HIST", sys_hist_entries(&config.aggs));
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
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(quota) = config.quota {
            let budget = share_quota(&mut objects)?;
            start_windows(budget, quota.window().1, stop.clone()).map_err(CollectError::Thread)?;
        }
        for (c, obj) in &objects {
            freeze(*c, obj)?;
        }
        let mut rings = Vec::new();
        let mut ring_bytes = 0;
        let mut values = None;
        // In order: the aggregation collector first, so its programs run first (a
        // latency's start is stamped after the aggregation's own work, its end before).
        for (c, obj) in &mut objects {
            let c = *c;
            if c == Collector::Agg {
                let btf = btf.take().map(|job| match job.map(|j| j.join()) {
                    Ok(Ok(Ok(btf))) => Ok(btf),
                    Ok(Ok(Err(e))) => Err(e.to_string()),
                    Ok(Err(_)) => Err("its parser panicked".to_string()),
                    Err(e) => Err(e.to_string()),
                });
                attach_aggs(obj, config, btf, &mut user_links)?;
                let missing = |map| CollectError::Map { collector: c, map, reason: "missing".into() };
                let map = obj.take_map("AGG_VALUES").ok_or_else(|| missing("AGG_VALUES"))?;
                let array = obj.take_map("AGG_ARRAY").ok_or_else(|| missing("AGG_ARRAY"))?;
                let comm_ids = obj.take_map("AGG_COMM_IDS").ok_or_else(|| missing("AGG_COMM_IDS"))?;
                let comm_values = obj.take_map("AGG_COMM_VALUES").ok_or_else(|| missing("AGG_COMM_VALUES"))?;
                let sys_hist = obj.take_map("AGG_SYS_HIST").ok_or_else(|| missing("AGG_SYS_HIST"))?;
                values = Some(
                    KernelValues::new(map, array, comm_ids, comm_values, sys_hist)
                        .map_err(|reason| CollectError::Map { collector: c, map: "AGG_VALUES", reason })?,
                );
                continue;
            }
            attach(c, obj, config, &mut user_links)?;
            let ring = obj.take_map("EVENTS").ok_or(CollectError::Map {
                collector: c,
                map: "EVENTS",
                reason: "missing".into(),
            })?;
            let aya::maps::Map::RingBuf(ring) = ring else {
                return Err(CollectError::Map { collector: c, map: "EVENTS", reason: "not a ring buffer".into() });
            };
            let ring = crate::sys::ring::Ring::open(ring.fd().as_fd()).map_err(|e| CollectError::Map {
                collector: c,
                map: "EVENTS",
                reason: e.to_string(),
            })?;
            ring_bytes += ring.resident_bytes();
            rings.push(ring);
        }
        let (tx, rx) = crate::collect::queue::bounded(BYTES_IN_FLIGHT);
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
        prepare_reads();
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

    /// Bytes of ring buffer mapped into the host: each ring's data once and two pages of
    /// positions ([`crate::sys::ring`]). The kernel maps every page when the ring is
    /// mapped, so all of it is resident from the start.
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
        let mut losses: Vec<(LossReason, u64)> = LossReason::ALL.into_iter().zip(totals).collect();
        losses.push((LossReason::BpfBusy, self.busy_misses()));
        losses
    }

    /// Events the kernel did not run the collectors' programs for: a BPF program was
    /// already running on that CPU. A bpf(2) call per program, as the dispatch thread's
    /// seccomp filter allows.
    fn busy_misses(&self) -> u64 {
        let programs = self.objects.iter().flat_map(|(_, obj)| obj.programs());
        let fds = programs.filter_map(|(_, p)| p.fd().ok());
        fds.filter_map(|fd| crate::sys::bpf::prog_recursion_misses(fd.as_fd()).ok()).sum()
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

/// Read now, on the calling thread, what reading maps needs from a file (the number of
/// possible CPUs): [`Live::prepare_reads`], for maps another process handed over.
pub fn prepare_reads() {
    let _ = aya::util::nr_cpus();
}

/// One quota budget for the run, set in every collector's `QUOTA` before anything is
/// attached (each collector is an object of its own, with maps of its own).
fn share_quota(objects: &mut [(Collector, Ebpf)]) -> Result<Array<MapData, u64>, CollectError> {
    let first = objects.first().map_or(Collector::Syscalls, |(c, _)| *c);
    let budget: Array<MapData, u64> =
        Array::create(1, 0).map_err(|e| CollectError::Map { collector: first, map: "QUOTA", reason: e.to_string() })?;
    for (c, obj) in objects {
        let c = *c;
        let err = |e: aya::maps::MapError| CollectError::Map { collector: c, map: "QUOTA", reason: e.to_string() };
        let mut quota: ArrayOfMaps<_, Array<MapData, u64>> =
            ArrayOfMaps::try_from(map_of(c, obj, "QUOTA")?).map_err(err)?;
        quota.set(0, &budget, 0).map_err(err)?;
    }
    Ok(budget)
}

/// Start a window of the quota every `window` until the run stops: the events let
/// through count from zero again. A thread of its own, so that a drain thread held up
/// by a slow plugin does not hold up the windows (its losses are the ring's, not the
/// quota's). Late, it lets fewer events through, never more.
fn start_windows(mut budget: Array<MapData, u64>, window: Duration, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    let thread = move || {
        let mut next = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            next += window;
            std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
            // A failed write leaves the window closed: fewer events, never more.
            let _ = budget.set(0, 0, 0);
        }
    };
    std::thread::Builder::new().name("wasmtap-quota".into()).spawn(thread).map(drop)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_is_a_tenth_per_100_ms_or_whole_per_second_when_small() {
        let w = |per_sec| EventQuota { per_sec }.window();
        assert_eq!(w(2_000_000), (200_000, Duration::from_millis(100)));
        assert_eq!(w(100), (10, Duration::from_millis(100)));
        assert_eq!(w(99), (99, Duration::from_secs(1)));
        assert_eq!(w(1), (1, Duration::from_secs(1)));
    }
}

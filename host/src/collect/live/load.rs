//! Loading the collectors: their objects, the loader (made early, on a thread), the
//! `cfg_*` globals, ring sizes, and the kernel-side filters written into their maps.

use super::*;

pub(super) static SYSCALLS_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syscalls.bpf.o"));
pub(super) static PROC_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/proc.bpf.o"));
pub(super) static FILE_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/file.bpf.o"));
pub(super) static TRACEPOINT_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracepoint.bpf.o"));
pub(super) static USER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/user.bpf.o"));
pub(super) static PERF_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/perf.bpf.o"));
pub(super) static AGG_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agg.bpf.o"));

/// Ring buffer of the syscall collector: ~150 k syscall records, 100 ms of a storm at
/// 1.5 M calls a second, before the queue behind it takes almost as many again. Measured:
/// a stream of 10 M getppid calls at 1 M a second, and 2-second bursts up to the 1.3 to
/// 1.5 M a second one traced CPU makes, lose nothing; the ring was 64 MiB (128 MiB of
/// RSS) before.
pub(super) const RING_BYTES: u32 = 16 << 20;
/// Ring buffer of the tracepoint, user-probe and perf collectors.
pub(super) const SMALL_RING_BYTES: u32 = 16 << 20;
/// Ring buffer of the process collector: execs, forks and exits come thousands a second
/// at most; 2 MiB holds ~1,000 full execs or ~20,000 exits, drained every millisecond.
/// (A ring's pages are all resident in the host from the start: [`crate::sys::ring`].)
pub(super) const PROC_RING_BYTES: u32 = 2 << 20;
/// Ring buffer of the file collector: 8 MiB holds ~40,000 opens, ~30 ms of an
/// open storm at full speed on one CPU.
pub(super) const FILE_RING_BYTES: u32 = 8 << 20;
/// A loader made early by [`prefetch_loader`], for [`Live::start`] to take.
pub(super) static LOADER_JOB: std::sync::Mutex<Option<JoinHandle<EbpfLoader<'static>>>> = std::sync::Mutex::new(None);

/// Make the run's loader on a thread now, for a [`Live::start`] to come: making it parses
/// the kernel's BTF, the longest step of a start, which needs nothing from the plugins.
pub fn prefetch_loader() {
    let job = std::thread::Builder::new().name("wasmtap-btf".into()).spawn(EbpfLoader::new);
    if let Ok(job) = job {
        *LOADER_JOB.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
    }
}

/// The prefetched loader, or a new one.
pub(super) fn take_loader() -> EbpfLoader<'static> {
    let job = LOADER_JOB.lock().unwrap_or_else(|e| e.into_inner()).take();
    job.and_then(|j| j.join().ok()).unwrap_or_default()
}

/// The values of a collector's `cfg_*` globals; the loader borrows them until it is
/// dropped, so they are built before it.
pub(super) struct Globals {
    pub(super) self_tgid: u32,
    pub(super) meter_tgid: u32,
    pub(super) executor_tgid: u32,
    pub(super) targets: u32,
    pub(super) follow: u32,
    pub(super) uids: u32,
    pub(super) uid: u32,
    pub(super) euid: u32,
    pub(super) comms: u32,
    pub(super) cgroups: u32,
    pub(super) levels: u32,
    pub(super) syscalls: u32,
    pub(super) args: u32,
    pub(super) emit_fork: u32,
    pub(super) emit_exit: u32,
    pub(super) quota_per_window: u64,
    /// The aggregation id + 1 of the interval that is all the syscall sites do; 0: none.
    pub(super) agg_sys_interval: u32,
}

impl Globals {
    pub(super) fn new(f: &KernelFilter, config: &LiveConfig) -> Self {
        let flag = |b: bool| u32::from(b);
        Globals {
            self_tgid: std::process::id(),
            meter_tgid: config.meter_tgid.unwrap_or(0),
            executor_tgid: config.executor_tgid.unwrap_or(0),
            targets: flag(f.targets.is_some()),
            follow: flag(f.follow_children),
            // One uid (a tenant's own scope) is compared with a constant; more, looked up.
            uids: match f.uids.as_deref() {
                None => 0,
                Some([_]) => 2,
                Some(_) => 1,
            },
            uid: f.uids.as_deref().and_then(|u| u.first().copied()).unwrap_or(0),
            euid: flag(f.uids.is_some() && f.effective_uids),
            comms: flag(f.comms.is_some()),
            cgroups: flag(f.cgroups.is_some()),
            levels: f.cgroups.iter().flatten().map(|(_, level)| *level).max().unwrap_or(0),
            syscalls: flag(f.syscalls.is_some()),
            args: flag(!config.table.syscall_preds.is_empty()),
            emit_fork: flag(config.kinds.contains(&Kind::Fork)),
            emit_exit: flag(config.kinds.contains(&Kind::Exit)),
            quota_per_window: config.quota.map_or(0, |q| q.window().0),
            agg_sys_interval: crate::collect::agg_maps::sys_interval(&config.aggs).map_or(0, |id| id + 1),
        }
    }
}

/// Load collector `c` with the run's one loader. Every collector is loaded by it: a loader
/// parses the kernel's BTF when made, the longest step of a start and the largest
/// allocation of a run (about 16 MiB), so there is one. The globals of a collector stay
/// set for the next ones: those every collector has must exist, the others may not.
pub(super) fn load<'a>(loader: &mut EbpfLoader<'a>, c: Collector, g: &'a Globals) -> Result<Ebpf, CollectError> {
    let ring = ring_size(c);
    loader
        // The aggregation collector's AGG_TASK_STARTS is task storage, which aya makes
        // but has no typed map for; the host never reads it.
        .allow_unsupported_maps()
        .map_max_entries("EVENTS", ring)
        .map_max_entries("AGG_VALUES", VALUES_MAX)
        .override_global("cfg_filter_cgroups", &g.cgroups, true)
        .override_global("cfg_cgroup_levels", &g.levels, true)
        .override_global("cfg_self_tgid", &g.self_tgid, true)
        .override_global("cfg_meter_tgid", &g.meter_tgid, true)
        .override_global("cfg_executor_tgid", &g.executor_tgid, true)
        .override_global("cfg_filter_targets", &g.targets, true)
        .override_global("cfg_follow_children", &g.follow, true)
        .override_global("cfg_filter_uids", &g.uids, true)
        .override_global("cfg_uid", &g.uid, true)
        .override_global("cfg_filter_euid", &g.euid, true)
        .override_global("cfg_filter_comms", &g.comms, true)
        .override_global("cfg_filter_syscalls", &g.syscalls, false)
        .override_global("cfg_filter_args", &g.args, false)
        .override_global("cfg_emit_fork", &g.emit_fork, false)
        .override_global("cfg_emit_exit", &g.emit_exit, false)
        .override_global("cfg_quota_per_window", &g.quota_per_window, true)
        .override_global("cfg_agg_sys_interval", &g.agg_sys_interval, false);
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
pub(super) fn ring_size(c: Collector) -> u32 {
    match c {
        Collector::Syscalls => RING_BYTES,
        Collector::Proc => PROC_RING_BYTES,
        Collector::File => FILE_RING_BYTES,
        // Nothing is streamed; the smallest ring there is (a page).
        Collector::Agg => 4096,
        _ => SMALL_RING_BYTES,
    }
}

pub(super) fn map_of<'a>(
    c: Collector,
    obj: &'a mut Ebpf,
    map: &'static str,
) -> Result<&'a mut aya::maps::Map, CollectError> {
    obj.map_mut(map).ok_or(CollectError::Map { collector: c, map, reason: "missing".into() })
}

pub(super) fn configure(
    c: Collector,
    obj: &mut Ebpf,
    f: &KernelFilter,
    config: &LiveConfig,
) -> Result<(), CollectError> {
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
            let mut m: HashMap<_, u32, [u8; 96]> =
                HashMap::try_from(map_of(c, obj, "TP_CONFIG")?).map_err(map_err("TP_CONFIG"))?;
            for (slot, tp) in table.tracepoints.iter().enumerate() {
                let mut v = [0u8; 96];
                let fmt = &tp.format;
                v[0..2].copy_from_slice(&(fmt.fixed_size().min(u16::MAX as u32) as u16).to_le_bytes());
                let dynamic: Vec<&crate::collect::tracefs::Field> = fmt.dynamic_fields().take(4).collect();
                v[2] = dynamic.len() as u8;
                v[3] = tp.stacks;
                for (i, f) in dynamic.iter().enumerate() {
                    let off = f.offset as u16 | if f.relative { 0x8000 } else { 0 };
                    v[4 + 2 * i..6 + 2 * i].copy_from_slice(&off.to_le_bytes());
                }
                v[12..16].copy_from_slice(&(slot as u32).to_le_bytes());
                v[16..80].copy_from_slice(&preds_bytes(&tp.preds));
                let strings = &tp.strings[..tp.strings.len().min(table::STRINGS_MAX)];
                v[80] = strings.len() as u8;
                for (i, off) in strings.iter().enumerate() {
                    v[82 + 2 * i..84 + 2 * i].copy_from_slice(&off.to_le_bytes());
                }
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
                let strings = &u.strings[..u.strings.len().min(table::STRINGS_MAX)];
                v[3] = strings.len() as u8;
                v[4..4 + strings.len()].copy_from_slice(strings);
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
            let mut m: Array<_, [u8; crate::collect::agg_maps::SITE_BYTES]> =
                Array::try_from(map_of(c, obj, "AGG_SITES")?).map_err(map_err("AGG_SITES"))?;
            for site in &config.aggs {
                let bytes: [u8; crate::collect::agg_maps::SITE_BYTES] =
                    site.to_bytes().try_into().map_err(|_| map_err("AGG_SITES")(aya::maps::MapError::KeyNotFound))?;
                m.set(site.site, bytes, 0).map_err(map_err("AGG_SITES"))?;
            }
            let ids = tid_keyed_aggs(&config.aggs);
            let bytes = tid_aggs_bytes(&ids).ok_or(CollectError::TooManyTidAggs(ids.len()))?;
            let mut m: Array<_, [u8; crate::collect::agg_maps::TID_AGGS_BYTES]> =
                Array::try_from(map_of(c, obj, "AGG_TID_AGGS")?).map_err(map_err("AGG_TID_AGGS"))?;
            m.set(0, bytes, 0).map_err(map_err("AGG_TID_AGGS"))?;
        }
        _ => {}
    }
    Ok(())
}

/// The maps that say what a run may see and how its collectors read it: its scope and
/// filters, the probes' settings, the quota's budget, and the threads the kernel keeps
/// in scope. Written once by [`configure`] (and the quota), then frozen: the run gives up
/// root once attached, and a plugin that escaped the sandbox, holding the run's own map
/// fds, still could not widen its scope or point a collector at other memory. The
/// collectors' programs keep writing the ones they keep (TARGETS, SCOPED_TIDS).
pub(super) const FROZEN: &[&str] = &[
    "UIDS",
    "COMMS",
    "CGROUPS",
    "TARGETS",
    "TARGETS_GEN",
    "SYSCALLS",
    "ARG_PREDS",
    "TP_CONFIG",
    "USER_CONFIG",
    "PERF_CONFIG",
    "AGG_SITES",
    "AGG_TID_AGGS",
    "SCOPED_TIDS",
    "QUOTA",
];

/// Freeze collector `c`'s maps of [`FROZEN`] that it has.
pub(super) fn freeze(c: Collector, obj: &Ebpf) -> Result<(), CollectError> {
    use aya::maps::Map;
    for &name in FROZEN {
        let Some(map) = obj.map(name) else { continue };
        let data = match map {
            Map::Array(m) | Map::HashMap(m) | Map::ArrayOfMaps(m) | Map::PerCpuArray(m) => m,
            _ => return Err(CollectError::Map { collector: c, map: name, reason: "not an array or hash map".into() }),
        };
        crate::sys::freeze_map(data.fd().as_fd()).map_err(|e| CollectError::Map {
            collector: c,
            map: name,
            reason: format!("cannot freeze: {e}"),
        })?;
    }
    Ok(())
}

/// `struct wt_preds`: four `struct wt_pred` of 16 bytes; op 0 ends the list.
pub(crate) const PREDS_BYTES: usize = 16 * KERNEL_PREDS_MAX;

pub fn preds_bytes(preds: &[Pred]) -> [u8; PREDS_BYTES] {
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

//! The kernel side of kernel aggregations (`bpf/agg.bpf.c`): what the host writes into
//! `AGG_SITES`, and reading `AGG_VALUES`, the per-CPU hash of aggregated values, and
//! `AGG_ARRAY`, the per-CPU array where keys that are small integers have a slot each.
//! The layouts mirror `struct wt_agg_*` in `bpf/wasmtap.h`.

use aya::maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, PerCpuValues};

/// Key parts per aggregation (`WT_AGG_KEYS`).
pub const KEYS_MAX: usize = 4;
/// Actions per probe site (`WT_AGG_ACTIONS`).
pub const ACTIONS_PER_SITE: usize = 8;
/// Probe sites (`WT_AGG_SITES`): sys_enter, sys_exit, the scheduler's BTF tracepoints,
/// then tracefs tracepoints.
pub const SITES_MAX: usize = 64;
/// The first site of a tracefs tracepoint (`WT_AGG_TP_SITES`).
pub const TP_SITES: u32 = 5;
/// `struct wt_agg_action`.
pub const ACTION_BYTES: usize = 208;
/// `struct wt_agg_site`.
pub const SITE_BYTES: usize = 8 + ACTIONS_PER_SITE * ACTION_BYTES;
/// `struct wt_agg_key`.
pub const KEY_BYTES: usize = 56;
/// The COUNTERS row of the aggregation collector (`WT_AGG_KIND`).
pub const AGG_KIND: u32 = 9;
/// Keys the kernel keeps, over every aggregation of a run.
pub const VALUES_MAX: u32 = 16384;

/// Aggregation ids that may keep their values in `AGG_ARRAY` (`WT_AGG_ARRAY_AGGS`).
pub const ARRAY_AGGS: u32 = 8;
/// Slots of each in `AGG_ARRAY` (`WT_AGG_ARRAY_SLOTS`).
pub const ARRAY_SLOTS: u32 = 512;

/// Where an aggregation's values go (`enum wt_agg_slots`): the hash, or a slot of the
/// array named by its key. A key without a slot (a syscall number past the array, an
/// aggregation id past [`ARRAY_AGGS`]) goes to the hash. Only values that a reset
/// subtracts (counts, sums, histogram buckets) go to the array: a reset of `min` or
/// `max` deletes keys, which an array cannot do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Slots {
    #[default]
    Hash,
    /// The key is the syscall number alone: slot = number.
    Syscall,
    /// No key: slot 0.
    Single,
    /// No key, a histogram: slot = `ARRAY_SLOTS / 2` + bucket.
    Buckets,
    /// The key is the comm alone: a slot of `AGG_COMM_VALUES`, by the index the kernel
    /// gave the comm (`AGG_COMM_IDS`).
    Comm,
    /// The key is the syscall number alone, a log2 histogram: a slot of `AGG_SYS_HIST`
    /// per syscall and non-negative bucket.
    SyscallBuckets,
}

impl Slots {
    /// `enum wt_agg_slots`.
    pub fn code(self) -> u8 {
        match self {
            Slots::Hash => 0,
            Slots::Syscall => 1,
            Slots::Single => 2,
            Slots::Buckets => 3,
            Slots::Comm => 4,
            Slots::SyscallBuckets => 5,
        }
    }

    /// The key of `slot`, as the hash would hold it.
    fn key(self, slot: u32) -> RawKey {
        match self {
            Slots::Syscall => RawKey { parts: [u64::from(slot), 0, 0, 0], ..RawKey::default() },
            Slots::Buckets => RawKey { bucket: slot as i32 - (ARRAY_SLOTS / 2) as i32, ..RawKey::default() },
            Slots::Hash | Slots::Single | Slots::Comm | Slots::SyscallBuckets => RawKey::default(),
        }
    }

    /// The slots a key can have: every syscall number; slot 0 alone; the buckets of a
    /// log2 histogram (-64 to 64) and of a linear one (0 to 255), from the middle on.
    fn used(self) -> std::ops::Range<u32> {
        match self {
            Slots::Syscall => 0..ARRAY_SLOTS,
            Slots::Single => 0..1,
            Slots::Buckets => ARRAY_SLOTS / 2 - 64..ARRAY_SLOTS,
            Slots::Hash | Slots::Comm | Slots::SyscallBuckets => 0..0,
        }
    }

    /// The slot of `key`, if it has one.
    pub fn slot(self, key: &RawKey) -> Option<u32> {
        let slot = match self {
            Slots::Hash | Slots::Comm => return None,
            Slots::SyscallBuckets => {
                let bucket = u32::try_from(key.bucket).ok().filter(|b| *b < SYS_HIST_USED)?;
                let nr = u32::try_from(key.parts[0]).ok().filter(|nr| *nr < NR_SYSCALLS)?;
                return Some(nr * SYS_HIST_STRIDE + bucket);
            }
            Slots::Syscall => key.parts[0],
            Slots::Single => 0,
            Slots::Buckets => (i64::from(key.bucket) + i64::from(ARRAY_SLOTS / 2)) as u64,
        };
        (slot < u64::from(ARRAY_SLOTS)).then_some(slot as u32)
    }
}

/// Aggregation ids that may keep a log2 histogram keyed by the syscall number in
/// `AGG_SYS_HIST` (`WT_AGG_SYS_HIST_AGGS`).
pub const SYS_HIST_AGGS: u32 = 2;
/// Slots of `AGG_SYS_HIST` per syscall (`WT_AGG_SYS_HIST_STRIDE`): the buckets 0 to 64,
/// then the one marking which of them a CPU has used.
pub const SYS_HIST_STRIDE: u32 = 66;
/// The marking slot (`WT_AGG_SYS_HIST_USED`).
pub const SYS_HIST_USED: u32 = 65;
/// Syscall numbers with a row (`WT_NR_SYSCALLS`).
const NR_SYSCALLS: u32 = crate::collect::table::NR_SYSCALLS;

/// The slots `AGG_SYS_HIST` needs for `sites`: those of each aggregation id up to the
/// largest that uses it; one if none does (a map has at least one).
pub fn sys_hist_entries(sites: &[SiteConfig]) -> u32 {
    let ids = sites.iter().flat_map(|s| &s.actions).filter(|a| a[7] == Slots::SyscallBuckets.code()).map(agg_of);
    ids.max().map_or(1, |m| (m + 1) * NR_SYSCALLS * SYS_HIST_STRIDE)
}

/// Aggregations whose intervals start and end on the current thread, kept with it
/// (`WT_AGG_TASK_STARTS`): those with ids below this.
pub const TASK_STARTS: u32 = 8;

/// Aggregation ids with loss counters of their own in `AGG_LOSSES` (`WT_AGG_IDS`).
pub const AGG_IDS: u32 = 1024;

/// The aggregation id of an encoded action (`struct wt_agg_action`: agg at 0).
fn agg_of(action: &[u8; ACTION_BYTES]) -> u32 {
    u32::from_le_bytes([action[0], action[1], action[2], action[3]])
}

/// The number of aggregation ids the sites use (the largest plus one).
pub fn agg_ids(sites: &[SiteConfig]) -> u32 {
    let ids = sites.iter().flat_map(|s| &s.actions).map(agg_of);
    ids.max().map_or(0, |m| m.saturating_add(1))
}

/// Aggregations whose intervals are keyed by a thread id (`WT_AGG_TID_AGGS`).
pub const TID_AGGS_MAX: usize = 64;
/// `struct wt_agg_tid_aggs`.
pub const TID_AGGS_BYTES: usize = 4 + 4 * TID_AGGS_MAX;

/// The aggregations whose starts are keyed by a thread id in `AGG_STARTS` (`WT_SRC_TID`
/// not kept with the thread, or a field flagged `WT_SRC_TASK`), read back from the
/// encoded actions (`struct wt_agg_action`: role at 4, the correlation's source at 48
/// and flags at 50): the kernel forgets their starts when the thread exits.
pub fn tid_keyed_aggs(sites: &[SiteConfig]) -> Vec<u32> {
    const ROLE_START: u8 = 1;
    const SRC_TID: u8 = 3;
    const SRC_TASK: u8 = 2;
    // Kept with the thread, which takes them when it goes.
    const SRC_CURRENT: u8 = 4;
    const SRC_NAMED: u8 = 8;
    let mut ids: Vec<u32> = sites
        .iter()
        .flat_map(|s| &s.actions)
        .filter(|a| {
            a[4] == ROLE_START && a[50] & (SRC_CURRENT | SRC_NAMED) == 0 && (a[48] == SRC_TID || a[50] & SRC_TASK != 0)
        })
        .map(agg_of)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The aggregation whose interval is all the syscall sites do, if there is one: one
/// action at the entry, starting it on the current thread with no condition but the
/// syscall filter, and one at the exit, ending it (`cfg_agg_sys_interval`; syslatency's
/// shape). The kernel keeps such a start in a per-CPU record of the syscall in flight
/// rather than in task storage. Read back from the encoded actions (`struct
/// wt_agg_action`: role at 4, the correlation's flags at 50, the first condition's
/// operator at 84).
pub fn sys_interval(sites: &[SiteConfig]) -> Option<u32> {
    const ROLE_START: u8 = 1;
    const ROLE_END: u8 = 2;
    const SRC_CURRENT: u8 = 4;
    let one = |attach: SiteAttach| match sites.iter().find(|s| s.attach == attach) {
        Some(SiteConfig { actions, .. }) if actions.len() == 1 && actions[0][50] & SRC_CURRENT != 0 => Some(actions[0]),
        _ => None,
    };
    let (start, end) = (one(SiteAttach::SysEnter)?, one(SiteAttach::SysExit)?);
    let id = agg_of(&start);
    let fits = start[4] == ROLE_START && start[84] == 0 && end[4] == ROLE_END && agg_of(&end) == id;
    (fits && id < TASK_STARTS).then_some(id)
}

/// `struct wt_agg_tid_aggs` for `ids`; none if there are more than the kernel holds.
pub fn tid_aggs_bytes(ids: &[u32]) -> Option<[u8; TID_AGGS_BYTES]> {
    if ids.len() > TID_AGGS_MAX {
        return None;
    }
    let mut b = [0u8; TID_AGGS_BYTES];
    b[0..4].copy_from_slice(&(ids.len() as u32).to_le_bytes());
    for (i, id) in ids.iter().enumerate() {
        b[4 + 4 * i..8 + 4 * i].copy_from_slice(&id.to_le_bytes());
    }
    Some(b)
}

/// Where a probe's events are aggregated.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum SiteAttach {
    SysEnter,
    SysExit,
    /// A tracefs tracepoint, attached with the site number as its cookie, or one of the
    /// scheduler's attached as a BTF tracepoint (`btf`).
    Tracepoint {
        id: u32,
        name: String,
        btf: Option<SchedTp>,
    },
}

/// The scheduler's tracepoints the collector attaches as BTF tracepoints
/// (`wt_agg_sched_*` in `bpf/agg.bpf.c`): the kernel hands the programs the tasks
/// themselves and fills no trace record for them; each program builds the record the
/// tracefs format describes on its stack. Chosen only when the format is the one those
/// programs build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum SchedTp {
    Switch,
    Wakeup,
    WakeupNew,
}

impl SchedTp {
    /// The tracefs layout each program builds: non-common fields as (name, offset, size).
    const SWITCH: &[(&str, u32, u32)] = &[
        ("prev_comm", 8, 16),
        ("prev_pid", 24, 4),
        ("prev_prio", 28, 4),
        ("prev_state", 32, 8),
        ("next_comm", 40, 16),
        ("next_pid", 56, 4),
        ("next_prio", 60, 4),
    ];
    const WAKEUP: &[(&str, u32, u32)] = &[("comm", 8, 16), ("pid", 24, 4), ("prio", 28, 4), ("target_cpu", 32, 4)];

    /// The BTF tracepoint for `format`, if the collector has one that builds this very
    /// layout.
    pub fn of(format: &crate::collect::tracefs::Format) -> Option<SchedTp> {
        let (tp, layout) = match (format.category.as_str(), format.name.as_str()) {
            ("sched", "sched_switch") => (SchedTp::Switch, Self::SWITCH),
            ("sched", "sched_wakeup") => (SchedTp::Wakeup, Self::WAKEUP),
            ("sched", "sched_wakeup_new") => (SchedTp::WakeupNew, Self::WAKEUP),
            _ => return None,
        };
        let fields: Vec<(&str, u32, u32)> =
            format.fields.iter().filter(|f| !f.common).map(|f| (f.name.as_str(), f.offset, f.size)).collect();
        (fields == layout).then_some(tp)
    }

    /// Its fixed site (`WT_AGG_SCHED_*`).
    pub fn site(self) -> u32 {
        match self {
            SchedTp::Switch => 2,
            SchedTp::Wakeup => 3,
            SchedTp::WakeupNew => 4,
        }
    }

    /// Its program and the kernel's name for the tracepoint.
    pub fn program(self) -> (&'static str, &'static str) {
        match self {
            SchedTp::Switch => ("wt_agg_sched_switch", "sched_switch"),
            SchedTp::Wakeup => ("wt_agg_sched_wakeup", "sched_wakeup"),
            SchedTp::WakeupNew => ("wt_agg_sched_wakeup_new", "sched_wakeup_new"),
        }
    }

    /// Offsets of the fields that name a task the program is handed (prev, next, the
    /// woken task): a start keyed by one of them is kept with that task.
    pub fn task_fields(self) -> &'static [u32] {
        match self {
            SchedTp::Switch => &[24, 56],
            SchedTp::Wakeup | SchedTp::WakeupNew => &[24],
        }
    }
}

/// One probe site and the actions it runs, encoded for `AGG_SITES`.
#[derive(Clone, Debug)]
pub struct SiteConfig {
    pub site: u32,
    pub attach: SiteAttach,
    pub actions: Vec<[u8; ACTION_BYTES]>,
    /// `WT_SITE_*`: what the site's actions need beyond the event itself.
    pub flags: u32,
}

/// `WT_SITE_TASKS`: an action's correlation names a thread, to which the scope applies.
pub const SITE_TASKS: u32 = 1;
/// `WT_SITE_DATA`: an action reads the probe's data (a field, a comparison).
pub const SITE_DATA: u32 = 2;

impl SiteConfig {
    /// `struct wt_agg_site`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; SITE_BYTES];
        v[0..4].copy_from_slice(&(self.actions.len().min(ACTIONS_PER_SITE) as u32).to_le_bytes());
        v[4..8].copy_from_slice(&self.flags.to_le_bytes());
        for (i, a) in self.actions.iter().take(ACTIONS_PER_SITE).enumerate() {
            v[8 + i * ACTION_BYTES..8 + (i + 1) * ACTION_BYTES].copy_from_slice(a);
        }
        v
    }
}

/// An aggregation key as the collector builds it (the aggregation id aside).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RawKey {
    /// Histograms: the bucket number of `wasmtap_abi::hist`; otherwise 0.
    pub bucket: i32,
    /// Key part `i` (unless it is the comm) in `parts[i]`.
    pub parts: [u64; KEYS_MAX],
    /// The comm key part, NUL-padded.
    pub comm: [u8; 16],
}

/// Aggregated values of one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawValue {
    pub count: u64,
    pub sum: i64,
    pub min: i64,
    pub max: i64,
}

impl RawValue {
    /// Fold in one sample.
    pub fn add(&mut self, v: i64) {
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        if self.count == 0 || v > self.max {
            self.max = v;
        }
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
    }

    /// Fold in another CPU's values.
    pub fn merge(&mut self, o: &RawValue) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 || o.min < self.min {
            self.min = o.min;
        }
        if self.count == 0 || o.max > self.max {
            self.max = o.max;
        }
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
    }
}

fn decode_key(b: &[u8; KEY_BYTES]) -> (u32, RawKey) {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let mut key = RawKey { bucket: u32_at(4) as i32, ..RawKey::default() };
    for (i, p) in key.parts.iter_mut().enumerate() {
        *p = u64_at(8 + 8 * i);
    }
    key.comm.copy_from_slice(&b[40..56]);
    (u32_at(0), key)
}

/// The inverse of [`decode_key`].
fn encode_key(agg: u32, key: &RawKey) -> [u8; KEY_BYTES] {
    let mut b = [0u8; KEY_BYTES];
    b[0..4].copy_from_slice(&agg.to_le_bytes());
    b[4..8].copy_from_slice(&key.bucket.to_le_bytes());
    for (i, p) in key.parts.iter().enumerate() {
        b[8 + 8 * i..16 + 8 * i].copy_from_slice(&p.to_le_bytes());
    }
    b[40..56].copy_from_slice(&key.comm);
    b
}

fn decode_value(b: &[u8; 32]) -> RawValue {
    let at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    RawValue { count: at(0), sum: at(8) as i64, min: at(16) as i64, max: at(24) as i64 }
}

/// `struct wt_agg_comm_key`: the aggregation id and the comm.
pub const COMM_KEY_BYTES: usize = 20;
/// (Aggregation, comm) pairs the kernel gives an index, over every aggregation keyed by
/// the comm alone (`WT_AGG_COMMS`).
pub const COMMS_MAX: u32 = 8192;

/// The kernel's aggregated values, read by the host.
pub struct KernelValues {
    map: PerCpuHashMap<MapData, [u8; KEY_BYTES], [u8; 32]>,
    array: PerCpuArray<MapData, [u8; 32]>,
    /// (Aggregation, comm) to its index in `comm_values` (`AGG_COMM_IDS`).
    comm_ids: HashMap<MapData, [u8; COMM_KEY_BYTES], u32>,
    comm_values: PerCpuArray<MapData, [u8; 32]>,
    sys_hist: PerCpuArray<MapData, [u8; 16]>,
}

impl KernelValues {
    /// The maps `AGG_VALUES`, `AGG_ARRAY`, `AGG_COMM_IDS`, `AGG_COMM_VALUES` and `AGG_SYS_HIST`.
    pub(super) fn new(
        map: aya::maps::Map,
        array: aya::maps::Map,
        comm_ids: aya::maps::Map,
        comm_values: aya::maps::Map,
        sys_hist: aya::maps::Map,
    ) -> Result<KernelValues, String> {
        let map = PerCpuHashMap::try_from(map).map_err(|e| e.to_string())?;
        let array = PerCpuArray::try_from(array).map_err(|e| e.to_string())?;
        let comm_ids = HashMap::try_from(comm_ids).map_err(|e| e.to_string())?;
        let comm_values = PerCpuArray::try_from(comm_values).map_err(|e| e.to_string())?;
        let sys_hist = PerCpuArray::try_from(sys_hist).map_err(|e| e.to_string())?;
        // The sizes `take` needs, asked now: the number of CPUs is read from a file, which
        // the dispatch thread may no longer open once confined.
        {
            use aya::maps::IterableMap;
            use std::os::fd::AsFd;
            crate::sys::bpf::MapElems::of(map.map().fd().as_fd()).map_err(|e| format!("aggregation map: {e}"))?;
        }
        Ok(KernelValues { map, array, comm_ids, comm_values, sys_hist })
    }

    /// Descriptors of its five maps, in the order [`KernelValues::from_fds`] takes them:
    /// a tenant's executor reads the values the collectors' process keeps.
    pub fn fds(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        use aya::maps::IterableMap;
        use std::os::fd::AsFd;
        [
            self.map.map().fd().as_fd(),
            self.array.map().fd().as_fd(),
            self.comm_ids.map().fd().as_fd(),
            self.comm_values.map().fd().as_fd(),
            self.sys_hist.map().fd().as_fd(),
        ]
        .into_iter()
        .map(|fd| fd.try_clone_to_owned())
        .collect()
    }

    /// The values behind five map descriptors another process sent ([`KernelValues::fds`]);
    /// each must be a map of the type and sizes its place says.
    pub fn from_fds(fds: Vec<std::os::fd::OwnedFd>) -> Result<KernelValues, String> {
        let [map, array, comm_ids, comm_values, sys_hist]: [std::os::fd::OwnedFd; 5] =
            fds.try_into().map_err(|fds: Vec<_>| format!("{} aggregation maps, not 5", fds.len()))?;
        let open = |fd| {
            let data = MapData::from_fd(fd).map_err(|e| e.to_string())?;
            aya::maps::Map::from_map_data(data).map_err(|e| e.to_string())
        };
        KernelValues::new(open(map)?, open(array)?, open(comm_ids)?, open(comm_values)?, open(sys_hist)?)
    }

    /// Every key of aggregation `agg`, whose values go where `slots` says, summed over CPUs.
    pub fn read(&self, agg: u32, slots: Slots) -> Result<Vec<(RawKey, RawValue)>, String> {
        let mut out = Vec::new();
        if slots == Slots::Comm {
            for item in self.comm_ids.iter() {
                let (k, idx) = match item {
                    Ok(kv) => kv,
                    Err(aya::maps::MapError::KeyNotFound) => continue,
                    Err(e) => return Err(e.to_string()),
                };
                if u32::from_le_bytes([k[0], k[1], k[2], k[3]]) != agg {
                    continue;
                }
                let mut key = RawKey::default();
                key.comm.copy_from_slice(&k[4..]);
                let per_cpu = self.comm_values.get(&idx, 0).map_err(|e| e.to_string())?;
                let mut v = RawValue::default();
                for cpu in per_cpu.iter() {
                    v.merge(&decode_value(cpu));
                }
                out.push((key, v));
            }
            return Ok(out);
        }
        if slots == Slots::SyscallBuckets && agg < SYS_HIST_AGGS {
            self.read_sys_hist(agg, &mut out)?;
        }
        if agg < ARRAY_AGGS {
            // One lookup a slot: only those a key of this aggregation can have.
            for slot in slots.used() {
                let per_cpu = self.array.get(&(agg * ARRAY_SLOTS + slot), 0).map_err(|e| e.to_string())?;
                let mut v = RawValue::default();
                for cpu in per_cpu.iter() {
                    v.merge(&decode_value(cpu));
                }
                if v.count > 0 {
                    out.push((slots.key(slot), v));
                }
            }
        }
        for item in self.map.iter() {
            let (k, per_cpu): ([u8; KEY_BYTES], PerCpuValues<[u8; 32]>) = match item {
                Ok(kv) => kv,
                // A key deleted while we iterate: the next one follows.
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => return Err(e.to_string()),
            };
            let (id, key) = decode_key(&k);
            if id != agg {
                continue;
            }
            let mut v = RawValue::default();
            for cpu in per_cpu.iter() {
                v.merge(&decode_value(cpu));
            }
            out.push((key, v));
        }
        Ok(out)
    }

    /// The buckets of `AGG_SYS_HIST` that aggregation `agg` has used: for each syscall,
    /// its marking slot says which (one lookup), then one lookup a bucket used.
    fn read_sys_hist(&self, agg: u32, out: &mut Vec<(RawKey, RawValue)>) -> Result<(), String> {
        let at = |b: &[u8; 16], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        for nr in 0..NR_SYSCALLS {
            let base = (agg * NR_SYSCALLS + nr) * SYS_HIST_STRIDE;
            let (mut low, mut top) = (0u64, 0u64);
            for cpu in self.sys_hist.get(&(base + SYS_HIST_USED), 0).map_err(|e| e.to_string())?.iter() {
                low |= at(cpu, 0);
                top |= at(cpu, 8);
            }
            let used = (0..SYS_HIST_USED).filter(|b| if *b < 64 { low >> b & 1 == 1 } else { top & 1 == 1 });
            for bucket in used {
                let mut v = RawValue::default();
                for cpu in self.sys_hist.get(&(base + bucket), 0).map_err(|e| e.to_string())?.iter() {
                    v.count += at(cpu, 0);
                    v.sum = v.sum.wrapping_add(at(cpu, 8) as i64);
                }
                if v.count > 0 {
                    let key = RawKey { bucket: bucket as i32, parts: [u64::from(nr), 0, 0, 0], ..RawKey::default() };
                    out.push((key, v));
                }
            }
        }
        Ok(())
    }

    /// Take keys of aggregation `agg` out of the hash, each read and deleted in one step
    /// (min and max cannot be reset by subtraction, and are never kept in the array: the
    /// dispatch thread may delete map elements but not write them). What is written to a
    /// key until it is taken is in its value; what comes after makes a new key, for the
    /// next read. A key already gone is left out.
    pub fn take(&mut self, agg: u32, keys: &[RawKey]) -> Result<Vec<(RawKey, RawValue)>, String> {
        use aya::maps::IterableMap;
        use std::os::fd::AsFd;
        let elems =
            crate::sys::bpf::MapElems::of(self.map.map().fd().as_fd()).map_err(|e| format!("aggregation map: {e}"))?;
        let mut buf = vec![0u8; elems.value_size()];
        let stride = 32usize.div_ceil(8) * 8;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let found = elems.take(&encode_key(agg, key), &mut buf).map_err(|e| format!("aggregation map: {e}"))?;
            if !found {
                continue;
            }
            let mut v = RawValue::default();
            for cpu in buf.chunks_exact(stride) {
                v.merge(&decode_value(cpu.try_into().unwrap_or(&[0; 32])));
            }
            out.push((*key, v));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_merge_across_cpus_ignoring_idle_ones() {
        let mut a = RawValue::default();
        a.merge(&RawValue { count: 2, sum: 10, min: 3, max: 7 });
        a.merge(&RawValue::default());
        a.merge(&RawValue { count: 1, sum: -4, min: -4, max: -4 });
        assert_eq!(a, RawValue { count: 3, sum: 6, min: -4, max: 7 });
        let mut b = RawValue::default();
        for v in [3, 7, -4] {
            b.add(v);
        }
        assert_eq!(a, b);
    }

    #[test]
    fn array_slots_hold_the_keys_the_hash_would() {
        for (slots, slot) in [(Slots::Syscall, 257), (Slots::Single, 0), (Slots::Buckets, 0), (Slots::Buckets, 511)] {
            assert_eq!(slots.slot(&slots.key(slot)), Some(slot), "{slots:?} {slot}");
        }
        assert_eq!(Slots::Syscall.key(39).parts, [39, 0, 0, 0]);
        assert_eq!((Slots::Buckets.key(256).bucket, Slots::Buckets.key(250).bucket), (0, -6));
        let past = RawKey { parts: [600, 0, 0, 0], ..RawKey::default() };
        assert_eq!(Slots::Syscall.slot(&past), None, "a syscall past the array is in the hash");
        assert_eq!(Slots::Hash.slot(&RawKey::default()), None);
        // Every slot a key can reach is read: the extreme buckets of each kind of histogram.
        for bucket in [-64, 64, 255] {
            let key = RawKey { bucket, ..RawKey::default() };
            assert!(Slots::Buckets.used().contains(&Slots::Buckets.slot(&key).unwrap()), "{bucket}");
        }
        assert!(Slots::Single.used().contains(&0) && Slots::Syscall.used().len() == ARRAY_SLOTS as usize);
        // A log2 bucket by syscall: the non-negative buckets of the syscalls with a row.
        let at = |nr: u64, bucket: i32| {
            Slots::SyscallBuckets.slot(&RawKey { bucket, parts: [nr, 0, 0, 0], ..RawKey::default() })
        };
        assert_eq!(at(39, 0), Some(39 * SYS_HIST_STRIDE));
        assert_eq!(at(511, 64), Some(511 * SYS_HIST_STRIDE + 64));
        assert_eq!((at(39, -1), at(39, 65), at(512, 3)), (None, None, None), "the rest are in the hash");
    }

    #[test]
    fn the_syscall_buckets_map_is_sized_to_the_aggregations_that_use_it() {
        let action = |agg: u32, slots: Slots| {
            let mut a = [0u8; ACTION_BYTES];
            a[0..4].copy_from_slice(&agg.to_le_bytes());
            a[7] = slots.code();
            a
        };
        let site = |actions| SiteConfig { site: 1, attach: SiteAttach::SysExit, actions, flags: 0 };
        assert_eq!(sys_hist_entries(&[site(vec![action(0, Slots::Syscall)])]), 1);
        let both = [site(vec![action(0, Slots::Syscall), action(1, Slots::SyscallBuckets)])];
        assert_eq!(sys_hist_entries(&both), 2 * NR_SYSCALLS * SYS_HIST_STRIDE);
    }

    #[test]
    fn keys_decode_as_the_collector_lays_them_out() {
        let mut b = [0u8; KEY_BYTES];
        b[0..4].copy_from_slice(&3u32.to_le_bytes());
        b[4..8].copy_from_slice(&(-2i32).to_le_bytes());
        b[16..24].copy_from_slice(&42u64.to_le_bytes());
        b[40..43].copy_from_slice(b"cat");
        let (id, key) = decode_key(&b);
        assert_eq!((id, key.bucket, key.parts[1]), (3, -2, 42));
        assert_eq!(&key.comm[..4], b"cat\0");
    }

    proptest::proptest! {
        /// Every 56 bytes the kernel hands back are one key, and the key the host removes
        /// is the one it read.
        #[test]
        fn keys_decode_and_encode_back_to_the_same_bytes(b in proptest::array::uniform32(0u8..), tail in proptest::array::uniform24(0u8..)) {
            let mut bytes = [0u8; KEY_BYTES];
            bytes[..32].copy_from_slice(&b);
            bytes[32..].copy_from_slice(&tail);
            let (agg, key) = decode_key(&bytes);
            proptest::prop_assert_eq!(encode_key(agg, &key), bytes);
        }

        #[test]
        fn values_decode_field_by_field(count: u64, sum: i64, min: i64, max: i64) {
            let mut b = [0u8; 32];
            for (i, v) in [count, sum as u64, min as u64, max as u64].iter().enumerate() {
                b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
            }
            proptest::prop_assert_eq!(decode_value(&b), RawValue { count, sum, min, max });
        }
    }
}

//! Kernel aggregations (docs/aggregations.md): what a plugin declares in `plan.aggregations`
//! instead of streaming events. Each is compiled into actions for the aggregation
//! collector (`bpf/agg.bpf.c`), which updates a per-CPU hash and streams nothing. When
//! events are recorded or replayed, the same actions run here over the records
//! ([`Evaluator`]), with the same keys, buckets and latencies, so a recording replays
//! to the same snapshots. Plugins read snapshots with `kernel-aggregations.read-aggregation`.

//!
//! Here: the vocabulary (sources, functions, actions, specs, the task filter). Beside it:
//! `compile.rs` (a plugin's request to actions and collector sites), `evaluate.rs` (the
//! actions over records), `read.rs` (snapshots from the kernel's maps or the evaluator,
//! and each plugin's reader).

mod compile;
mod evaluate;
mod read;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use wasmtap_abi::{header, hist, Kind, Record};

use crate::collect::agg_maps::{
    KernelValues, RawKey, RawValue, SchedTp, SiteAttach, SiteConfig, Slots, ACTIONS_PER_SITE, ACTION_BYTES, ARRAY_AGGS,
    ARRAY_SLOTS, COMMS_MAX, KEYS_MAX, SITES_MAX, SITE_DATA, SITE_TASKS, SYS_HIST_AGGS, TASK_STARTS, TP_SITES,
    VALUES_MAX,
};
use crate::collect::fields::{self, FieldLoc};
use crate::collect::live::{preds_bytes, KernelFilter};
use crate::collect::probes::{self, ProbeSpec};
use crate::collect::table::{Pred, ProbeLookup, KERNEL_PREDS_MAX, NR_SYSCALLS};
use crate::wit::types;

pub use compile::{compile, sites};
pub use evaluate::Evaluator;
pub use read::{entries, Aggregations, Backend, PluginAggs, SharedAggregations};

/// Kernel aggregations per plugin.
pub const PER_PLUGIN_MAX: usize = 32;
/// Intervals started and not ended yet that the host keeps (the kernel's map holds as
/// many; like it, a start that finds the map full is refused and counted).
const STARTS_MAX: usize = 65536;

/// `WT_SRC_TASK`: the scope applies to the thread a correlation field names.
const SRC_TASK: u8 = 2;
/// `WT_SRC_CURRENT`: the start is kept with the current thread.
const SRC_CURRENT: u8 = 4;
/// `WT_SRC_NAMED`: the start is kept with the task the correlation field names.
const SRC_NAMED: u8 = 8;

/// Where an interval's start is kept in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// In the map of starts (`AGG_STARTS`), which can fill.
    Map,
    /// With the current thread: every start and end is the current thread's.
    Current,
    /// With the task its field names, which the probe hands over (the scheduler's BTF
    /// tracepoints): every start and end is such a field.
    Named,
}

/// Where a key part or a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    None,
    Comm,
    Pid,
    Tid,
    Uid,
    Cgroup,
    Syscall,
    /// A field of the probe's data.
    Field(FieldLoc),
    /// A field that is a thread id, to which the scope applies (correlations only).
    Task(FieldLoc),
    Latency,
}

impl Src {
    /// `struct wt_agg_src`.
    fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = match self {
            Src::None => 0,
            Src::Comm => 1,
            Src::Pid => 2,
            Src::Tid => 3,
            Src::Uid => 4,
            Src::Cgroup => 5,
            Src::Syscall => 7,
            Src::Field(_) | Src::Task(_) => 8,
            Src::Latency => 9,
        };
        if let Src::Field(loc) | Src::Task(loc) = self {
            b[1] = loc.size;
            b[2] = u8::from(loc.signed) | if matches!(self, Src::Task(_)) { SRC_TASK } else { 0 };
            b[4..6].copy_from_slice(&loc.off.to_le_bytes());
        }
        b
    }
}

/// What an aggregation does with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Count,
    Sum,
    Min,
    Max,
    Log2,
    Linear { min: i64, max: i64, step: i64 },
}

impl Func {
    fn code(&self) -> u8 {
        match self {
            Func::Count => 1,
            Func::Sum => 2,
            Func::Min => 3,
            Func::Max => 4,
            Func::Log2 => 5,
            Func::Linear { .. } => 6,
        }
    }

    /// The bucket of `v` (histograms), as the kernel computes it.
    fn bucket(&self, v: i64) -> i32 {
        match *self {
            Func::Log2 => hist::log2_bucket(v),
            Func::Linear { min, max, step } => match hist::Linear::new(min, max, step) {
                Ok(l) => l.bucket(v) as i32,
                Err(_) => 0,
            },
            _ => 0,
        }
    }

    fn range(&self, bucket: i32) -> (i64, i64) {
        match *self {
            Func::Log2 => hist::log2_range(bucket),
            Func::Linear { min, max, step } => match hist::Linear::new(min, max, step) {
                Ok(l) => l.range(bucket.max(0) as u32),
                Err(_) => (min, max),
            },
            _ => (0, 0),
        }
    }
}

/// What an action does at its site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Update,
    Start,
    End,
}

/// One aggregation's work at one probe site (`struct wt_agg_action`).
#[derive(Clone, Debug)]
pub struct Action {
    pub agg: u32,
    pub role: Role,
    pub func: Func,
    pub keys: Vec<Src>,
    pub value: Src,
    pub corr: Src,
    /// Offsets into the probe's data.
    pub preds: Vec<Pred>,
    pub syscalls: Option<BTreeSet<u32>>,
    /// Where its values go: the hash, or the array.
    pub slots: Slots,
    /// Where its interval's start is kept: with a task (`WT_SRC_CURRENT`,
    /// `WT_SRC_NAMED`), no map of starts to fill.
    pub kept: Kept,
}

impl Action {
    /// The `WT_SITE_*` flags its site needs for it.
    fn site_flags(&self) -> u32 {
        let field = |s: &Src| matches!(s, Src::Field(_) | Src::Task(_));
        let mut flags = 0;
        if matches!(self.corr, Src::Task(_)) {
            flags |= SITE_TASKS;
        }
        if !self.preds.is_empty() || self.keys.iter().any(field) || field(&self.value) || field(&self.corr) {
            flags |= SITE_DATA;
        }
        flags
    }

    pub fn encode(&self) -> [u8; ACTION_BYTES] {
        let mut b = [0u8; ACTION_BYTES];
        b[0..4].copy_from_slice(&self.agg.to_le_bytes());
        b[4] = match self.role {
            Role::Update => 0,
            Role::Start => 1,
            Role::End => 2,
        };
        b[5] = self.func.code();
        b[6] = u8::from(self.syscalls.is_some());
        b[7] = self.slots.code();
        for (i, k) in self.keys.iter().take(KEYS_MAX).enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&k.encode());
        }
        b[40..48].copy_from_slice(&self.value.encode());
        b[48..56].copy_from_slice(&self.corr.encode());
        b[50] |= match self.kept {
            Kept::Map => 0,
            Kept::Current => SRC_CURRENT,
            Kept::Named => SRC_NAMED,
        };
        if let Func::Linear { min, max, step } = self.func {
            let levels = hist::Linear::new(min, max, step).map(|l| l.levels() as u64).unwrap_or(0);
            b[56..64].copy_from_slice(&min.to_le_bytes());
            b[64..72].copy_from_slice(&(step as u64).to_le_bytes());
            b[72..80].copy_from_slice(&levels.to_le_bytes());
        }
        b[80..144].copy_from_slice(&preds_bytes(&self.preds));
        for nr in self.syscalls.iter().flatten().filter(|nr| **nr < NR_SYSCALLS) {
            b[144 + (*nr as usize >> 3)] |= 1 << (nr & 7);
        }
        b
    }
}

/// One kernel aggregation, compiled.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Its id in the collector's map (unique over the run).
    pub id: u32,
    pub name: String,
    pub keys: Vec<Src>,
    pub func: Func,
    /// Where its values are kept in the kernel.
    pub slots: Slots,
    /// Actions by site: the update (or end) site, and the start site if any.
    pub actions: Vec<(SiteAttach, Action)>,
    /// The probes involved, as named.
    pub probes: Vec<String>,
}

/// Where the values of aggregation `id` with `keys` and `func` are kept in the kernel: a
/// slot of a per-CPU array when its key is a small integer (the syscall number alone;
/// none, one value or a histogram's bucket; a log2 histogram's bucket by syscall), the
/// hash otherwise. An array slot is one lookup at a known place, where the hash builds
/// and hashes a 56-byte key. A count or sum keyed by the comm alone goes to a slot by
/// the comm's index. `min` and `max` stay in the hash: their reset deletes keys, and an
/// array's slots cannot be deleted (nor written by the dispatch thread).
pub fn slots(id: u32, keys: &[Src], func: &Func) -> Slots {
    let scalar = matches!(func, Func::Count | Func::Sum);
    if keys == [Src::Comm] && scalar {
        return Slots::Comm;
    }
    if keys == [Src::Syscall] && *func == Func::Log2 && id < SYS_HIST_AGGS {
        return Slots::SyscallBuckets;
    }
    if id >= ARRAY_AGGS {
        return Slots::Hash;
    }
    match (keys, func) {
        ([Src::Syscall], _) if scalar => Slots::Syscall,
        ([], _) if scalar => Slots::Single,
        ([], Func::Log2) => Slots::Buckets,
        ([], Func::Linear { min, max, step }) => match hist::Linear::new(*min, *max, *step) {
            // Buckets 0 to levels + 1, from the middle of the slots on.
            Ok(l) if u64::from(l.levels()) + 1 < u64::from(ARRAY_SLOTS / 2) => Slots::Buckets,
            _ => Slots::Hash,
        },
        _ => Slots::Hash,
    }
}

/// The task filter every kernel aggregation of a run shares (the kernel applies it to
/// the whole collector, and no host re-checks it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub uids: Vec<u32>,
    pub comms: Vec<String>,
    pub pids: Vec<u32>,
    pub cgroups: Vec<String>,
}

impl TaskFilter {
    pub fn of(f: &types::Filter) -> TaskFilter {
        let sorted = |v: &[u32]| v.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
        let comms: BTreeSet<String> = f.comms.iter().cloned().collect();
        let cgroups: BTreeSet<String> = f.cgroups.iter().cloned().collect();
        TaskFilter {
            uids: sorted(&f.uids),
            comms: comms.into_iter().collect(),
            pids: sorted(&f.pids),
            cgroups: cgroups.into_iter().collect(),
        }
    }

    /// The filter for the collector (targets are the caller's).
    pub fn kernel(&self, cgroups: Vec<(u64, u32)>) -> KernelFilter {
        KernelFilter {
            uids: (!self.uids.is_empty()).then(|| self.uids.clone()),
            comms: (!self.comms.is_empty()).then(|| self.comms.clone()),
            targets: (!self.pids.is_empty()).then(|| self.pids.clone()),
            cgroups: (!cgroups.is_empty()).then_some(cgroups),
            ..KernelFilter::default()
        }
    }

    fn passes(&self, rec: &Record<'_>) -> bool {
        if !self.uids.is_empty() && !self.uids.contains(&rec.uid()) {
            return false;
        }
        if !self.pids.is_empty() && !self.pids.contains(&rec.pid()) {
            return false;
        }
        if !self.comms.is_empty() {
            let raw = rec.slice(header::COMM, 16).unwrap_or(&[]);
            if !self.comms.iter().any(|c| crate::collect::live::comm_key(c)[..] == *raw) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests;

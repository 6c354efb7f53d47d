//! Kernel aggregations (docs/aggregations.md): what a plugin declares in `plan.aggregations`
//! instead of streaming events. Each is compiled into actions for the aggregation
//! collector (`bpf/agg.bpf.c`), which updates a per-CPU hash and streams nothing. When
//! events are recorded or replayed, the same actions run here over the records
//! ([`Evaluator`]), with the same keys, buckets and latencies, so a recording replays
//! to the same snapshots. Plugins read snapshots with `host.read-aggregation`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use wasmtap_abi::{header, hist, Kind, Record};

use crate::collect::agg_maps::{
    KernelValues, RawKey, RawValue, SiteAttach, SiteConfig, ACTIONS_PER_SITE, ACTION_BYTES, KEYS_MAX, SITES_MAX,
    SITE_DATA, SITE_TASKS, VALUES_MAX,
};
use crate::collect::fields::{self, FieldLoc};
use crate::collect::live::{preds_bytes, KernelFilter};
use crate::collect::probes::{self, ProbeSpec};
use crate::collect::table::{Pred, ProbeLookup, KERNEL_PREDS_MAX, NR_SYSCALLS};
use crate::wit::types;

/// Kernel aggregations per plugin.
pub const PER_PLUGIN_MAX: usize = 32;
/// Intervals started and not ended yet that the host keeps (the kernel's map holds as
/// many; like it, a start that finds the map full is refused and counted).
const STARTS_MAX: usize = 65536;

/// `WT_SRC_TASK`: the scope applies to the thread a correlation field names.
const SRC_TASK: u8 = 2;

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
        for (i, k) in self.keys.iter().take(KEYS_MAX).enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&k.encode());
        }
        b[40..48].copy_from_slice(&self.value.encode());
        b[48..56].copy_from_slice(&self.corr.encode());
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
    /// Actions by site: the update (or end) site, and the start site if any.
    pub actions: Vec<(SiteAttach, Action)>,
    /// The probes involved, as named.
    pub probes: Vec<String>,
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

/// Where a named field of a probe's data is.
type FieldLookup = Box<dyn Fn(&str) -> Result<FieldLoc, String>>;

/// A probe's site and how to find its fields.
struct Probe {
    site: SiteAttach,
    /// Syscall number of `syscall:NAME:…`.
    nr: Option<u32>,
    kind: Kind,
    fields: FieldLookup,
}

fn probe(name: &str, source: &ProbeLookup<'_>) -> Result<Probe, String> {
    let spec = probes::parse(name).map_err(|e| e.to_string())?;
    match spec {
        ProbeSpec::Syscall { kind, nr } => {
            let names: Vec<String> = match (kind, nr) {
                (Kind::SysEnter, Some(nr)) => source.syscall_args(nr),
                _ => Vec::new(),
            };
            let exit = kind == Kind::SysExit;
            let fields = move |field: &str| fields::syscall_value(kind, &names, field).map(|v| v.in_context());
            let site = if exit { SiteAttach::SysExit } else { SiteAttach::SysEnter };
            Ok(Probe { site, nr, kind, fields: Box::new(fields) })
        }
        ProbeSpec::Tracepoint { category, name: tp } if category != "btf" => {
            let format = source.tracepoint(&category, &tp)?;
            let site = SiteAttach::Tracepoint { id: format.id, name: format!("{category}:{tp}") };
            let fields = move |field: &str| -> Result<FieldLoc, String> {
                let loc = fields::tracepoint_field(&format, field)?;
                if loc.off < 8 {
                    return Err(format!(
                        "`{field}` is a common field, not readable in the kernel; use the pid, tid or comm keys"
                    ));
                }
                Ok(loc)
            };
            Ok(Probe { site, nr: None, kind: Kind::Tracepoint, fields: Box::new(fields) })
        }
        _ => Err(format!("`{name}`: kernel aggregations take syscall probes and tracefs tracepoints")),
    }
}

fn source_of(s: &types::AggSource, p: &Probe) -> Result<Src, String> {
    Ok(match s {
        types::AggSource::Comm => Src::Comm,
        types::AggSource::Pid => Src::Pid,
        types::AggSource::Tid => Src::Tid,
        types::AggSource::Uid => Src::Uid,
        types::AggSource::Cgroup => Src::Cgroup,
        types::AggSource::Syscall if matches!(p.kind, Kind::SysEnter | Kind::SysExit) => Src::Syscall,
        types::AggSource::Syscall => return Err("`syscall` is known on syscall probes only".into()),
        types::AggSource::Field(name) => Src::Field((p.fields)(name)?),
        types::AggSource::Latency => Src::Latency,
    })
}

fn correlation(c: &types::Correlation, p: &Probe) -> Result<Src, String> {
    match c {
        types::Correlation::Tid => Ok(Src::Tid),
        types::Correlation::Field(name) => Ok(Src::Field((p.fields)(name)?)),
        types::Correlation::Task(name) => Ok(Src::Task((p.fields)(name)?)),
    }
}

fn syscall_set(f: &types::Filter, p: &Probe) -> Result<Option<BTreeSet<u32>>, String> {
    let mut set: BTreeSet<u32> = f.syscalls.iter().copied().collect();
    if !set.is_empty() && !matches!(p.kind, Kind::SysEnter | Kind::SysExit) {
        return Err("a syscall filter on a probe that is not a syscall probe".into());
    }
    if let Some(nr) = p.nr {
        // `syscall:read:entry` with `syscalls: [write]` matches nothing, as in streaming.
        set = if set.is_empty() || set.contains(&nr) { BTreeSet::from([nr]) } else { BTreeSet::from([NR_SYSCALLS]) };
    }
    Ok((!set.is_empty()).then_some(set))
}

fn preds(f: &types::Filter, p: &Probe) -> Result<Vec<Pred>, String> {
    if f.predicates.len() > KERNEL_PREDS_MAX {
        return Err(format!("at most {KERNEL_PREDS_MAX} comparisons run in the kernel"));
    }
    fields::compile_preds(&f.predicates, |name| (p.fields)(name))
}

/// Compile aggregation `wire` of a plan as id `id`, resolving its probes in `source`.
pub fn compile(wire: &types::KernelAggregation, id: u32, source: &ProbeLookup<'_>) -> Result<Spec, String> {
    let end = probe(&wire.probe, source)?;
    if wire.keys.len() > KEYS_MAX {
        return Err(format!("at most {KEYS_MAX} key parts"));
    }
    let keys = wire.keys.iter().map(|k| source_of(k, &end)).collect::<Result<Vec<_>, _>>()?;
    if keys.iter().filter(|k| **k == Src::Comm).count() > 1 {
        return Err("at most one `comm` key part".into());
    }
    if keys.contains(&Src::Latency) {
        return Err("`latency` is a value, not a key".into());
    }
    let func = match &wire.function {
        types::KernelFunction::Count => Func::Count,
        types::KernelFunction::Sum => Func::Sum,
        types::KernelFunction::Min => Func::Min,
        types::KernelFunction::Max => Func::Max,
        types::KernelFunction::Log2Histogram => Func::Log2,
        types::KernelFunction::LinearHistogram(l) => {
            hist::Linear::new(l.min, l.max, l.step).map_err(|e| format!("linear histogram: {e}"))?;
            Func::Linear { min: l.min, max: l.max, step: l.step }
        }
    };
    let value = match (&func, &wire.start) {
        (Func::Count, _) => Src::None,
        (_, Some(_)) => match source_of(&wire.value, &end)? {
            Src::Latency => Src::Latency,
            _ => return Err("with a start event the value is `latency`".into()),
        },
        (_, None) => match source_of(&wire.value, &end)? {
            Src::Latency => return Err("`latency` needs a start event".into()),
            Src::Comm => return Err("`comm` is text, not a value".into()),
            v => v,
        },
    };
    let mut probes = vec![wire.probe.clone()];
    let mut actions = Vec::new();
    let mut update = Action {
        agg: id,
        role: Role::Update,
        func,
        keys: keys.clone(),
        value,
        corr: Src::None,
        preds: preds(&wire.filter, &end)?,
        syscalls: syscall_set(&wire.filter, &end)?,
    };
    if let Some(start) = &wire.start {
        update.role = Role::End;
        update.corr = correlation(&start.end_key, &end)?;
        let starts = std::iter::once((&start.probe, &start.filter, &start.key))
            .chain(start.more.iter().map(|m| (&m.probe, &m.filter, &m.key)));
        for (name, filter, key) in starts {
            let sp = probe(name, source)?;
            if TaskFilter::of(filter) != TaskFilter::default() && TaskFilter::of(filter) != TaskFilter::of(&wire.filter)
            {
                return Err(format!(
                    "the start event `{name}`: its uid, comm, pid and cgroup filters must be those of the aggregation"
                ));
            }
            let begin = Action {
                agg: id,
                role: Role::Start,
                func,
                keys: Vec::new(),
                value: Src::None,
                corr: correlation(key, &sp)?,
                preds: preds(filter, &sp)?,
                syscalls: syscall_set(filter, &sp)?,
            };
            actions.push((sp.site, begin));
            probes.push(name.clone());
        }
    }
    actions.push((end.site.clone(), update));
    Ok(Spec { id, name: wire.name.clone(), keys, func, actions, probes })
}

/// The collector's sites: sys_enter is 0, sys_exit 1, tracepoints from 2.
pub fn sites(specs: &[Spec]) -> Result<Vec<SiteConfig>, String> {
    let mut by_site: BTreeMap<SiteAttach, (Vec<[u8; ACTION_BYTES]>, u32)> = BTreeMap::new();
    for spec in specs {
        for (site, action) in &spec.actions {
            let (actions, flags) = by_site.entry(site.clone()).or_default();
            actions.push(action.encode());
            *flags |= action.site_flags();
        }
    }
    let mut next = 2;
    let mut out = Vec::new();
    for (attach, (actions, flags)) in by_site {
        if actions.len() > ACTIONS_PER_SITE {
            return Err(format!(
                "more than {ACTIONS_PER_SITE} kernel aggregations on one probe ({})",
                match &attach {
                    SiteAttach::SysEnter => "syscall entries".to_string(),
                    SiteAttach::SysExit => "syscall exits".to_string(),
                    SiteAttach::Tracepoint { name, .. } => format!("tracepoint:{name}"),
                }
            ));
        }
        let site = match attach {
            SiteAttach::SysEnter => 0,
            SiteAttach::SysExit => 1,
            SiteAttach::Tracepoint { .. } => {
                next += 1;
                next - 1
            }
        };
        if site as usize >= SITES_MAX {
            return Err(format!("kernel aggregations on more than {} tracepoints", SITES_MAX - 2));
        }
        out.push(SiteConfig { site, attach, actions, flags });
    }
    Ok(out)
}

/// The same actions as the collector, run over records (recording and replay).
#[derive(Default)]
pub struct Evaluator {
    enter: Vec<Action>,
    exit: Vec<Action>,
    tracepoints: HashMap<u32, Vec<Action>>,
    task: TaskFilter,
    values: HashMap<(u32, RawKey), RawValue>,
    starts: HashMap<(u32, u64), u64>,
    /// Events whose key did not fit (the map was full), as the kernel counts them.
    pub lost: u64,
    /// Starts that did not fit (the map of starts was full): intervals lost.
    pub starts_lost: u64,
}

impl Evaluator {
    pub fn new(specs: &[Spec], task: TaskFilter) -> Evaluator {
        let mut e = Evaluator { task, ..Evaluator::default() };
        for spec in specs {
            for (site, a) in &spec.actions {
                match site {
                    SiteAttach::SysEnter => e.enter.push(a.clone()),
                    SiteAttach::SysExit => e.exit.push(a.clone()),
                    SiteAttach::Tracepoint { id, .. } => e.tracepoints.entry(*id).or_default().push(a.clone()),
                }
            }
        }
        e
    }

    /// Run the actions of the record's site.
    pub fn offer(&mut self, rec: &Record<'_>) {
        let (site, base, id) = match rec.kind() {
            Some(Kind::SysEnter) => (None, wasmtap_abi::sys_enter::ID, rec.i64_at(wasmtap_abi::sys_enter::ID)),
            Some(Kind::SysExit) => (None, wasmtap_abi::sys_exit::ID, rec.i64_at(wasmtap_abi::sys_exit::ID)),
            Some(Kind::Tracepoint) => match rec.u32_at(wasmtap_abi::tracepoint::EVENT_ID) {
                Some(tp) if self.tracepoints.contains_key(&tp) => (Some(tp), wasmtap_abi::tracepoint::DATA, None),
                _ => return,
            },
            _ => return,
        };
        let actions = match (site, rec.kind()) {
            (Some(tp), _) => self.tracepoints.get_mut(&tp).map(std::mem::take),
            (None, Some(Kind::SysEnter)) => Some(std::mem::take(&mut self.enter)),
            _ => Some(std::mem::take(&mut self.exit)),
        };
        let Some(actions) = actions else { return };
        if !actions.is_empty() && self.task.passes(rec) {
            for a in &actions {
                self.act(a, rec, base, id.unwrap_or(-1));
            }
        }
        match (site, rec.kind()) {
            (Some(tp), _) => {
                self.tracepoints.insert(tp, actions);
            }
            (None, Some(Kind::SysEnter)) => self.enter = actions,
            _ => self.exit = actions,
        }
    }

    fn read(rec: &Record<'_>, src: &Src, base: usize, id: i64) -> Option<u64> {
        Some(match src {
            Src::None | Src::Comm | Src::Latency => 0,
            Src::Pid => u64::from(rec.pid()),
            Src::Tid => u64::from(rec.tid()),
            Src::Uid => u64::from(rec.uid()),
            Src::Cgroup => rec.cgroup_id(),
            Src::Syscall => id as u64,
            Src::Field(loc) | Src::Task(loc) => {
                let raw = rec.bytes().get(base + loc.off as usize..base + loc.off as usize + loc.size as usize)?;
                let mut buf = [0u8; 8];
                buf[..raw.len()].copy_from_slice(raw);
                let v = u64::from_le_bytes(buf);
                let shift = 64 - 8 * u32::from(loc.size);
                if loc.signed && shift > 0 {
                    (((v << shift) as i64) >> shift) as u64
                } else {
                    v
                }
            }
        })
    }

    fn act(&mut self, a: &Action, rec: &Record<'_>, base: usize, id: i64) {
        if let Some(set) = &a.syscalls {
            if !u32::try_from(id).is_ok_and(|nr| set.contains(&nr)) {
                return;
            }
        }
        if !a.preds.iter().all(|p| p.holds(rec.bytes(), base)) {
            return;
        }
        let now = rec.ts_ns();
        let value = match a.role {
            Role::Start => {
                let Some(corr) = Self::read(rec, &a.corr, base, id) else { return };
                if self.starts.len() >= STARTS_MAX && !self.starts.contains_key(&(a.agg, corr)) {
                    self.starts_lost += 1;
                    return;
                }
                self.starts.insert((a.agg, corr), now);
                return;
            }
            Role::End => {
                let Some(corr) = Self::read(rec, &a.corr, base, id) else { return };
                let Some(t0) = self.starts.remove(&(a.agg, corr)) else { return };
                now.wrapping_sub(t0) as i64
            }
            Role::Update if a.func == Func::Count => 0,
            Role::Update => match Self::read(rec, &a.value, base, id) {
                Some(v) => v as i64,
                None => return,
            },
        };
        let mut key = RawKey::default();
        for (i, src) in a.keys.iter().enumerate() {
            match src {
                Src::Comm => {
                    if let Some(c) = rec.slice(header::COMM, 16) {
                        key.comm.copy_from_slice(c);
                    }
                }
                s => match Self::read(rec, s, base, id) {
                    Some(v) => key.parts[i] = v,
                    None => return,
                },
            }
        }
        key.bucket = a.func.bucket(value);
        let full = self.values.len() >= VALUES_MAX as usize;
        match self.values.get_mut(&(a.agg, key)) {
            Some(v) => v.add(value),
            None if full => self.lost += 1,
            None => {
                let mut v = RawValue::default();
                v.add(value);
                self.values.insert((a.agg, key), v);
            }
        }
    }

    fn take(&mut self, agg: u32, reset: bool) -> Vec<(RawKey, RawValue)> {
        let keys: Vec<(u32, RawKey)> = self.values.keys().filter(|(a, _)| *a == agg).copied().collect();
        keys.into_iter()
            .filter_map(|k| {
                let v = if reset { self.values.remove(&k) } else { self.values.get(&k).copied() };
                v.map(|v| (k.1, v))
            })
            .collect()
    }
}

/// Where snapshots come from.
pub enum Backend {
    /// The kernel collector's map; `None` until the collector runs.
    Kernel {
        values: Option<KernelValues>,
        /// Cumulative values at the last reset, subtracted from later reads.
        baselines: HashMap<u32, HashMap<RawKey, RawValue>>,
    },
    Host(Evaluator),
}

/// Every kernel aggregation of a run and where their values are.
pub struct Aggregations {
    pub specs: Vec<Spec>,
    pub backend: Backend,
}

pub type SharedAggregations = Arc<Mutex<Aggregations>>;

impl Aggregations {
    /// A snapshot of aggregation `id`, optionally starting the next one from zero.
    pub fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, String> {
        let spec = self.specs.iter().find(|s| s.id == id).ok_or_else(|| format!("no kernel aggregation {id}"))?;
        let raw = match &mut self.backend {
            Backend::Host(e) => e.take(id, reset),
            Backend::Kernel { values, baselines } => {
                let values = values.as_mut().ok_or("the aggregation collector is not running")?;
                let cumulative = values.read(id)?;
                if matches!(spec.func, Func::Min | Func::Max) {
                    // Extremes cannot be subtracted: a reset forgets the keys instead.
                    if reset {
                        let keys: Vec<RawKey> = cumulative.iter().map(|(k, _)| *k).collect();
                        values.remove(id, &keys);
                    }
                    cumulative
                } else {
                    // Counts, sums and buckets only grow: a reset remembers them and later
                    // reads subtract, so nothing that happens between two reads is lost.
                    let base = baselines.entry(id).or_default();
                    let delta = cumulative
                        .iter()
                        .map(|(k, v)| {
                            let b = base.get(k).copied().unwrap_or_default();
                            (
                                *k,
                                RawValue {
                                    count: v.count.saturating_sub(b.count),
                                    sum: v.sum.wrapping_sub(b.sum),
                                    ..*v
                                },
                            )
                        })
                        .filter(|(_, v)| v.count > 0)
                        .collect();
                    if reset {
                        *base = cumulative.into_iter().collect();
                    }
                    delta
                }
            }
        };
        Ok(entries(spec, raw))
    }

    /// Events lost to a full aggregation map in the host (replay, recording).
    pub fn host_lost(&self) -> u64 {
        match &self.backend {
            Backend::Host(e) => e.lost,
            Backend::Kernel { .. } => 0,
        }
    }

    /// Intervals lost to a full map of starts in the host (replay, recording).
    pub fn host_starts_lost(&self) -> u64 {
        match &self.backend {
            Backend::Host(e) => e.starts_lost,
            Backend::Kernel { .. } => 0,
        }
    }
}

/// Raw keys and values as the aggregation's entries: keys in declaration order, scalars
/// or histograms with every bucket between the lowest and the highest used.
pub fn entries(spec: &Spec, raw: Vec<(RawKey, RawValue)>) -> Vec<types::AggEntry> {
    let mut grouped: BTreeMap<([u64; KEYS_MAX], [u8; 16]), BTreeMap<i32, RawValue>> = BTreeMap::new();
    for (k, v) in raw {
        grouped.entry((k.parts, k.comm)).or_default().entry(k.bucket).or_default().merge(&v);
    }
    grouped
        .into_iter()
        .map(|((parts, comm), buckets)| {
            let key = spec
                .keys
                .iter()
                .enumerate()
                .map(|(i, src)| match src {
                    Src::Comm => {
                        let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
                        types::Value::Text(String::from_utf8_lossy(&comm[..end]).into_owned())
                    }
                    _ => types::Value::Int(parts[i] as i64),
                })
                .collect();
            let mut total = RawValue::default();
            for v in buckets.values() {
                total.merge(v);
            }
            let value = match spec.func {
                Func::Count => types::AggValue::Scalar(total.count as i64),
                Func::Sum => types::AggValue::Scalar(total.sum),
                Func::Min => types::AggValue::Scalar(total.min),
                Func::Max => types::AggValue::Scalar(total.max),
                Func::Log2 | Func::Linear { .. } => {
                    let lo = buckets.keys().next().copied().unwrap_or(0);
                    let hi = buckets.keys().next_back().copied().unwrap_or(0);
                    let list = (lo..=hi)
                        .map(|b| {
                            let (low, high) = spec.func.range(b);
                            types::Bucket { low, high, count: buckets.get(&b).map_or(0, |v| v.count) }
                        })
                        .collect();
                    types::AggValue::Histogram(types::Histogram { buckets: list, sum: total.sum })
                }
            };
            types::AggEntry { key, value }
        })
        .collect()
}

/// One plugin's view of the store: its own aggregation ids.
#[derive(Clone)]
pub struct PluginAggs {
    pub store: SharedAggregations,
    /// Global ids, by the plugin's index.
    pub ids: Vec<u32>,
}

impl crate::sandbox::Aggregates for PluginAggs {
    fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, String> {
        let global = *self
            .ids
            .get(id as usize)
            .ok_or_else(|| format!("no kernel aggregation {id} (the plan declared {})", self.ids.len()))?;
        self.store.lock().unwrap_or_else(|e| e.into_inner()).read(global, reset)
    }
}

#[cfg(test)]
mod tests;

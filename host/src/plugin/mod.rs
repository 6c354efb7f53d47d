//! Plugins as the pipeline sees them: loaded, started with validated parameters, their
//! subscriptions resolved, and events routed to them in batches (never one call per
//! event). A plugin that faults is disabled alone; its later events are counted as dropped.

pub mod params;
pub mod resolve;
pub mod symbols;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use wasmtap_abi::{header, Kind, Record};

use crate::agg::SharedStore;
use crate::collect::cgroup::{self, Cgroup};
use crate::collect::live::KernelFilter;
use crate::collect::probes::{self, ProbeError, ProbeSpec};
use crate::collect::table::{self, FieldLoc, Op, Pred, ProbeTable, Source};
use crate::collect::tracefs::{self, FieldKind};
use crate::output::Output;
use crate::sandbox::types::{self, Plan, PluginInfo, TableSpec};
use crate::sandbox::{Clock, Fault, GuestItem, Instance, LoadedPlugin, Sandbox, SandboxError};

/// Records per `on-batch` call.
pub const BATCH_RECORDS: usize = 1024;

/// Why a plugin could not start.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Resolve(#[from] resolve::ResolveError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("plugin {path} failed while starting: {fault}")]
    Fault { path: String, fault: Fault },
    #[error("{plugin}: {message}")]
    Refused { plugin: String, message: String },
    #[error(transparent)]
    Param(#[from] params::ParamError),
    #[error("{plugin}: {error}")]
    Probe { plugin: String, error: ProbeError },
    #[error("{plugin}: bad plan: {reason}")]
    BadPlan { plugin: String, reason: String },
}

/// A plugin loaded and described, not started yet.
pub struct Described {
    pub info: PluginInfo,
    loaded: LoadedPlugin,
    instance: Instance,
}

/// Load a plugin and ask it what it is.
pub fn describe(sandbox: &Sandbox, arg: &str, clock: Clock) -> Result<Described, PluginError> {
    let path = resolve::resolve(arg)?;
    let loaded = sandbox.load(&path)?;
    let fault = |fault| PluginError::Fault { path: path.display().to_string(), fault };
    let mut instance = sandbox.instantiate(&loaded, clock).map_err(fault)?;
    let info = instance.info().map_err(fault)?;
    let name_ok = !info.name.is_empty()
        && info.name.len() <= 64
        && info.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !name_ok {
        return Err(PluginError::BadPlan {
            plugin: path.display().to_string(),
            reason: format!("invalid plugin name {:?}", info.name),
        });
    }
    Ok(Described { info, loaded, instance })
}

/// Per-plugin accounting.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PluginStats {
    pub name: String,
    /// Records handed to the plugin.
    pub delivered: u64,
    /// Records of a subscribed kind that the plugin's own filters rejected in the host.
    pub filtered: u64,
    /// Records lost to this plugin (it was disabled).
    pub dropped: u64,
    pub batches: u64,
    /// Why the plugin was disabled, if it was.
    pub disabled: Option<String>,
    /// Problems that did not stop it (optional probes skipped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A subscription compiled for matching in the host.
struct Sub {
    /// The probe, parsed; none for an optional probe that is missing here.
    spec: Option<ProbeSpec>,
    matcher: Matcher,
    syscalls: Option<BTreeSet<u32>>,
    uids: Option<BTreeSet<u32>>,
    comms: Option<Vec<[u8; 16]>>,
    pids: Option<BTreeSet<u32>>,
    cgroups: Option<BTreeSet<u64>>,
    /// Comparisons, offsets relative to `pred_base` in the record.
    preds: Vec<Pred>,
    pred_base: usize,
    stacks: u8,
    schema: Option<types::ProbeSchema>,
}

/// What records a subscription takes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Matcher {
    /// Not resolved yet, or skipped.
    Nothing,
    Kind(Kind),
    Tracepoint(u32),
    User(BTreeSet<u32>),
    Sample(u32),
    Interval(u64),
    Begin,
    End,
}

impl Sub {
    fn kind(&self) -> Option<Kind> {
        match &self.matcher {
            Matcher::Kind(k) => Some(*k),
            Matcher::Tracepoint(_) => Some(Kind::Tracepoint),
            Matcher::User(_) => Some(Kind::User),
            Matcher::Sample(_) => Some(Kind::Sample),
            _ => None,
        }
    }

    fn takes(&self, rec: &Record<'_>, kind: Kind) -> bool {
        match &self.matcher {
            Matcher::Kind(k) => *k == kind,
            Matcher::Tracepoint(id) => {
                kind == Kind::Tracepoint && rec.u32_at(wasmtap_abi::tracepoint::EVENT_ID) == Some(*id)
            }
            Matcher::User(slots) => {
                kind == Kind::User && rec.u32_at(wasmtap_abi::user::PROBE).is_some_and(|s| slots.contains(&s))
            }
            Matcher::Sample(ev) => kind == Kind::Sample && rec.u32_at(wasmtap_abi::sample::EVENT) == Some(*ev),
            _ => false,
        }
    }

    fn matches(&self, rec: &Record<'_>) -> bool {
        if let Some(set) = &self.syscalls {
            let id = rec.i64_at(wasmtap_abi::sys_enter::ID).unwrap_or(-1);
            if !u32::try_from(id).is_ok_and(|id| set.contains(&id)) {
                return false;
            }
        }
        if let Some(uids) = &self.uids {
            if !uids.contains(&rec.uid()) {
                return false;
            }
        }
        if let Some(comms) = &self.comms {
            let raw = rec.slice(header::COMM, 16).unwrap_or(&[]);
            if !comms.iter().any(|c| c[..] == *raw) {
                return false;
            }
        }
        if let Some(pids) = &self.pids {
            if !pids.contains(&rec.pid()) {
                return false;
            }
        }
        if let Some(cgroups) = &self.cgroups {
            if !cgroups.contains(&rec.cgroup_id()) {
                return false;
            }
        }
        self.preds.iter().all(|p| p.holds(rec.bytes(), self.pred_base))
    }
}

/// A started plugin.
pub struct Runner {
    pub info: PluginInfo,
    pub plan: Plan,
    instance: Option<Instance>,
    subs: Vec<Sub>,
    batch: Vec<u8>,
    batch_records: usize,
    pub stats: PluginStats,
    /// Interval subscriptions: (sub, period, next due time).
    timers: Vec<(usize, u64, Option<u64>)>,
    /// The plan's own subscriptions; those after them stream the probes of kernel
    /// aggregations that the host computes (recording, replay).
    own_subs: usize,
    /// Global ids of the plan's kernel aggregations.
    agg_ids: Vec<u32>,
}

impl Runner {
    /// Start a described plugin with its validated parameters. Probe names are parsed
    /// here; they are resolved against the system by [`PluginSet::resolve`].
    pub fn start(d: Described, params: &[crate::sandbox::types::Param]) -> Result<Runner, PluginError> {
        let Described { info, loaded, mut instance } = d;
        let name = info.name.clone();
        let fault = |fault| PluginError::Fault { path: loaded.path().display().to_string(), fault };
        let plan = instance
            .start(params)
            .map_err(fault)?
            .map_err(|message| PluginError::Refused { plugin: name.clone(), message })?;
        for t in &plan.tables {
            if t.columns.is_empty() || t.columns.len() > 64 {
                return Err(PluginError::BadPlan {
                    plugin: name,
                    reason: format!("table `{}` must have 1 to 64 columns", t.name),
                });
            }
        }
        if plan.aggregations.len() > crate::agg::PER_PLUGIN_MAX {
            return Err(PluginError::BadPlan {
                plugin: name,
                reason: format!("more than {} kernel aggregations", crate::agg::PER_PLUGIN_MAX),
            });
        }
        let mut warnings = Vec::new();
        let subs = parse_subs(&name, &plan, &mut warnings)?;
        let own_subs = subs.len();
        let stats = PluginStats { name: name.clone(), warnings, ..Default::default() };
        Ok(Runner {
            info,
            plan,
            instance: Some(instance),
            subs,
            batch: Vec::with_capacity(256 << 10),
            batch_records: 0,
            stats,
            timers: Vec::new(),
            own_subs,
            agg_ids: Vec::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The record kinds this plugin subscribes to.
    pub fn kinds(&self) -> impl Iterator<Item = Kind> + '_ {
        self.subs.iter().filter_map(|s| s.kind())
    }

    /// Offer one record; it is queued if a subscription matches.
    fn offer(&mut self, rec: &Record<'_>, kind: Kind, out: &mut Output, clock: &Clock) {
        let mut subscribed = false;
        let mut matched = None;
        for (i, s) in self.subs[..self.own_subs].iter().enumerate() {
            if s.takes(rec, kind) {
                subscribed = true;
                if s.matches(rec) {
                    matched = Some(i);
                    break;
                }
            }
        }
        let Some(i) = matched else {
            if subscribed {
                self.stats.filtered += 1;
            }
            return;
        };
        if self.instance.is_none() {
            self.stats.dropped += 1;
            return;
        }
        let start = self.batch.len();
        self.batch.extend_from_slice(rec.bytes());
        self.batch[start + header::SUB..start + header::SUB + 2].copy_from_slice(&(i as u16).to_le_bytes());
        self.batch_records += 1;
        if self.batch_records >= BATCH_RECORDS {
            self.flush(out, clock);
        }
    }

    /// Deliver the queued batch.
    pub fn flush(&mut self, out: &mut Output, clock: &Clock) {
        if self.batch_records == 0 {
            return;
        }
        let n = self.batch_records as u64;
        self.batch_records = 0;
        let Some(inst) = self.instance.as_mut() else {
            self.stats.dropped += n;
            self.batch.clear();
            return;
        };
        inst.set_clock(*clock);
        let res = inst.on_batch(&self.batch);
        self.batch.clear();
        self.stats.batches += 1;
        match res {
            Ok(()) => self.stats.delivered += n,
            Err(f) => {
                self.stats.dropped += n;
                self.disable(f, out);
            }
        }
        self.render(out, clock);
    }

    /// Call `on-tick` for subscription `sub` at `at_ns`.
    fn fire(&mut self, sub: usize, at_ns: u64, out: &mut Output, clock: &Clock) {
        let Some(inst) = self.instance.as_mut() else { return };
        inst.set_clock(Clock { fixed_mono_ns: Some(at_ns), ..*clock });
        match inst.on_tick(sub as u32, at_ns) {
            Ok(aggs) => {
                self.render(out, clock);
                out.aggregations(&self.info.name, &aggs);
            }
            Err(f) => self.disable(f, out),
        }
    }

    /// Fire the `begin` subscriptions (after every probe is attached).
    pub fn begin(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        let begins: Vec<usize> = (0..self.subs.len()).filter(|i| self.subs[*i].matcher == Matcher::Begin).collect();
        for i in begins {
            self.fire(i, now_ns, out, clock);
        }
    }

    /// Fire every interval subscription due at `now_ns`, in time order.
    pub fn tick_if_due(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        loop {
            let due = self
                .timers
                .iter_mut()
                .enumerate()
                .map(|(t, (_, period, next))| (*next.get_or_insert(now_ns + *period), t))
                .min();
            let Some((due, t)) = due else { return };
            if now_ns < due || self.instance.is_none() {
                return;
            }
            self.flush(out, clock);
            let (sub, period, next) = &mut self.timers[t];
            let sub = *sub;
            *next = Some(due + *period * ((now_ns - due) / *period + 1));
            self.fire(sub, due, out, clock);
        }
    }

    /// The end: flush, the `end` subscriptions, then `finish`.
    pub fn finish(&mut self, out: &mut Output, clock: &Clock) {
        self.flush(out, clock);
        let ends: Vec<usize> = (0..self.subs.len()).filter(|i| self.subs[*i].matcher == Matcher::End).collect();
        for i in ends {
            self.fire(i, clock.mono_ns(), out, clock);
        }
        let Some(inst) = self.instance.as_mut() else { return };
        inst.set_clock(*clock);
        match inst.finish() {
            Ok(aggs) => {
                self.render(out, clock);
                out.aggregations(&self.info.name, &aggs);
            }
            Err(f) => self.disable(f, out),
        }
    }

    fn disable(&mut self, fault: Fault, out: &mut Output) {
        let msg = format!("plugin `{}` disabled {fault}", self.info.name);
        out.diag(&msg);
        self.stats.disabled = Some(fault.to_string());
        self.instance = None;
    }

    fn render(&mut self, out: &mut Output, clock: &Clock) {
        let Some(inst) = self.instance.as_mut() else { return };
        for item in inst.take_output().items {
            match item {
                GuestItem::Rows(rows) => {
                    for row in rows {
                        match self.plan.tables.get(row.table as usize) {
                            Some(t) if t.columns.len() == row.values.len() => {
                                out.rows(&self.info.name, t, std::slice::from_ref(&row), clock)
                            }
                            _ => out.diag(&format!(
                                "{}: dropped a row that does not fit table {}",
                                self.info.name, row.table
                            )),
                        }
                    }
                }
                GuestItem::Text(s) => out.text(&self.info.name, &s),
                GuestItem::Log(l) => out.log(&self.info.name, l.level, &l.message),
            }
        }
    }

    /// Tables to print headings for.
    pub fn tables(&self) -> &[TableSpec] {
        &self.plan.tables
    }
}

/// Parse every subscription's probe and host-side filters. An optional probe that does
/// not parse is skipped with a warning.
fn parse_subs(plugin: &str, plan: &Plan, warnings: &mut Vec<String>) -> Result<Vec<Sub>, PluginError> {
    if plan.subscriptions.is_empty() && plan.aggregations.is_empty() {
        return Err(PluginError::BadPlan {
            plugin: plugin.into(),
            reason: "no subscriptions and no kernel aggregations".into(),
        });
    }
    if plan.subscriptions.len() > 1024 {
        return Err(PluginError::BadPlan { plugin: plugin.into(), reason: "more than 1024 subscriptions".into() });
    }
    let mut subs = Vec::new();
    for s in &plan.subscriptions {
        subs.push(parse_sub(plugin, s, warnings)?);
    }
    Ok(subs)
}

/// Parse one subscription; `None` spec for an optional probe that does not parse.
fn parse_sub(plugin: &str, s: &types::Subscription, warnings: &mut Vec<String>) -> Result<Sub, PluginError> {
    let spec = match probes::parse(&s.probe) {
        Ok(spec) => Some(spec),
        Err(e) if s.optional => {
            warnings.push(format!("optional probe skipped: {e}"));
            None
        }
        Err(error) => return Err(PluginError::Probe { plugin: plugin.into(), error }),
    };
    let mut syscalls: BTreeSet<u32> = s.filter.syscalls.iter().copied().collect();
    if let Some(ProbeSpec::Syscall { nr: Some(nr), .. }) = &spec {
        syscalls.insert(*nr);
    }
    if !syscalls.is_empty() && !matches!(spec, Some(ProbeSpec::Syscall { .. })) {
        return Err(PluginError::BadPlan {
            plugin: plugin.into(),
            reason: format!("a syscall filter on `{}`, which is not a syscall probe", s.probe),
        });
    }
    let f = &s.filter;
    if f.uids.len() > 256 || f.comms.len() > 256 || f.pids.len() > 16384 || f.cgroups.len() > 64 {
        return Err(PluginError::BadPlan {
            plugin: plugin.into(),
            reason: format!(
                "filter of `{}` is too large (at most 256 uids and comms, 16384 pids, 64 cgroups)",
                s.probe
            ),
        });
    }
    let comms: Vec<[u8; 16]> = f.comms.iter().map(|c| crate::collect::live::comm_key(c)).collect();
    let mut stacks = 0;
    if s.stacks.contains(types::StackMode::KERNEL) {
        stacks |= table::STACK_KERNEL;
    }
    if s.stacks.contains(types::StackMode::USER) {
        stacks |= table::STACK_USER;
    }
    Ok(Sub {
        spec,
        matcher: Matcher::Nothing,
        syscalls: (!syscalls.is_empty()).then_some(syscalls),
        uids: (!f.uids.is_empty()).then(|| f.uids.iter().copied().collect()),
        comms: (!comms.is_empty()).then_some(comms),
        pids: (!f.pids.is_empty()).then(|| f.pids.iter().copied().collect()),
        cgroups: None,
        preds: Vec::new(),
        pred_base: 0,
        stacks,
        schema: None,
    })
}

/// All plugins of one run.
pub struct PluginSet {
    pub runners: Vec<Runner>,
    /// What the collectors are told per probe (filled by [`PluginSet::resolve`]).
    pub table: ProbeTable,
    /// cgroups named by subscriptions, resolved, by name.
    cgroups: BTreeMap<String, Cgroup>,
    /// Compute kernel aggregations in the host, over streamed records (recording, replay).
    aggregate_in_host: bool,
    /// Kernel aggregations of every plugin, once resolved.
    aggs: Option<SharedStore>,
    /// Their shared task filter.
    agg_task: crate::agg::TaskFilter,
}

impl PluginSet {
    pub fn new(runners: Vec<Runner>) -> PluginSet {
        PluginSet {
            runners,
            table: ProbeTable::default(),
            cgroups: BTreeMap::new(),
            aggregate_in_host: false,
            aggs: None,
            agg_task: crate::agg::TaskFilter::default(),
        }
    }

    /// Compute kernel aggregations here from streamed events instead of in the kernel,
    /// so that a recording holds what they need. Replays always do. Call before `resolve`.
    pub fn aggregate_in_host(&mut self, yes: bool) {
        self.aggregate_in_host = yes;
    }

    /// Resolve every subscription against `source` (the live system or a recording):
    /// tracepoint formats, uprobe and USDT sites, field names of comparisons, cgroups.
    /// Builds the probe table and hands each plugin its schemas. Errors name the plugin
    /// and the probe; an optional probe that cannot be resolved is skipped with a warning.
    pub fn resolve(&mut self, source: &Source<'_>) -> Result<(), PluginError> {
        let mut table = ProbeTable::default();
        let mut tp_index: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut perf_index: BTreeMap<u32, usize> = BTreeMap::new();
        let replay = matches!(source, Source::Recorded(_));
        let in_host = replay || self.aggregate_in_host;
        if in_host {
            // Stream the aggregations' probes, unfiltered: the evaluator applies their filters.
            for r in &mut self.runners {
                let probes: Vec<String> = r
                    .plan
                    .aggregations
                    .iter()
                    .flat_map(|a| std::iter::once(a.probe.clone()).chain(a.start.iter().map(|s| s.probe.clone())))
                    .collect();
                for probe in probes {
                    let wire = types::Subscription {
                        probe,
                        filter: types::Filter::default(),
                        stacks: types::StackMode::empty(),
                        optional: false,
                    };
                    let mut ignored = Vec::new();
                    let sub = parse_sub(&r.info.name, &wire, &mut ignored)?;
                    r.plan.subscriptions.push(wire);
                    r.subs.push(sub);
                }
            }
        }
        for r in &mut self.runners {
            let plugin = r.info.name.clone();
            for (i, sub) in r.subs.iter_mut().enumerate() {
                let wire = &r.plan.subscriptions[i];
                let Some(spec) = sub.spec.clone() else { continue };
                let resolved = resolve_sub(&mut table, &mut tp_index, &mut perf_index, sub, wire, &spec, source);
                if let Err(reason) = resolved {
                    sub.matcher = Matcher::Nothing;
                    if wire.optional {
                        r.stats.warnings.push(format!("optional probe `{}` skipped: {reason}", wire.probe));
                        continue;
                    }
                    return Err(PluginError::Probe { plugin, error: table::probe_error(&wire.probe, reason) });
                }
                if !wire.filter.cgroups.is_empty() {
                    let mut ids = BTreeSet::new();
                    for name in &wire.filter.cgroups {
                        if replay {
                            return Err(PluginError::BadPlan {
                                plugin,
                                reason:
                                    "cgroup filters cannot be replayed (cgroup ids belong to the recording machine)"
                                        .into(),
                            });
                        }
                        let cg = match self.cgroups.get(name) {
                            Some(cg) => cg.clone(),
                            None => cgroup::resolve(name)
                                .map_err(|reason| PluginError::BadPlan { plugin: plugin.clone(), reason })?,
                        };
                        ids.extend(cgroup::subtree_ids(&cg));
                        self.cgroups.insert(name.clone(), cg);
                    }
                    sub.cgroups = Some(ids);
                }
                if let Matcher::Interval(period) = sub.matcher {
                    r.timers.push((i, period, None));
                }
            }
            let schemas = r.subs.iter().map(|s| s.schema.clone()).collect();
            if let Some(inst) = r.instance.as_mut() {
                inst.set_schemas(schemas);
            }
        }
        self.push_down_syscall_preds(&mut table, source);
        self.table = table;
        self.resolve_aggregations(source, in_host)
    }

    /// Compile every plugin's kernel aggregations and give each plugin its reader.
    fn resolve_aggregations(&mut self, source: &Source<'_>, in_host: bool) -> Result<(), PluginError> {
        let mut specs = Vec::new();
        let mut task: Option<(String, crate::agg::TaskFilter)> = None;
        for r in &mut self.runners {
            let plugin = r.info.name.clone();
            let mut ids = Vec::new();
            for wire in &r.plan.aggregations {
                let id = specs.len() as u32;
                let spec = crate::agg::compile(wire, id, source).map_err(|reason| PluginError::BadPlan {
                    plugin: plugin.clone(),
                    reason: format!("kernel aggregation `{}`: {reason}", wire.name),
                })?;
                let this = crate::agg::TaskFilter::of(&wire.filter);
                match &task {
                    Some((other, t)) if *t != this => {
                        return Err(PluginError::BadPlan {
                            plugin: plugin.clone(),
                            reason: format!(
                                "kernel aggregation `{}`: every kernel aggregation of a run must have the same uid, \
                                 comm, pid and cgroup filters (`{other}` has others)",
                                wire.name
                            ),
                        })
                    }
                    Some(_) => {}
                    None => task = Some((wire.name.clone(), this)),
                }
                ids.push(id);
                specs.push(spec);
            }
            r.agg_ids = ids;
        }
        if specs.is_empty() {
            return Ok(());
        }
        let task = task.map(|(_, t)| t).unwrap_or_default();
        if in_host && !task.cgroups.is_empty() {
            return Err(PluginError::BadPlan {
                plugin: self.runners.iter().find(|r| !r.agg_ids.is_empty()).map_or("", |r| r.name()).to_string(),
                reason: "kernel aggregations with a cgroup filter cannot be recorded or replayed".into(),
            });
        }
        for name in &task.cgroups {
            if !self.cgroups.contains_key(name) {
                let cg =
                    cgroup::resolve(name).map_err(|reason| PluginError::BadPlan { plugin: String::new(), reason })?;
                self.cgroups.insert(name.clone(), cg);
            }
        }
        crate::agg::sites(&specs).map_err(|reason| PluginError::BadPlan { plugin: String::new(), reason })?;
        let backend = if in_host {
            crate::agg::Backend::Host(crate::agg::Evaluator::new(&specs, task.clone()))
        } else {
            crate::agg::Backend::Kernel { values: None, baselines: Default::default() }
        };
        let store: SharedStore = Arc::new(Mutex::new(crate::agg::Store { specs, backend }));
        for r in &mut self.runners {
            if r.agg_ids.is_empty() {
                continue;
            }
            if let Some(inst) = r.instance.as_mut() {
                inst.set_aggregates(Box::new(crate::agg::PluginAggs { store: store.clone(), ids: r.agg_ids.clone() }));
            }
        }
        self.agg_task = task;
        self.aggs = Some(store);
        Ok(())
    }

    /// The aggregation collector's probe sites; empty when nothing aggregates in the kernel.
    pub fn agg_sites(&self) -> Vec<crate::collect::agg::SiteConfig> {
        let Some(store) = &self.aggs else { return Vec::new() };
        let store = store.lock().unwrap_or_else(|e| e.into_inner());
        match store.backend {
            crate::agg::Backend::Host(_) => Vec::new(),
            crate::agg::Backend::Kernel { .. } => crate::agg::sites(&store.specs).unwrap_or_default(),
        }
    }

    /// The aggregation collector's filter (the caller adds `-p`/`-c` targets).
    pub fn agg_filter(&self) -> KernelFilter {
        let cgroups = self
            .agg_task
            .cgroups
            .iter()
            .filter_map(|name| self.cgroups.get(name))
            .flat_map(|cg| std::iter::once((cg.id, cg.level)))
            .collect();
        self.agg_task.kernel(cgroups)
    }

    /// Hand the kernel's aggregation map to the plugins' readers.
    pub fn attach_kernel_values(&mut self, values: crate::collect::agg::KernelValues) {
        if let Some(store) = &self.aggs {
            if let crate::agg::Backend::Kernel { values: v, .. } =
                &mut store.lock().unwrap_or_else(|e| e.into_inner()).backend
            {
                *v = Some(values);
            }
        }
    }

    /// Events the host's aggregation evaluator lost to a full map.
    pub fn agg_lost(&self) -> u64 {
        self.aggs.as_ref().map_or(0, |s| s.lock().unwrap_or_else(|e| e.into_inner()).host_lost())
    }

    /// Comparisons on a syscall's arguments run in the kernel when every subscription that
    /// sees that syscall asks for the same ones.
    fn push_down_syscall_preds(&self, table: &mut ProbeTable, source: &Source<'_>) {
        for exit in [false, true] {
            let kind = if exit { Kind::SysExit } else { Kind::SysEnter };
            let subs: Vec<&Sub> =
                self.runners.iter().flat_map(|r| &r.subs).filter(|s| s.matcher == Matcher::Kind(kind)).collect();
            if subs.iter().any(|s| s.syscalls.is_none()) {
                continue;
            }
            let nrs: BTreeSet<u32> = subs.iter().flat_map(|s| s.syscalls.iter().flatten().copied()).collect();
            for nr in nrs {
                let covering: Vec<&&Sub> =
                    subs.iter().filter(|s| s.syscalls.as_ref().is_some_and(|set| set.contains(&nr))).collect();
                let first = &covering[0].preds;
                if first.is_empty() || covering.iter().any(|s| s.preds != *first) || nr >= table::NR_SYSCALLS {
                    continue;
                }
                let key = if exit { table::NR_SYSCALLS + nr } else { nr };
                table.syscall_preds.insert(key, first.iter().take(table::KERNEL_PREDS_MAX).copied().collect());
            }
        }
        if let Source::Recorded(t) = source {
            table.syscall_args = t.syscall_args.clone();
        }
    }

    /// Route every record of a chunk to the plugins, then deliver the partial batches.
    pub fn dispatch(&mut self, bytes: &[u8], out: &mut Output, clock: &Clock) {
        let store = self.aggs.clone();
        let mut store = store.as_ref().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
        let mut evaluator = match store.as_deref_mut() {
            Some(crate::agg::Store { backend: crate::agg::Backend::Host(e), .. }) => Some(e),
            _ => None,
        };
        for rec in wasmtap_abi::Records::new(bytes) {
            let Some(kind) = rec.kind() else { continue };
            if let Some(e) = evaluator.as_mut() {
                e.offer(&rec);
            }
            for r in &mut self.runners {
                r.offer(&rec, kind, out, clock);
            }
        }
        drop(store);
        for r in &mut self.runners {
            r.flush(out, clock);
        }
    }

    /// Probe kinds any plugin needs.
    pub fn kinds(&self) -> BTreeSet<Kind> {
        self.runners.iter().flat_map(|r| r.kinds()).collect()
    }

    /// The filters every subscription agrees on, which can be pushed into the kernel:
    /// a dimension is constrained only if every subscription constrains it. The caller
    /// adds the target process set.
    pub fn kernel_filter(&self) -> KernelFilter {
        let subs: Vec<(&Sub, &types::Subscription)> = self
            .runners
            .iter()
            .flat_map(|r| r.subs.iter().zip(&r.plan.subscriptions))
            .filter(|(s, _)| s.kind().is_some())
            .collect();
        let agreed = |get: &dyn Fn(&types::Subscription) -> bool| !subs.is_empty() && subs.iter().all(|(_, w)| get(w));
        let syscall_subs: Vec<&Sub> =
            subs.iter().map(|(s, _)| *s).filter(|s| matches!(s.kind(), Some(Kind::SysEnter | Kind::SysExit))).collect();
        let syscalls = if !syscall_subs.is_empty() && syscall_subs.iter().all(|s| s.syscalls.is_some()) {
            Some(syscall_subs.iter().flat_map(|s| s.syscalls.iter().flatten().copied()).collect::<BTreeSet<_>>())
        } else {
            None
        };
        let union_u32 = |get: fn(&types::Subscription) -> &Vec<u32>| -> Vec<u32> {
            subs.iter().flat_map(|(_, w)| get(w).iter().copied()).collect::<BTreeSet<_>>().into_iter().collect()
        };
        let uids = agreed(&|w| !w.filter.uids.is_empty()).then(|| union_u32(|w| &w.filter.uids));
        let pids = agreed(&|w| !w.filter.pids.is_empty()).then(|| union_u32(|w| &w.filter.pids));
        let comms = agreed(&|w| !w.filter.comms.is_empty()).then(|| {
            subs.iter().flat_map(|(_, w)| w.filter.comms.iter().cloned()).collect::<BTreeSet<_>>().into_iter().collect()
        });
        let cgroups = agreed(&|w| !w.filter.cgroups.is_empty()).then(|| {
            subs.iter()
                .flat_map(|(_, w)| w.filter.cgroups.iter())
                .filter_map(|name| self.cgroups.get(name))
                .map(|cg| (cg.id, cg.level))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        });
        KernelFilter {
            syscalls: syscalls.map(|s| s.into_iter().collect()),
            uids,
            comms,
            cgroups,
            targets: pids,
            ..KernelFilter::default()
        }
    }

    /// Fire `begin` subscriptions.
    pub fn begin(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        for r in &mut self.runners {
            r.begin(now_ns, out, clock);
        }
    }

    pub fn tick(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        for r in &mut self.runners {
            r.tick_if_due(now_ns, out, clock);
        }
    }

    pub fn finish(&mut self, out: &mut Output, clock: &Clock) {
        for r in &mut self.runners {
            r.finish(out, clock);
        }
    }

    pub fn stats(&self) -> Vec<PluginStats> {
        self.runners.iter().map(|r| r.stats.clone()).collect()
    }

    pub fn any_disabled(&self) -> bool {
        self.runners.iter().any(|r| r.stats.disabled.is_some())
    }

    /// Names of the probes subscribed, for the recording header.
    pub fn probe_names(&self) -> Vec<String> {
        let mut set: BTreeSet<String> =
            self.runners.iter().flat_map(|r| r.plan.subscriptions.iter().map(|s| s.probe.clone())).collect();
        for r in &self.runners {
            for a in &r.plan.aggregations {
                set.insert(a.probe.clone());
                set.extend(a.start.iter().map(|s| s.probe.clone()));
            }
        }
        set.into_iter().collect()
    }

    /// Warnings collected while starting (skipped optional probes).
    pub fn warnings(&self) -> Vec<String> {
        self.runners
            .iter()
            .flat_map(|r| r.stats.warnings.iter().map(move |w| format!("{}: {w}", r.info.name)))
            .collect()
    }
}

/// Resolve one subscription: its matcher, schema, comparisons, and its part of the table.
fn resolve_sub(
    table: &mut ProbeTable,
    tp_index: &mut BTreeMap<(String, String), usize>,
    perf_index: &mut BTreeMap<u32, usize>,
    sub: &mut Sub,
    wire: &types::Subscription,
    spec: &ProbeSpec,
    source: &Source<'_>,
) -> Result<(), String> {
    let preds = &wire.filter.predicates;
    let schema =
        |fields: Vec<types::Field>, args: Vec<String>| types::ProbeSchema { probe: wire.probe.clone(), fields, args };
    match spec {
        ProbeSpec::Syscall { kind, nr } => {
            sub.matcher = Matcher::Kind(*kind);
            let names: Vec<String> = match nr {
                Some(nr) if *kind == Kind::SysEnter => {
                    let names = source.syscall_args(*nr);
                    table.syscall_args.insert(*nr, names.clone());
                    names
                }
                _ => Vec::new(),
            };
            let locate = |field: &str| -> Result<FieldLoc, String> {
                if *kind == Kind::SysExit {
                    return match field {
                        "ret" => Ok(FieldLoc { off: 0, size: 8, signed: true }),
                        _ => Err(format!("syscall exits have one field to compare, `ret`, not `{field}`")),
                    };
                }
                let i = field
                    .strip_prefix("arg")
                    .and_then(|n| n.parse::<u16>().ok())
                    .filter(|i| *i < 6)
                    .or_else(|| names.iter().position(|n| n == field).map(|i| i as u16))
                    .ok_or_else(|| {
                        let known = if names.is_empty() { "arg0..arg5".to_string() } else { names.join(", ") };
                        format!("no argument `{field}` (it has: {known})")
                    })?;
                Ok(FieldLoc { off: i * 8, size: 8, signed: false })
            };
            sub.preds = compile_preds(preds, locate)?;
            // args[6] and ret both sit at offset 64 of their records.
            sub.pred_base = wasmtap_abi::sys_enter::ARGS;
            sub.schema = Some(schema(Vec::new(), names));
        }
        ProbeSpec::Proc(kind) => {
            if !preds.is_empty() {
                return Err("proc probes take no field comparisons; filter in the plugin".into());
            }
            sub.matcher = Matcher::Kind(*kind);
        }
        ProbeSpec::Tracepoint { category, name } => {
            let format = source.tracepoint(category, name)?;
            sub.preds = compile_preds(preds, |f| table::tracepoint_field(&format, f))?;
            sub.pred_base = wasmtap_abi::tracepoint::DATA;
            sub.matcher = Matcher::Tracepoint(format.id);
            let fields = format.fields.iter().map(wire_field).collect();
            sub.schema = Some(schema(fields, Vec::new()));
            let key = (category.clone(), name.clone());
            match tp_index.get(&key) {
                Some(&i) => {
                    let e = &mut table.tracepoints[i];
                    e.stacks |= sub.stacks;
                    if e.preds != kernel_preds(&sub.preds) {
                        e.preds.clear();
                    }
                }
                None => {
                    tp_index.insert(key, table.tracepoints.len());
                    let preds = kernel_preds(&sub.preds);
                    table.tracepoints.push(table::TracepointEntry { format, stacks: sub.stacks, preds });
                }
            }
        }
        ProbeSpec::Uprobe { .. } | ProbeSpec::Usdt { .. } => {
            let ret = matches!(spec, ProbeSpec::Uprobe { ret: true, .. });
            let sites = source.user_sites(&wire.probe, spec)?;
            let nargs = match spec {
                ProbeSpec::Usdt { .. } => sites.first().and_then(|s| s.usdt.as_ref()).map_or(0, |a| a.len()),
                _ if ret => 0,
                _ => 6,
            };
            let args: Vec<String> =
                if ret { vec!["retval".to_string()] } else { (0..nargs).map(|i| format!("arg{i}")).collect() };
            let locate = |field: &str| -> Result<FieldLoc, String> {
                let i = args.iter().position(|a| a == field).ok_or_else(|| {
                    format!(
                        "no value `{field}` to compare (it has: {})",
                        if args.is_empty() { "none".into() } else { args.join(", ") }
                    )
                })?;
                Ok(FieldLoc { off: (wasmtap_abi::user::ARGS + 8 * i) as u16, size: 8, signed: true })
            };
            sub.preds = compile_preds(preds, locate)?;
            sub.pred_base = 0;
            let mut slots = BTreeSet::new();
            for site in sites {
                if let Some(slot) = site.recorded_slot {
                    slots.insert(slot);
                    continue;
                }
                if table.user.len() >= table::USER_SLOTS_MAX {
                    return Err(format!("more than {} uprobe and USDT attachments", table::USER_SLOTS_MAX));
                }
                slots.insert(table.user.len() as u32);
                table.user.push(table::UserSlot {
                    probe: wire.probe.clone(),
                    path: site.path,
                    offset: site.offset,
                    ret,
                    usdt: site.usdt,
                    semaphore: site.semaphore,
                    stacks: sub.stacks,
                    preds: kernel_preds(&sub.preds),
                });
            }
            sub.matcher = Matcher::User(slots);
            sub.schema = Some(schema(Vec::new(), args));
        }
        ProbeSpec::Profile { .. } | ProbeSpec::Software { .. } => {
            let (event, name, freq, period) = match spec {
                ProbeSpec::Profile { hz } => (0, "cpu-clock".to_string(), Some(*hz), 0),
                ProbeSpec::Software { event, period } => (event.config, event.name.to_string(), None, *period),
                _ => unreachable!(),
            };
            let locate = |field: &str| -> Result<FieldLoc, String> {
                use wasmtap_abi::sample;
                match field {
                    "addr" => Ok(FieldLoc { off: sample::ADDR as u16, size: 8, signed: false }),
                    "ip" => Ok(FieldLoc { off: sample::IP as u16, size: 8, signed: false }),
                    "cpu" => Ok(FieldLoc { off: sample::CPU as u16, size: 4, signed: false }),
                    _ => Err(format!("no field `{field}` (it has: addr, ip, cpu)")),
                }
            };
            sub.preds = compile_preds(preds, locate)?;
            sub.pred_base = 0;
            sub.matcher = Matcher::Sample(event);
            match perf_index.get(&event) {
                Some(&i) => {
                    let e = &mut table.perf[i];
                    if e.freq != freq || e.period != period {
                        return Err(format!(
                            "`{}` asks for a different rate than another subscription to {name}",
                            wire.probe
                        ));
                    }
                    e.stacks |= sub.stacks;
                    if e.preds != kernel_preds(&sub.preds) {
                        e.preds.clear();
                    }
                }
                None => {
                    perf_index.insert(event, table.perf.len());
                    let preds = kernel_preds(&sub.preds);
                    table.perf.push(table::PerfEntry { event, name, freq, period, stacks: sub.stacks, preds });
                }
            }
            sub.schema = Some(schema(Vec::new(), Vec::new()));
        }
        ProbeSpec::Interval { period_ns } => sub.matcher = Matcher::Interval(*period_ns),
        ProbeSpec::Begin => sub.matcher = Matcher::Begin,
        ProbeSpec::End => sub.matcher = Matcher::End,
    }
    if sub.stacks != 0 && !matches!(sub.matcher, Matcher::Tracepoint(_) | Matcher::User(_) | Matcher::Sample(_)) {
        return Err("stacks are recorded for tracepoint, uprobe, USDT, profile and software probes only".into());
    }
    Ok(())
}

fn kernel_preds(preds: &[Pred]) -> Vec<Pred> {
    preds.iter().take(table::KERNEL_PREDS_MAX).copied().collect()
}

pub(crate) fn compile_preds(
    preds: &[types::Predicate],
    locate: impl Fn(&str) -> Result<FieldLoc, String>,
) -> Result<Vec<Pred>, String> {
    if preds.len() > 64 {
        return Err("more than 64 comparisons".into());
    }
    preds
        .iter()
        .map(|p| {
            let loc = locate(&p.field)?;
            let op = match p.op {
                types::CmpOp::Eq => Op::Eq,
                types::CmpOp::Ne => Op::Ne,
                types::CmpOp::Lt => Op::Lt,
                types::CmpOp::Le => Op::Le,
                types::CmpOp::Gt => Op::Gt,
                types::CmpOp::Ge => Op::Ge,
                types::CmpOp::MaskAny => Op::MaskAny,
                types::CmpOp::MaskNone => Op::MaskNone,
            };
            Ok(Pred { off: loc.off, size: loc.size, signed: loc.signed, op, value: p.value as u64 })
        })
        .collect()
}

fn wire_field(f: &tracefs::Field) -> types::Field {
    let kind = match f.kind {
        FieldKind::Signed => types::FieldType::Signed,
        FieldKind::Unsigned => types::FieldType::Unsigned,
        FieldKind::Text => types::FieldType::Text,
        FieldKind::DynamicText => types::FieldType::DynamicText,
        FieldKind::DynamicBytes => types::FieldType::DynamicBytes,
        FieldKind::Array => types::FieldType::Array,
    };
    types::Field {
        name: f.name.clone(),
        c_type: f.c_type.clone(),
        kind,
        offset: f.offset,
        size: f.size,
        count: f.count,
        signed: f.signed,
    }
}

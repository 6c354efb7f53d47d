//! Plugins as the pipeline sees them: loaded, started with validated parameters, their
//! subscriptions resolved, and events routed to them in batches (never one call per
//! event). A plugin that faults is disabled alone; its later events are counted as dropped.

pub mod params;
pub mod resolve;

use std::collections::BTreeSet;

use serde::Serialize;
use wasmtap_abi::{header, Kind, Record};

use crate::collect::live::KernelFilter;
use crate::collect::probes::{self, ProbeError};
use crate::output::Output;
use crate::sandbox::types::{Plan, PluginInfo, TableSpec};
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
    #[error("{plugin}: {source}")]
    Probe { plugin: String, source: ProbeError },
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
}

/// A subscription compiled for matching in the host.
struct Sub {
    kind: Kind,
    syscalls: Option<BTreeSet<u32>>,
    uids: Option<BTreeSet<u32>>,
    comms: Option<Vec<[u8; 16]>>,
}

impl Sub {
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
        true
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
    next_tick_ns: Option<u64>,
}

impl Runner {
    /// Start a described plugin with its validated parameters.
    pub fn start(d: Described, params: &[crate::sandbox::types::Param]) -> Result<Runner, PluginError> {
        let Described { info, loaded, mut instance } = d;
        let name = info.name.clone();
        let fault = |fault| PluginError::Fault { path: loaded.path().display().to_string(), fault };
        let plan = instance
            .start(params)
            .map_err(fault)?
            .map_err(|message| PluginError::Refused { plugin: name.clone(), message })?;
        let subs = compile_subs(&name, &plan)?;
        for t in &plan.tables {
            if t.columns.is_empty() || t.columns.len() > 64 {
                return Err(PluginError::BadPlan {
                    plugin: name,
                    reason: format!("table `{}` must have 1 to 64 columns", t.name),
                });
            }
        }
        if plan.tick_ms == Some(0) {
            return Err(PluginError::BadPlan { plugin: name, reason: "tick-ms must be at least 1".into() });
        }
        let stats = PluginStats { name: name.clone(), ..Default::default() };
        Ok(Runner {
            info,
            plan,
            instance: Some(instance),
            subs,
            batch: Vec::with_capacity(256 << 10),
            batch_records: 0,
            stats,
            next_tick_ns: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The record kinds this plugin subscribes to.
    pub fn kinds(&self) -> impl Iterator<Item = Kind> + '_ {
        self.subs.iter().map(|s| s.kind)
    }

    /// Offer one record; it is queued if a subscription matches.
    fn offer(&mut self, rec: &Record<'_>, kind: Kind, out: &mut Output, clock: &Clock) {
        let mut subscribed = false;
        let mut matched = None;
        for (i, s) in self.subs.iter().enumerate() {
            if s.kind == kind {
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

    /// Run `on-tick` if one is due at `now_ns`.
    pub fn tick_if_due(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        let Some(ms) = self.plan.tick_ms else { return };
        let period = ms as u64 * 1_000_000;
        let due = *self.next_tick_ns.get_or_insert(now_ns + period);
        if now_ns < due || self.instance.is_none() {
            return;
        }
        self.flush(out, clock);
        self.next_tick_ns = Some(due + period * ((now_ns - due) / period + 1));
        let Some(inst) = self.instance.as_mut() else { return };
        inst.set_clock(Clock { fixed_mono_ns: Some(due), ..*clock });
        match inst.on_tick(due) {
            Ok(aggs) => {
                self.render(out, clock);
                out.aggregations(&self.info.name, &aggs);
            }
            Err(f) => self.disable(f, out),
        }
    }

    /// The end: flush, then `finish`.
    pub fn finish(&mut self, out: &mut Output, clock: &Clock) {
        self.flush(out, clock);
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

fn compile_subs(plugin: &str, plan: &Plan) -> Result<Vec<Sub>, PluginError> {
    if plan.subscriptions.is_empty() {
        return Err(PluginError::BadPlan { plugin: plugin.into(), reason: "no subscriptions".into() });
    }
    plan.subscriptions
        .iter()
        .map(|s| {
            let probe =
                probes::resolve(&s.probe).map_err(|source| PluginError::Probe { plugin: plugin.into(), source })?;
            let mut syscalls: BTreeSet<u32> = s.filter.syscalls.iter().copied().collect();
            syscalls.extend(probe.syscall);
            let syscall_kind = matches!(probe.kind, Kind::SysEnter | Kind::SysExit);
            if !syscalls.is_empty() && !syscall_kind {
                return Err(PluginError::BadPlan {
                    plugin: plugin.into(),
                    reason: format!("a syscall filter on `{}`, which is not a syscall probe", s.probe),
                });
            }
            let comms = s.filter.comms.iter().map(|c| crate::collect::live::comm_key(c)).collect::<Vec<_>>();
            Ok(Sub {
                kind: probe.kind,
                syscalls: (!syscalls.is_empty()).then_some(syscalls),
                uids: (!s.filter.uids.is_empty()).then(|| s.filter.uids.iter().copied().collect()),
                comms: (!comms.is_empty()).then_some(comms),
            })
        })
        .collect()
}

/// All plugins of one run.
pub struct PluginSet {
    pub runners: Vec<Runner>,
}

impl PluginSet {
    /// Route every record of a chunk to the plugins, then deliver the partial batches.
    pub fn dispatch(&mut self, bytes: &[u8], out: &mut Output, clock: &Clock) {
        for rec in wasmtap_abi::Records::new(bytes) {
            let Some(kind) = rec.kind() else { continue };
            for r in &mut self.runners {
                r.offer(&rec, kind, out, clock);
            }
        }
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
        let subs: Vec<(&Sub, &crate::sandbox::types::Subscription)> =
            self.runners.iter().flat_map(|r| r.subs.iter().zip(&r.plan.subscriptions)).collect();
        let syscall_subs: Vec<&Sub> =
            subs.iter().map(|(s, _)| *s).filter(|s| matches!(s.kind, Kind::SysEnter | Kind::SysExit)).collect();
        let syscalls = if !syscall_subs.is_empty() && syscall_subs.iter().all(|s| s.syscalls.is_some()) {
            Some(
                syscall_subs
                    .iter()
                    .flat_map(|s| s.syscalls.iter().flatten().copied())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            )
        } else {
            None
        };
        let uids = subs.iter().all(|(s, _)| s.uids.is_some()).then(|| {
            subs.iter()
                .flat_map(|(s, _)| s.uids.iter().flatten().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        });
        let comms = subs.iter().all(|(_, p)| !p.filter.comms.is_empty()).then(|| {
            subs.iter().flat_map(|(_, p)| p.filter.comms.iter().cloned()).collect::<BTreeSet<_>>().into_iter().collect()
        });
        KernelFilter { syscalls, uids, comms, ..KernelFilter::default() }
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
        let set: BTreeSet<String> =
            self.runners.iter().flat_map(|r| r.plan.subscriptions.iter().map(|s| s.probe.clone())).collect();
        set.into_iter().collect()
    }
}

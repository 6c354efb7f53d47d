//! Plugins as the pipeline sees them: loaded, started with validated parameters, their
//! subscriptions resolved, and events routed to them in batches (never one call per
//! event). A plugin that faults is disabled alone; its later events are counted as dropped.

mod bounds;
pub mod params;
pub mod resolve;
pub mod symbols;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtap_abi::{header, Kind, Record};

use crate::accounting::{AggregationLosses, FaultReport, KernelCounters, PluginStats, ProbeRow, ProbeStats};
use crate::agg::SharedStore;
use crate::clock::Clock;
use crate::collect::cgroup::{self, Cgroup};
use crate::collect::live::KernelFilter;
use crate::collect::probes::{self, ProbeError, ProbeSpec};
use crate::collect::table::{self, FieldLoc, Pred, ProbeTable, Source};
use crate::collect::tracefs::{self, FieldKind};
use crate::limits::{FaultKind, Limits, OnFault};
use crate::output::Output;
use crate::sandbox::{Fault, GuestItem, Instance, LoadedPlugin, Sandbox, SandboxError};
use crate::wit::types::{self, Plan, PluginInfo, TableSpec};
use crate::wit::Cell;

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

/// Load a plugin and ask it what it is (within `limits`).
pub fn describe(sandbox: &Sandbox, arg: &str, clock: Clock, limits: &Limits) -> Result<Described, PluginError> {
    let path = resolve::resolve(arg)?;
    let loaded = sandbox.load(&path)?;
    let fault = |fault| PluginError::Fault { path: path.display().to_string(), fault };
    let mut instance = loaded.instantiate(clock, limits).map_err(fault)?;
    let info = instance.info().map_err(fault)?;
    let name_ok = !info.name.is_empty()
        && info.name.len() <= 64
        && info.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !name_ok {
        return Err(PluginError::BadPlan {
            plugin: path.display().to_string(),
            reason: format!("invalid plugin name {:?}", info.name.get(..64).unwrap_or(&info.name)),
        });
    }
    bounds::check_info(&info)
        .map_err(|e| PluginError::BadPlan { plugin: info.name.clone(), reason: format!("bad info: {e}") })?;
    Ok(Described { info, loaded, instance })
}

impl Described {
    /// The same plugin in a fresh instance under other limits (a per-plugin override).
    pub fn with_limits(self, limits: &Limits) -> Result<Described, PluginError> {
        let fault = |fault| PluginError::Fault { path: self.loaded.path().display().to_string(), fault };
        let instance = self.loaded.instantiate(Clock::live(), limits).map_err(fault)?;
        Ok(Described { instance, ..self })
    }
}

/// How far a plugin is through its budget for the current second.
#[derive(Debug)]
struct Budget {
    /// False in replays: their output must not depend on how fast the machine is.
    enforced: bool,
    window: Instant,
    cpu_ns: u64,
    output_bytes: u64,
    /// Over budget in this window: its events are dropped until the next.
    over: bool,
    /// Windows in a row that went over.
    strikes: u32,
    /// When the plugin's last call (and the host's work for it) ended.
    last_work: Instant,
}

impl Budget {
    fn new(enforced: bool) -> Budget {
        let now = Instant::now();
        Budget { enforced, window: now, cpu_ns: 0, output_bytes: 0, over: false, strikes: 0, last_work: now }
    }

    /// Start a new window if a second has passed.
    fn roll(&mut self, now: Instant) {
        if now.duration_since(self.window) < Duration::from_secs(1) {
            return;
        }
        // A whole second passed with no call: a second within budget. A second the host
        // spent on the plugin's own work (a long report) does not count as one.
        let missed = now.duration_since(self.window) >= Duration::from_secs(2)
            && now.duration_since(self.last_work) >= Duration::from_secs(1);
        if !self.over || missed {
            self.strikes = 0;
        }
        self.window = now;
        self.cpu_ns = 0;
        self.output_bytes = 0;
        self.over = false;
    }
}

/// Where a plugin is in its life.
enum Life {
    /// Since when (the run's clock: the recording's in a replay), and how many calls completed.
    Running {
        since_ns: u64,
        ok_calls: u64,
    },
    /// Faulted; restarts at `at_ns`.
    Restarting {
        at_ns: u64,
    },
    Disabled,
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
    /// Its records carry addresses to symbolize (stacks, user-probe arguments, samples):
    /// their processes join the plugin's symbolize scope.
    addresses: bool,
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

    /// True when the record belongs to the subscription's probe: its record kind, and
    /// for syscall probes one of its syscalls. Whether it passes the subscription's
    /// filters is [`Sub::matches`].
    fn takes(&self, rec: &Record<'_>, kind: Kind) -> bool {
        match &self.matcher {
            Matcher::Kind(k) if *k != kind => false,
            Matcher::Kind(_) => match &self.syscalls {
                Some(set) => {
                    let id = rec.i64_at(wasmtap_abi::sys_enter::ID).unwrap_or(-1);
                    u32::try_from(id).is_ok_and(|id| set.contains(&id))
                }
                None => true,
            },
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

    /// True when the kernel counts this subscription's events in counter row `row`.
    fn covers(&self, row: ProbeRow, table: &ProbeTable) -> bool {
        match (&self.matcher, row) {
            (Matcher::Kind(k), ProbeRow::SysEnter(nr) | ProbeRow::SysExit(nr)) if *k == row.kind() => {
                self.syscalls.as_ref().is_none_or(|set| set.contains(&nr))
            }
            (Matcher::Kind(k), ProbeRow::Kind(r)) => *k == r && self.syscalls.is_none(),
            (Matcher::Tracepoint(id), ProbeRow::Tracepoint(slot)) => {
                table.tracepoints.get(slot as usize).is_some_and(|t| t.format.id == *id)
            }
            (Matcher::User(slots), ProbeRow::User(slot)) => slots.contains(&slot),
            (Matcher::Sample(event), ProbeRow::Perf(slot)) => {
                table.perf.get(slot as usize).is_some_and(|p| p.event == *event)
            }
            _ => false,
        }
    }

    fn matches(&self, rec: &Record<'_>) -> bool {
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
    loaded: LoadedPlugin,
    params: Vec<types::Param>,
    limits: Limits,
    instance: Option<Instance>,
    /// The most linear memory and tables one of its instances held.
    memory_peak: u64,
    life: Life,
    /// Faults in a row that came before the plugin completed a call.
    crash_streak: u32,
    /// Doublings of the next restart's backoff.
    backoff_exp: u32,
    budget: Budget,
    /// CPU time of discarded instances, and how much of the current one's is charged.
    cpu_base_ns: u64,
    cpu_charged_ns: u64,
    /// Host CPU time spent on its output, in all and as charged to the budget so far.
    host_cpu_ns: u64,
    host_cpu_charged_ns: u64,
    subs: Vec<Sub>,
    /// Per subscription: records filtered, delivered, dropped.
    sub_stats: Vec<ProbeStats>,
    batch: Vec<u8>,
    batch_records: usize,
    /// Records of the queued batch, by subscription.
    batch_subs: Vec<u64>,
    pub stats: PluginStats,
    /// Interval subscriptions: (sub, period, next due time).
    timers: Vec<(usize, u64, Option<u64>)>,
    /// The plan's own subscriptions; those after them stream the probes of kernel
    /// aggregations that the host computes (recording, replay).
    own_subs: usize,
    /// Global ids of the plan's kernel aggregations.
    agg_ids: Vec<u32>,
    /// What a new instance is given after a restart.
    schemas: Vec<Option<types::ProbeSchema>>,
    aggs_reader: Option<crate::agg::PluginAggs>,
    /// The processes whose records were queued for it: what `host.symbolize` may name.
    scope: crate::sandbox::SharedScope,
    /// Pids of the queued batch, not yet in `scope` (one lock per batch, not per record).
    batch_pids: Vec<u32>,
}

/// Host work done for a plugin, measured from [`HostWork::begin`] to [`HostWork::end`]:
/// the pipeline thread's CPU time and the bytes written.
struct HostWork {
    cpu_ns: u64,
    written: u64,
}

impl HostWork {
    fn begin(out: &Output) -> HostWork {
        HostWork { cpu_ns: crate::sys::thread_cpu_ns(), written: out.written() }
    }

    fn end(self, out: &Output) -> (u64, u64) {
        (crate::sys::thread_cpu_ns().saturating_sub(self.cpu_ns), out.written() - self.written)
    }
}

/// The first restart waits this long; each fault in a row doubles it, up to [`BACKOFF_MAX`].
pub const BACKOFF_BASE: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A life this long resets the backoff.
const HEALTHY_LIFE: Duration = Duration::from_secs(10);

impl Runner {
    /// Start a described plugin with its validated parameters, under `limits`; budgets
    /// are enforced when `live`. Probe names are parsed here; they are resolved against
    /// the system by [`PluginSet::resolve`].
    pub fn start(
        d: Described,
        params: &[crate::wit::types::Param],
        limits: Limits,
        live: bool,
    ) -> Result<Runner, PluginError> {
        let Described { info, loaded, mut instance } = d;
        let name = info.name.clone();
        let fault = |fault| PluginError::Fault { path: loaded.path().display().to_string(), fault };
        let plan = instance
            .start(params)
            .map_err(fault)?
            .map_err(|message| PluginError::Refused { plugin: name.clone(), message })?;
        bounds::check_plan(&plan).map_err(|e| PluginError::BadPlan { plugin: name.clone(), reason: e.to_string() })?;
        let mut warnings = Vec::new();
        if let crate::sandbox::cache::Outcome::Rebuilt { reason } = loaded.cache_outcome() {
            warnings.push(format!("its compiled-code cache entry was not valid ({reason}); compiled it again"));
        }
        let subs = parse_subs(&name, &plan, &mut warnings)?;
        let own_subs = subs.len();
        let sub_stats =
            plan.subscriptions.iter().map(|s| ProbeStats { probe: s.probe.clone(), ..Default::default() }).collect();
        let code = loaded.cache_outcome().to_string();
        let scope = crate::sandbox::SharedScope::default();
        instance.set_symbol_scope(scope.clone());
        let stats = PluginStats { name: name.clone(), code, warnings, limits: limits.clone(), ..Default::default() };
        Ok(Runner {
            info,
            plan,
            loaded,
            params: params.to_vec(),
            limits,
            instance: Some(instance),
            memory_peak: 0,
            life: Life::Running { since_ns: 0, ok_calls: 0 },
            crash_streak: 0,
            backoff_exp: 0,
            budget: Budget::new(live),
            cpu_base_ns: 0,
            cpu_charged_ns: 0,
            host_cpu_ns: 0,
            host_cpu_charged_ns: 0,
            batch_subs: vec![0; subs.len()],
            subs,
            sub_stats,
            batch: Vec::with_capacity(256 << 10),
            batch_records: 0,
            stats,
            timers: Vec::new(),
            own_subs,
            agg_ids: Vec::new(),
            schemas: Vec::new(),
            aggs_reader: None,
            scope,
            batch_pids: Vec::new(),
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
        let mut first = None;
        let mut matched = None;
        for (i, s) in self.subs[..self.own_subs].iter().enumerate() {
            if s.takes(rec, kind) {
                first.get_or_insert(i);
                if s.matches(rec) {
                    matched = Some(i);
                    break;
                }
            }
        }
        let Some(i) = matched else {
            if let Some(i) = first {
                self.sub_stats[i].filtered += 1;
            }
            return;
        };
        if !matches!(self.life, Life::Running { .. }) {
            self.sub_stats[i].dropped_fault += 1;
            return;
        }
        if self.budget.over {
            self.sub_stats[i].dropped_budget += 1;
            return;
        }
        let start = self.batch.len();
        self.batch.extend_from_slice(rec.bytes());
        self.batch[start + header::SUB..start + header::SUB + 2].copy_from_slice(&(i as u16).to_le_bytes());
        self.batch_records += 1;
        self.batch_subs[i] += 1;
        if self.subs[i].addresses && self.batch_pids.last() != Some(&rec.pid()) {
            self.batch_pids.push(rec.pid());
        }
        if self.batch_records >= BATCH_RECORDS {
            self.flush(out, clock);
        }
    }

    /// Deliver the queued batch.
    pub fn flush(&mut self, out: &mut Output, clock: &Clock) {
        if self.batch_records == 0 {
            return;
        }
        self.batch_records = 0;
        let mut scope = self.scope.lock().unwrap_or_else(|e| e.into_inner());
        self.batch_pids.drain(..).for_each(|pid| scope.insert(pid));
        drop(scope);
        self.arm();
        crate::watchdog::calling(&self.info.name, "on-batch");
        let res = match self.instance.as_mut() {
            Some(inst) => {
                inst.set_clock(*clock);
                let r = inst.on_batch(&self.batch);
                self.stats.batches += 1;
                r
            }
            None => Err(Fault {
                callback: "on-batch",
                kind: FaultKind::Contract,
                reason: "no instance".into(),
                backtrace: None,
                elapsed: Duration::ZERO,
            }),
        };
        self.batch.clear();
        let ok = res.is_ok();
        for (i, n) in self.batch_subs.iter_mut().enumerate() {
            let n = std::mem::take(n);
            if ok {
                self.sub_stats[i].delivered += n;
            } else {
                self.sub_stats[i].dropped_fault += n;
            }
        }
        self.after_call(res, out, clock);
    }

    /// Account for a call's result: output, budget, fault.
    fn after_call<R>(&mut self, res: Result<R, Fault>, out: &mut Output, clock: &Clock) -> Option<R> {
        if let Some(inst) = &self.instance {
            self.memory_peak = self.memory_peak.max(inst.memory_bytes());
        }
        match res {
            Ok(r) => {
                if let Life::Running { ok_calls, .. } = &mut self.life {
                    *ok_calls += 1;
                }
                self.render(out, clock);
                self.charge(out);
                Some(r)
            }
            Err(f) => {
                self.fault(f, out, clock);
                None
            }
        }
    }

    /// Charge the last call's CPU time and output to the budget; over it, the plugin's
    /// events are dropped for the rest of the second, and too many seconds in a row
    /// disable it.
    fn charge(&mut self, out: &mut Output) {
        let Some(inst) = self.instance.as_ref() else { return };
        let cpu = inst.meter().cpu_ns;
        let host = self.host_cpu_ns - self.host_cpu_charged_ns;
        let spent = cpu.saturating_sub(self.cpu_charged_ns) + host;
        self.cpu_charged_ns = cpu;
        self.host_cpu_charged_ns = self.host_cpu_ns;
        self.budget.last_work = Instant::now();
        if !self.budget.enforced {
            return;
        }
        self.budget.cpu_ns += spent;
        let cpu_over = self.budget.cpu_ns > self.limits.cpu_ms_per_sec * 1_000_000;
        let output_over = self.budget.output_bytes >= self.limits.output_bytes_per_sec;
        if self.budget.over || !(cpu_over || output_over) {
            return;
        }
        self.budget.over = true;
        self.budget.strikes += 1;
        self.stats.budget_overruns += 1;
        let what = if cpu_over {
            format!("CPU budget ({} ms per second)", self.limits.cpu_ms_per_sec)
        } else {
            format!("output budget ({} KiB per second)", self.limits.output_bytes_per_sec >> 10)
        };
        if self.budget.strikes >= crate::limits::BUDGET_STRIKES {
            let why = format!("over its {what} for {} seconds in a row", self.budget.strikes);
            self.disable_for(&why, out);
            return;
        }
        out.diag(&format!(
            "plugin `{}` is over its {what}: its events are dropped until the next second ({} of {} strikes)",
            self.info.name,
            self.budget.strikes,
            crate::limits::BUDGET_STRIKES
        ));
    }

    /// Before a call: the budget's window, and the output the plugin may still produce in it.
    fn arm(&mut self) {
        self.budget.roll(Instant::now());
        let left = match self.budget.enforced {
            true => self.limits.output_bytes_per_sec.saturating_sub(self.budget.output_bytes),
            false => u64::MAX,
        };
        if let Some(inst) = self.instance.as_mut() {
            inst.set_output_budget(left);
        }
    }

    /// Call `on-tick` for subscription `sub` at `at_ns`.
    /// While the plugin is over its budget, ticks are skipped (and counted): a tick's
    /// report costs the host as much as a batch.
    fn fire(&mut self, sub: usize, at_ns: u64, out: &mut Output, clock: &Clock) {
        self.arm();
        if self.budget.over {
            self.stats.ticks_skipped += 1;
            return;
        }
        let Some(inst) = self.instance.as_mut() else { return };
        inst.set_clock(Clock { fixed_mono_ns: Some(at_ns), ..*clock });
        crate::watchdog::calling(&self.info.name, "on-tick");
        let res = inst.on_tick(sub as u32, at_ns);
        if let Some(aggs) = self.after_call(res, out, clock) {
            self.report(&aggs, out, clock, false);
        }
    }

    /// Render a report of aggregations, charging the host's time and the bytes written
    /// to the plugin. A tick's report is skipped while the plugin is over its output
    /// budget; the final report is always rendered.
    fn report(&mut self, aggs: &[types::Aggregation], out: &mut Output, clock: &Clock, last: bool) {
        if aggs.is_empty() {
            return;
        }
        if !last && self.budget.enforced && self.budget.output_bytes >= self.limits.output_bytes_per_sec {
            self.stats.ticks_skipped += 1;
            return;
        }
        let work = HostWork::begin(out);
        out.aggregations(&self.info.name, aggs);
        let (cpu_ns, bytes) = work.end(out);
        self.host_cpu_ns += cpu_ns;
        self.budget.output_bytes += bytes;
        // A report is host work done for one call: bounded by the call's deadline, like
        // the call. (The final report is the one the user waits for: it is only charged.)
        if !last && Duration::from_nanos(cpu_ns) > self.limits.deadline {
            let entries: usize = aggs.iter().map(|a| a.entries.len()).sum();
            let fault = Fault {
                callback: "on-tick",
                kind: FaultKind::Output,
                reason: format!(
                    "its report of {entries} aggregation entries took the host {} ms of CPU to render, more than its deadline of {} ms",
                    cpu_ns / 1_000_000,
                    self.limits.deadline.as_millis()
                ),
                backtrace: None,
                elapsed: Duration::from_nanos(cpu_ns),
            };
            return self.fault(fault, out, clock);
        }
        self.charge(out);
    }

    /// Fire the `begin` subscriptions (after every probe is attached).
    pub fn begin(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        let begins: Vec<usize> = (0..self.subs.len()).filter(|i| self.subs[*i].matcher == Matcher::Begin).collect();
        for i in begins {
            self.fire(i, now_ns, out, clock);
        }
    }

    /// Restart a faulted plugin whose backoff is over; fire every interval subscription
    /// due at `now_ns`, in time order.
    pub fn tick_if_due(&mut self, now_ns: u64, out: &mut Output, clock: &Clock) {
        if let Life::Restarting { at_ns } = self.life {
            if now_ns >= at_ns {
                self.restart(out, clock);
            }
        }
        loop {
            let due = self
                .timers
                .iter_mut()
                .enumerate()
                .map(|(t, (_, period, next))| (*next.get_or_insert(now_ns.saturating_add(*period)), t))
                .min();
            let Some((due, t)) = due else { return };
            // A timer due at the end of time never fires: a recording's clock may reach it.
            if now_ns < due || due == u64::MAX || self.instance.is_none() {
                return;
            }
            self.flush(out, clock);
            let (sub, period, next) = &mut self.timers[t];
            let sub = *sub;
            let periods = (now_ns - due) / *period + 1;
            *next = Some(periods.checked_mul(*period).and_then(|d| due.checked_add(d)).unwrap_or(u64::MAX));
            self.fire(sub, due, out, clock);
        }
    }

    /// The end: flush, the `end` subscriptions, then `finish`. A plugin waiting to
    /// restart is restarted now, so that it can still report.
    pub fn finish(&mut self, out: &mut Output, clock: &Clock) {
        self.flush(out, clock);
        if matches!(self.life, Life::Restarting { .. }) {
            self.restart(out, clock);
        }
        let ends: Vec<usize> = (0..self.subs.len()).filter(|i| self.subs[*i].matcher == Matcher::End).collect();
        for i in ends {
            self.fire(i, clock.mono_ns(), out, clock);
        }
        self.arm();
        let Some(inst) = self.instance.as_mut() else { return };
        inst.set_clock(*clock);
        crate::watchdog::calling(&self.info.name, "finish");
        let res = inst.finish();
        if let Some(aggs) = self.after_call(res, out, clock) {
            self.report(&aggs, out, clock, true);
        }
    }

    /// Discard the faulted instance; restart it later or disable it, as its policy says.
    fn fault(&mut self, fault: Fault, out: &mut Output, clock: &Clock) {
        if let Some(inst) = self.instance.take() {
            self.retire(&inst);
        }
        self.stats.faults += 1;
        self.stats.last_fault = Some(FaultReport {
            callback: fault.callback,
            kind: fault.kind,
            reason: fault.reason.clone(),
            elapsed_ms: fault.elapsed.as_millis() as u64,
        });
        let now_ns = clock.mono_ns();
        let (lived, ok_calls) = match self.life {
            Life::Running { since_ns, ok_calls } => (Duration::from_nanos(now_ns.saturating_sub(since_ns)), ok_calls),
            _ => (Duration::ZERO, 0),
        };
        self.crash_streak = if ok_calls > 0 { 0 } else { self.crash_streak + 1 };
        let name = &self.info.name;
        if self.limits.on_fault == OnFault::Disable {
            out.diag(&format!("plugin `{name}` disabled {fault}"));
            self.stats.disabled = Some(fault.to_string());
            self.life = Life::Disabled;
            return;
        }
        if self.crash_streak > self.limits.crash_loop {
            let why = format!(
                "crash loop: {} faults in a row before completing a call (limit {}); last {fault}",
                self.crash_streak, self.limits.crash_loop
            );
            out.diag(&format!("plugin `{name}` disabled: {why}"));
            self.stats.disabled = Some(why);
            self.life = Life::Disabled;
            return;
        }
        self.backoff_exp = if lived >= HEALTHY_LIFE { 0 } else { self.backoff_exp };
        let delay = BACKOFF_BASE.saturating_mul(1 << self.backoff_exp.min(16)).min(BACKOFF_MAX);
        self.backoff_exp += 1;
        out.diag(&format!("plugin `{name}` faulted {fault}; restarting in {} ms", delay.as_millis()));
        self.life = Life::Restarting { at_ns: now_ns.saturating_add(delay.as_nanos() as u64) };
    }

    /// A new instance from the compiled plugin, started with the same parameters. It
    /// must ask for the same plan: the probes are attached already.
    fn restart(&mut self, out: &mut Output, clock: &Clock) {
        self.stats.restarts += 1;
        let mut inst = match self.loaded.instantiate(*clock, &self.limits) {
            Ok(inst) => inst,
            Err(f) => return self.fault(f, out, clock),
        };
        self.life = Life::Running { since_ns: clock.mono_ns(), ok_calls: 0 };
        crate::watchdog::calling(&self.info.name, "start");
        match inst.start(&self.params) {
            Ok(Ok(plan)) if plan == self.original_plan() => {}
            Ok(Ok(_)) => return self.disable_for("asked for a different plan when restarted", out),
            Ok(Err(message)) => return self.disable_for(&format!("refused to restart: {message}"), out),
            Err(f) => {
                self.instance = Some(inst);
                return self.fault(f, out, clock);
            }
        }
        self.cpu_charged_ns = 0;
        inst.set_schemas(self.schemas.clone());
        inst.set_symbol_scope(self.scope.clone());
        if let Some(aggs) = &self.aggs_reader {
            inst.set_aggregates(Box::new(aggs.clone()));
        }
        self.instance = Some(inst);
    }

    /// The plan as the plugin returned it (without the host's hidden subscriptions).
    fn original_plan(&self) -> Plan {
        let mut plan = self.plan.clone();
        plan.subscriptions.truncate(self.own_subs);
        plan
    }

    fn disable_for(&mut self, why: &str, out: &mut Output) {
        out.diag(&format!("plugin `{}` disabled: {why}", self.info.name));
        self.stats.disabled = Some(why.to_string());
        if let Some(inst) = self.instance.take() {
            self.retire(&inst);
        }
        self.life = Life::Disabled;
    }

    /// Keep what a discarded instance cost.
    fn retire(&mut self, inst: &Instance) {
        self.cpu_base_ns += inst.meter().cpu_ns;
        self.cpu_charged_ns = 0;
        self.stats.longest_call_ms = self.stats.longest_call_ms.max(inst.meter().longest.as_millis() as u64);
    }

    /// Write what the last call produced. The budget is charged what the plugin handed
    /// over, or what the host wrote for it where that is more (padding, escapes), and
    /// the host's CPU time.
    fn render(&mut self, out: &mut Output, clock: &Clock) {
        let Some(inst) = self.instance.as_mut() else { return };
        let output = inst.take_output();
        self.stats.output_dropped += output.dropped_items;
        self.stats.output_dropped_bytes += output.dropped_bytes;
        let work = HostWork::begin(out);
        self.write_items(output.items, out, clock);
        let (cpu_ns, written) = work.end(out);
        self.host_cpu_ns += cpu_ns;
        self.budget.output_bytes += output.bytes.max(written) + output.dropped_bytes;
    }

    fn write_items(&self, items: Vec<GuestItem>, out: &mut Output, clock: &Clock) {
        let (name, tables) = (&self.info.name, &self.plan.tables);
        // A row into its table, or a note that it does not fit one.
        let put = |out: &mut Output, table: u32, cells: &[Cell<'_>]| match tables.get(table as usize) {
            Some(t) if t.columns.len() == cells.len() => out.row(name, t, cells, clock),
            _ => out.diag(&format!("{name}: dropped a row that does not fit table {table}")),
        };
        for item in items {
            match item {
                GuestItem::Rows(rows) => {
                    for row in &rows {
                        let cells: Vec<Cell<'_>> = row.values.iter().map(Cell::from).collect();
                        put(out, row.table, &cells);
                    }
                }
                GuestItem::Packed(bytes) => {
                    let mut rows = crate::sandbox::packed::Rows::new(&bytes);
                    let mut cells = Vec::new();
                    // Checked whole when it was emitted.
                    while let Ok(Some(table)) = rows.next_into(&mut cells) {
                        put(out, table, &cells);
                    }
                }
                GuestItem::Text(s) => out.text(name, &s),
                GuestItem::Log(l) => out.log(name, l.level, &l.message),
            }
        }
    }

    /// This plugin's accounting, with its per-probe counts; the kernel's per-probe
    /// counters go to the first subscription that covers each row.
    pub fn stats(&self, kernel: &KernelCounters, table: &ProbeTable) -> PluginStats {
        let mut stats = self.stats.clone();
        stats.probes = self.sub_stats.clone();
        for (row, k) in &kernel.probes {
            let Some(i) = self.subs[..self.own_subs].iter().position(|s| s.covers(*row, table)) else { continue };
            let p = &mut stats.probes[i];
            // Saturating: the counters may come from a recording.
            p.kernel_filtered = p.kernel_filtered.saturating_add(k.filtered);
            p.ring_dropped = p.ring_dropped.saturating_add(k.dropped);
            p.kernel_lost = p.kernel_lost.saturating_add(k.lost);
            p.emitted = p.emitted.saturating_add(k.emitted);
            p.generated = p.generated.saturating_add(k.generated());
        }
        stats.aggregation_losses = self.aggregation_losses(kernel);
        let sum = |f: fn(&ProbeStats) -> u64| self.sub_stats.iter().map(f).sum::<u64>();
        stats.filtered = sum(|s| s.filtered);
        stats.delivered = sum(|s| s.delivered);
        stats.dropped_budget = sum(|s| s.dropped_budget);
        stats.dropped_fault = sum(|s| s.dropped_fault);
        stats.dropped = stats.dropped_budget + stats.dropped_fault;
        let scope = self.scope.lock().unwrap_or_else(|e| e.into_inner());
        (stats.symbolize_refused, stats.symbolize_scope_forgotten) = (scope.refused, scope.forgotten);
        drop(scope);
        let meter = self.instance.as_ref().map(Instance::meter).unwrap_or_default();
        stats.cpu_ms = (self.cpu_base_ns + meter.cpu_ns) / 1_000_000;
        stats.host_cpu_ms = self.host_cpu_ns / 1_000_000;
        stats.longest_call_ms = stats.longest_call_ms.max(meter.longest.as_millis() as u64);
        stats
    }

    /// The losses of this plugin's kernel aggregations, named as its plan names them.
    fn aggregation_losses(&self, kernel: &KernelCounters) -> Vec<AggregationLosses> {
        let named = self.agg_ids.iter().zip(&self.plan.aggregations);
        named
            .filter_map(|(id, a)| {
                kernel.agg_losses.get(id).map(|l| AggregationLosses { aggregation: a.name.clone(), lost: *l })
            })
            .collect()
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
    let comms: Vec<[u8; 16]> = f.comms.iter().map(|c| crate::collect::live::comm_key(c)).collect();
    let mut stacks = 0;
    if s.stacks.contains(types::StackMode::KERNEL) {
        stacks |= table::STACK_KERNEL;
    }
    if s.stacks.contains(types::StackMode::USER) {
        stacks |= table::STACK_USER;
    }
    let addresses = stacks != 0
        || matches!(
            &spec,
            Some(
                ProbeSpec::Uprobe { .. }
                    | ProbeSpec::Usdt { .. }
                    | ProbeSpec::Profile { .. }
                    | ProbeSpec::Software { .. }
            )
        );
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
        addresses,
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
                    .flat_map(|a| std::iter::once(a.probe.clone()).chain(start_probes(a)))
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
            r.schemas = r.subs.iter().map(|s| s.schema.clone()).collect();
            if let Some(inst) = r.instance.as_mut() {
                inst.set_schemas(r.schemas.clone());
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
            let reader = crate::agg::PluginAggs { store: store.clone(), ids: r.agg_ids.clone() };
            if let Some(inst) = r.instance.as_mut() {
                inst.set_aggregates(Box::new(reader.clone()));
            }
            r.aggs_reader = Some(reader);
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

    /// Events the host's aggregation evaluator lost to a full map: updates, and
    /// intervals whose start did not fit.
    pub fn agg_lost(&self) -> (u64, u64) {
        self.aggs.as_ref().map_or((0, 0), |s| {
            let store = s.lock().unwrap_or_else(|e| e.into_inner());
            (store.host_lost(), store.host_starts_lost())
        })
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
        // Budget windows turn over once per chunk, not per record.
        let now = Instant::now();
        for r in &mut self.runners {
            r.budget.roll(now);
        }
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

    /// Every plugin's accounting, given the kernel's counters.
    pub fn stats(&self, kernel: &KernelCounters) -> Vec<PluginStats> {
        self.runners.iter().map(|r| r.stats(kernel, &self.table)).collect()
    }

    /// The plugins' memories at their largest, summed (each instance's linear memory and
    /// tables, as granted).
    pub fn memory_peak_bytes(&self) -> u64 {
        self.runners.iter().map(|r| r.memory_peak).sum()
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
                set.extend(start_probes(a));
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
            sub.preds = table::compile_preds(preds, locate)?;
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
            sub.preds = table::compile_preds(preds, |f| table::tracepoint_field(&format, f))?;
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
            sub.preds = table::compile_preds(preds, locate)?;
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
            sub.preds = table::compile_preds(preds, locate)?;
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

/// The probes that start an aggregation's intervals.
fn start_probes(a: &types::KernelAggregation) -> impl Iterator<Item = String> + '_ {
    a.start.iter().flat_map(|s| std::iter::once(s.probe.clone()).chain(s.more.iter().map(|m| m.probe.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_strikes_count_consecutive_seconds_over() {
        let t0 = Instant::now();
        let mut b = Budget::new(true);
        b.window = t0;
        b.over = true;
        b.strikes = 1;
        // The next second starts clean but remembers the strike.
        b.roll(t0 + Duration::from_millis(1000));
        assert_eq!((b.over, b.strikes, b.cpu_ns, b.output_bytes), (false, 1, 0, 0));
        // A second within budget forgives it.
        b.roll(t0 + Duration::from_millis(2000));
        assert_eq!(b.strikes, 0);
        // Seconds with no call at all in between are seconds within budget.
        b.over = true;
        b.strikes = 2;
        b.roll(t0 + Duration::from_millis(4500));
        assert_eq!(b.strikes, 0);
        // Within the same second nothing changes.
        b.over = true;
        b.roll(t0 + Duration::from_millis(4900));
        assert!(b.over);
        // Two seconds the host spent on the plugin's own work are not seconds within budget.
        b.strikes = 1;
        b.last_work = t0 + Duration::from_millis(6500);
        b.roll(t0 + Duration::from_millis(7000));
        assert_eq!(b.strikes, 1);
    }
}

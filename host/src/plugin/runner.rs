//! One started plugin: its subscriptions, the batch it is being sent, its timers, and
//! the calls that deliver events and ticks to it.

use super::*;
use crate::wit::World;

/// A started plugin.
pub struct Runner {
    pub info: PluginInfo,
    pub plan: Plan,
    pub(super) loaded: LoadedPlugin,
    pub(super) params: Vec<types::Param>,
    pub(super) limits: Limits,
    pub(super) instance: Option<Instance>,
    /// The most linear memory and tables one of its instances held.
    pub(super) memory_peak: u64,
    pub(super) life: Life,
    /// Faults in a row that came before the plugin completed a call.
    pub(super) crash_streak: u32,
    /// Doublings of the next restart's backoff.
    pub(super) backoff_exp: u32,
    pub(super) budget: Budget,
    /// CPU time of discarded instances, and how much of the current one's is charged.
    pub(super) cpu_base_ns: u64,
    pub(super) cpu_charged_ns: u64,
    /// Host CPU time spent on its output, in all and as charged to the budget so far.
    pub(super) host_cpu_ns: u64,
    pub(super) host_cpu_charged_ns: u64,
    pub(super) subs: Vec<Sub>,
    /// Per subscription: records filtered, delivered, dropped.
    pub(super) sub_stats: Vec<ProbeStats>,
    pub(super) batch: Vec<u8>,
    pub(super) batch_records: usize,
    /// Records of the queued batch, by subscription.
    pub(super) batch_subs: Vec<u64>,
    pub stats: PluginStats,
    /// The plugin asked to end the run (`services.exit`).
    pub(super) exit_asked: bool,
    /// Interval subscriptions: (sub, period, next due time).
    pub(super) timers: Vec<(usize, u64, Option<u64>)>,
    /// The plan's own subscriptions; those after them stream the probes of kernel
    /// aggregations that the host computes (recording, replay).
    pub(super) own_subs: usize,
    /// Global ids of the plan's kernel aggregations.
    pub(super) agg_ids: Vec<u32>,
    /// What a new instance is given after a restart.
    pub(super) schemas: Vec<Option<types::ProbeSchema>>,
    pub(super) aggs_reader: Option<crate::kernel_agg::PluginAggs>,
    /// The processes whose records were queued for it: what `services.symbolize` may name
    /// and the `proc` tapset may answer for.
    pub(super) scope: crate::sandbox::SharedScope,
    /// Pids of the queued batch, not yet in `scope` (one lock per batch, not per record).
    pub(super) batch_pids: Vec<u32>,
    /// Where its reports are exported, when the run exports metrics.
    pub(super) export: Option<Feed>,
}

/// A plugin's place in the run's metrics export.
pub struct Feed {
    pub sink: std::sync::Arc<crate::export::Sink>,
    pub slot: usize,
    /// Whether its interval reports are printed too (the user asked for `interval=`),
    /// or go to the metrics only (the export chose it), the end then printing the run's
    /// totals.
    pub print_ticks: bool,
}

impl Runner {
    /// Start a described plugin with its validated parameters, under `limits`; budgets
    /// are enforced when `live`. Probe names are parsed here; they are resolved against
    /// the system by [`PluginSet::plan_probes`].
    pub fn start(
        d: Described,
        params: &[crate::wit::types::Param],
        limits: Limits,
        live: bool,
    ) -> Result<Runner, PluginError> {
        let Described { info, loaded, mut instance } = d;
        let limits = loaded.granted(&limits);
        let name = info.name.clone();
        let fault = |fault| PluginError::Fault { path: loaded.path().display().to_string(), fault };
        let plan = instance
            .start(params)
            .map_err(fault)?
            .map_err(|message| PluginError::Refused { plugin: name.clone(), message })?;
        bounds::check_plan(&plan).map_err(|e| PluginError::BadPlan { plugin: name.clone(), reason: e.to_string() })?;
        if let Some(manifest) = &loaded.package().manifest {
            manifest.check(&plan).map_err(|message| PluginError::Refused {
                plugin: format!("{name} ({})", loaded.path().display()),
                message,
            })?;
        }
        let mut warnings = Vec::new();
        if loaded.world() == World::Previous {
            warnings.push(format!(
                "built for {}, the previous version of the contract: it runs as it was built \
                 (rebuilt with this SDK, it would be {})",
                World::Previous,
                World::Current
            ));
        }
        if let crate::sandbox::cache::Outcome::Rebuilt { reason } = loaded.cache_outcome() {
            warnings.push(format!("its compiled-code cache entry was not valid ({reason}); compiled it again"));
        }
        let mut subs = parse_subs(&name, &plan, &mut warnings)?;
        for (probe, fields) in instance.strings_asked() {
            let mut found = false;
            for (sub, wire) in subs.iter_mut().zip(&plan.subscriptions) {
                if wire.probe == probe {
                    sub.strings = fields.clone();
                    found = true;
                }
            }
            if !found {
                return Err(PluginError::BadPlan {
                    plugin: name,
                    reason: format!("asks for strings of `{probe}`, which it does not subscribe to"),
                });
            }
        }
        if loaded.asks_processes() {
            // The `proc` tapset answers for the processes the plugin was shown: every record.
            subs.iter_mut().for_each(|s| s.addresses = true);
        }
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
            exit_asked: false,
            timers: Vec::new(),
            own_subs,
            agg_ids: Vec::new(),
            schemas: Vec::new(),
            aggs_reader: None,
            scope,
            batch_pids: Vec::new(),
            export: None,
        })
    }

    /// Whether the plugin may ask the `proc` tapset about the processes it is shown.
    pub fn asks_processes(&self) -> bool {
        self.loaded.asks_processes()
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The record kinds this plugin subscribes to.
    pub fn kinds(&self) -> impl Iterator<Item = Kind> + '_ {
        self.subs.iter().filter_map(|s| s.kind())
    }

    /// Offer one record; it is queued if a subscription matches.
    pub(super) fn offer(&mut self, rec: &Record<'_>, kind: Kind, out: &mut Output, clock: &Clock) {
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

    /// Before a call: the budget's window, and the output the plugin may still produce in it.
    pub(super) fn arm(&mut self) {
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
    /// A tick is an event the host makes: generated and emitted in the host, then
    /// delivered, or dropped while the plugin is over its budget or has faulted.
    pub(super) fn fire(&mut self, sub: usize, at_ns: u64, out: &mut Output, clock: &Clock) {
        self.arm();
        if let Some(st) = self.sub_stats.get_mut(sub) {
            st.generated += 1;
            st.emitted += 1;
            match (self.budget.over, self.instance.is_some()) {
                (true, _) => st.dropped_budget += 1,
                (false, false) => st.dropped_fault += 1,
                (false, true) => st.delivered += 1,
            }
        }
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

    /// Tables to print headings for.
    pub fn tables(&self) -> &[TableSpec] {
        &self.plan.tables
    }
}

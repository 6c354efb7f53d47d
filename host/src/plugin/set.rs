//! All plugins of one run: started together, their probes resolved into one table for
//! the collectors, records routed to each, and their kernel aggregations.

use super::*;

/// All plugins of one run.
pub struct PluginSet {
    pub runners: Vec<Runner>,
    /// What the collectors are told per probe (filled by [`PluginSet::plan_probes`]).
    pub table: ProbeTable,
    /// cgroups named by subscriptions, resolved, by name.
    cgroups: BTreeMap<String, Cgroup>,
    /// Compute kernel aggregations in the host, over streamed records (recording, replay).
    aggregate_in_host: bool,
    /// Kernel aggregations of every plugin, once resolved.
    aggs: Option<SharedAggregations>,
    /// Their shared task filter.
    agg_task: crate::kernel_agg::TaskFilter,
}

impl PluginSet {
    pub fn new(runners: Vec<Runner>) -> PluginSet {
        PluginSet {
            runners,
            table: ProbeTable::default(),
            cgroups: BTreeMap::new(),
            aggregate_in_host: false,
            aggs: None,
            agg_task: crate::kernel_agg::TaskFilter::default(),
        }
    }

    /// Export every plugin's reports into `sink` (slot = the plugin's place in the run);
    /// `print_ticks[i]`: whether plugin i's interval reports are printed too.
    pub fn export_to(&mut self, sink: &Arc<crate::export::Sink>, print_ticks: &[bool]) {
        for (slot, r) in self.runners.iter_mut().enumerate() {
            let print_ticks = print_ticks.get(slot).copied().unwrap_or(true);
            r.export = Some(super::Feed { sink: sink.clone(), slot, print_ticks });
        }
    }

    /// Compute kernel aggregations here from streamed events instead of in the kernel,
    /// so that a recording holds what they need. Replays always do. Call before `plan_probes`.
    pub fn aggregate_in_host(&mut self, yes: bool) {
        self.aggregate_in_host = yes;
    }

    /// Resolve every subscription against `source` (the live system or a recording):
    /// tracepoint formats, uprobe and USDT sites, field names of comparisons, cgroups.
    /// Builds the probe table and hands each plugin its schemas. Errors name the plugin
    /// and the probe; an optional probe that cannot be resolved is skipped with a warning.
    pub fn plan_probes(&mut self, source: &ProbeLookup<'_>) -> Result<(), PluginError> {
        let mut planner = Planner::default();
        let replay = matches!(source, ProbeLookup::Recorded(_));
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
                match planner.plan(wire, &spec, sub.stacks, &sub.strings, source) {
                    Ok(planned) => {
                        sub.matcher = planned.matcher;
                        sub.preds = planned.preds;
                        sub.pred_base = planned.pred_base;
                        sub.schema = planned.schema;
                    }
                    Err(reason) => {
                        sub.matcher = Matcher::Nothing;
                        if wire.optional {
                            r.stats.warnings.push(format!("optional probe `{}` skipped: {reason}", wire.probe));
                            continue;
                        }
                        return Err(PluginError::Probe { plugin, error: table::probe_error(&wire.probe, reason) });
                    }
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
                            None => cgroup::lookup(name)
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
        let syscall_subs: Vec<SyscallSub<'_>> = self
            .runners
            .iter()
            .flat_map(|r| &r.subs)
            .map(|s| SyscallSub { matcher: &s.matcher, syscalls: s.syscalls.as_ref(), preds: &s.preds })
            .collect();
        planner.push_down_syscall_preds(&syscall_subs, source);
        self.table = planner.into_table();
        self.plan_aggregations(source, in_host)
    }

    /// Compile every plugin's kernel aggregations and give each plugin its reader.
    fn plan_aggregations(&mut self, source: &ProbeLookup<'_>, in_host: bool) -> Result<(), PluginError> {
        let mut specs = Vec::new();
        let mut task: Option<(String, crate::kernel_agg::TaskFilter)> = None;
        for r in &mut self.runners {
            let plugin = r.info.name.clone();
            let mut ids = Vec::new();
            for wire in &r.plan.aggregations {
                let id = specs.len() as u32;
                let spec = crate::kernel_agg::compile(wire, id, source).map_err(|reason| PluginError::BadPlan {
                    plugin: plugin.clone(),
                    reason: format!("kernel aggregation `{}`: {reason}", wire.name),
                })?;
                let this = crate::kernel_agg::TaskFilter::of(&wire.filter);
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
                    cgroup::lookup(name).map_err(|reason| PluginError::BadPlan { plugin: String::new(), reason })?;
                self.cgroups.insert(name.clone(), cg);
            }
        }
        crate::kernel_agg::sites(&specs).map_err(|reason| PluginError::BadPlan { plugin: String::new(), reason })?;
        let backend = if in_host {
            crate::kernel_agg::Backend::Host(Box::new(crate::kernel_agg::Evaluator::new(&specs, task.clone())))
        } else {
            crate::kernel_agg::Backend::Kernel { values: None, baselines: Default::default() }
        };
        let store: SharedAggregations = Arc::new(Mutex::new(crate::kernel_agg::Aggregations { specs, backend }));
        for r in &mut self.runners {
            if r.agg_ids.is_empty() {
                continue;
            }
            let reader = crate::kernel_agg::PluginAggs { store: store.clone(), ids: r.agg_ids.clone() };
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
    pub fn agg_sites(&self) -> Vec<crate::collect::agg_maps::SiteConfig> {
        let Some(store) = &self.aggs else { return Vec::new() };
        let store = store.lock().unwrap_or_else(|e| e.into_inner());
        match store.backend {
            crate::kernel_agg::Backend::Host(_) => Vec::new(),
            crate::kernel_agg::Backend::Kernel { .. } => crate::kernel_agg::sites(&store.specs).unwrap_or_default(),
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
    pub fn attach_kernel_values(&mut self, values: crate::collect::agg_maps::KernelValues) {
        if let Some(store) = &self.aggs {
            if let crate::kernel_agg::Backend::Kernel { values: v, .. } =
                &mut store.lock().unwrap_or_else(|e| e.into_inner()).backend
            {
                *v = Some(Box::new(values));
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

    /// Route every record of a chunk to the plugins, then deliver the partial batches.
    pub fn dispatch(&mut self, bytes: &[u8], out: &mut Output, clock: &Clock) {
        let store = self.aggs.clone();
        let mut store = store.as_ref().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
        let mut evaluator = match store.as_deref_mut() {
            Some(crate::kernel_agg::Aggregations { backend: crate::kernel_agg::Backend::Host(e), .. }) => Some(e),
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

    /// Whether a plugin asked to end the run (`services.exit`, bpftrace's `exit()`).
    pub fn exit_asked(&self) -> bool {
        self.runners.iter().any(|r| r.exit_asked)
    }

    /// Warnings collected while starting (skipped optional probes).
    pub fn warnings(&self) -> Vec<String> {
        self.runners
            .iter()
            .flat_map(|r| r.stats.warnings.iter().map(move |w| format!("{}: {w}", r.info.name)))
            .collect()
    }
}

/// The probes that start an aggregation's intervals.
fn start_probes(a: &types::KernelAggregation) -> impl Iterator<Item = String> + '_ {
    a.start.iter().flat_map(|s| std::iter::once(s.probe.clone()).chain(s.more.iter().map(|m| m.probe.clone())))
}

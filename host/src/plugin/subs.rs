//! A plugin's subscriptions as the host matches them: the probe parsed, its host-side
//! filters (pids, uids, comms, cgroups, comparisons), and the test each record passes.

use super::*;

/// A subscription compiled for matching in the host.
pub(super) struct Sub {
    /// The probe, parsed; none for an optional probe that is missing here.
    pub(super) spec: Option<ProbeSpec>,
    pub(super) matcher: Matcher,
    pub(super) syscalls: Option<BTreeSet<u32>>,
    pub(super) uids: Option<BTreeSet<u32>>,
    pub(super) comms: Option<Vec<[u8; 16]>>,
    pub(super) pids: Option<BTreeSet<u32>>,
    pub(super) cgroups: Option<BTreeSet<u64>>,
    /// Comparisons, offsets relative to `pred_base` in the record.
    pub(super) preds: Vec<Pred>,
    pub(super) pred_base: usize,
    pub(super) stacks: u8,
    /// Pointer fields whose strings its records carry (`probes.user-strings`).
    pub(super) strings: Vec<String>,
    /// Its records carry addresses to symbolize (stacks, user-probe arguments, samples), or
    /// its plugin asks the `proc` tapset: their processes join the plugin's scope.
    pub(super) addresses: bool,
    pub(super) schema: Option<types::ProbeSchema>,
}

impl Sub {
    pub(super) fn kind(&self) -> Option<Kind> {
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
    pub(super) fn takes(&self, rec: &Record<'_>, kind: Kind) -> bool {
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
    pub(super) fn covers(&self, row: CounterRow, table: &ProbeTable) -> bool {
        match (&self.matcher, row) {
            (Matcher::Kind(k), CounterRow::SysEnter(nr) | CounterRow::SysExit(nr)) if *k == row.kind() => {
                self.syscalls.as_ref().is_none_or(|set| set.contains(&nr))
            }
            (Matcher::Kind(k), CounterRow::Kind(r)) => *k == r && self.syscalls.is_none(),
            (Matcher::Tracepoint(id), CounterRow::Tracepoint(slot)) => {
                table.tracepoints.get(slot as usize).is_some_and(|t| t.format.id == *id)
            }
            (Matcher::User(slots), CounterRow::User(slot)) => slots.contains(&slot),
            (Matcher::Sample(event), CounterRow::Perf(slot)) => {
                table.perf.get(slot as usize).is_some_and(|p| p.event == *event)
            }
            _ => false,
        }
    }

    pub(super) fn matches(&self, rec: &Record<'_>) -> bool {
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

/// Parse every subscription's probe and host-side filters. An optional probe that does
/// not parse is skipped with a warning.
pub(super) fn parse_subs(plugin: &str, plan: &Plan, warnings: &mut Vec<String>) -> Result<Vec<Sub>, PluginError> {
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
pub(super) fn parse_sub(plugin: &str, s: &types::Subscription, warnings: &mut Vec<String>) -> Result<Sub, PluginError> {
    let spec = match probes::parse(&s.probe) {
        Ok(spec) => Some(spec),
        Err(e) if s.optional => {
            warnings.push(format!("optional probe skipped: {e}"));
            None
        }
        Err(error) => return Err(PluginError::Probe { plugin: plugin.into(), error }),
    };
    let mut syscalls = probes::syscall_numbers(&s.filter.syscalls)
        .map_err(|reason| PluginError::BadPlan { plugin: plugin.into(), reason: format!("`{}`: {reason}", s.probe) })?;
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
        strings: Vec::new(),
        schema: None,
    })
}

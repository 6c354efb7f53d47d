//! A plugin's kernel aggregation compiled: its probe looked up, its keys, values and
//! filters located, its actions grouped into the aggregation collector's sites.

use super::*;

/// Where a named field of a probe's data is.
pub(super) type FieldLookup = Box<dyn Fn(&str) -> Result<FieldLoc, String>>;

/// A probe's site and how to find its fields.
pub(super) struct Probe {
    pub(super) site: SiteAttach,
    /// Syscall number of `syscall:NAME:…`.
    pub(super) nr: Option<u32>,
    pub(super) kind: Kind,
    pub(super) fields: FieldLookup,
}

pub(super) fn probe(name: &str, source: &ProbeLookup<'_>) -> Result<Probe, String> {
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
            let btf = SchedTp::of(&format);
            let site = SiteAttach::Tracepoint { id: format.id, name: format!("{category}:{tp}"), btf };
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

pub(super) fn source_of(s: &types::AggSource, p: &Probe) -> Result<Src, String> {
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

pub(super) fn correlation(c: &types::Correlation, p: &Probe) -> Result<Src, String> {
    match c {
        types::Correlation::Tid => Ok(Src::Tid),
        types::Correlation::Field(name) => Ok(Src::Field((p.fields)(name)?)),
        types::Correlation::Task(name) => Ok(Src::Task((p.fields)(name)?)),
    }
}

pub(super) fn syscall_set(f: &types::Filter, p: &Probe) -> Result<Option<BTreeSet<u32>>, String> {
    let mut set = crate::collect::probes::syscall_numbers(&f.syscalls)?;
    if !set.is_empty() && !matches!(p.kind, Kind::SysEnter | Kind::SysExit) {
        return Err("a syscall filter on a probe that is not a syscall probe".into());
    }
    if let Some(nr) = p.nr {
        // `syscall:read:entry` with `syscalls: [write]` matches nothing, as in streaming.
        set = if set.is_empty() || set.contains(&nr) { BTreeSet::from([nr]) } else { BTreeSet::from([NR_SYSCALLS]) };
    }
    Ok((!set.is_empty()).then_some(set))
}

pub(super) fn preds(f: &types::Filter, p: &Probe) -> Result<Vec<Pred>, String> {
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
    let slots = super::slots(id, &keys, &func);
    let mut update = Action {
        agg: id,
        role: Role::Update,
        func,
        keys: keys.clone(),
        value,
        corr: Src::None,
        preds: preds(&wire.filter, &end)?,
        syscalls: syscall_set(&wire.filter, &end)?,
        slots,
        kept: Kept::Map,
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
                slots: Slots::Hash,
                kept: Kept::Map,
            };
            actions.push((sp.site, begin));
            probes.push(name.clone());
        }
    }
    actions.push((end.site.clone(), update));
    // An interval whose every start and end is the current thread's is kept with the
    // thread (ids below TASK_STARTS; the others in the map of starts).
    if wire.start.is_some() && id < TASK_STARTS && actions.iter().all(|(_, a)| a.corr == Src::Tid) {
        for (_, a) in &mut actions {
            a.kept = Kept::Current;
        }
    }
    // So is one whose every start and end is keyed by a task the scheduler's BTF
    // tracepoints hand over (runqlat's: the woken task, prev, next).
    let named = |(site, a): &(SiteAttach, Action)| match (site, a.corr) {
        (SiteAttach::Tracepoint { btf: Some(tp), .. }, Src::Task(loc)) => {
            tp.task_fields().contains(&u32::from(loc.off))
        }
        _ => false,
    };
    if wire.start.is_some() && id < TASK_STARTS && actions.iter().all(named) {
        for (_, a) in &mut actions {
            a.kept = Kept::Named;
        }
    }
    Ok(Spec { id, name: wire.name.clone(), keys, func, slots, actions, probes })
}

/// The collector's sites: sys_enter is 0, sys_exit 1, the scheduler's BTF tracepoints
/// theirs (2 to 4), tracefs tracepoints from 5.
pub fn sites(specs: &[Spec]) -> Result<Vec<SiteConfig>, String> {
    let mut by_site: BTreeMap<SiteAttach, (Vec<[u8; ACTION_BYTES]>, u32)> = BTreeMap::new();
    for spec in specs {
        for (site, action) in &spec.actions {
            let (actions, flags) = by_site.entry(site.clone()).or_default();
            actions.push(action.encode());
            *flags |= action.site_flags();
        }
    }
    let mut next = TP_SITES;
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
            SiteAttach::Tracepoint { btf: Some(tp), .. } => tp.site(),
            SiteAttach::Tracepoint { btf: None, .. } => {
                next += 1;
                next - 1
            }
        };
        if site as usize >= SITES_MAX {
            return Err(format!("kernel aggregations on more than {} tracepoints", SITES_MAX as u32 - TP_SITES));
        }
        out.push(SiteConfig { site, attach, actions, flags });
    }
    Ok(out)
}

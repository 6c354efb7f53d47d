//! A subscription resolved against this system: its matcher, its tracepoint schema, its
//! comparisons compiled for the kernel where they fit, and its row in the probe table.

use super::*;

/// Resolve one subscription: its matcher, schema, comparisons, and its part of the table.
pub(super) fn resolve_sub(
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

pub(super) fn kernel_preds(preds: &[Pred]) -> Vec<Pred> {
    preds.iter().take(table::KERNEL_PREDS_MAX).copied().collect()
}

pub(super) fn wire_field(f: &tracefs::Field) -> types::Field {
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
pub(super) fn start_probes(a: &types::KernelAggregation) -> impl Iterator<Item = String> + '_ {
    a.start.iter().flat_map(|s| std::iter::once(s.probe.clone()).chain(s.more.iter().map(|m| m.probe.clone())))
}

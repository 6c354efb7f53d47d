//! Probe planning: each subscription's probe resolved against this system (or a
//! recording), its comparisons compiled with the field locator ([`super::fields`]), and
//! its part of the collectors' [`ProbeTable`], with what every subscriber agrees on
//! pushed down into the kernel.

use std::collections::{BTreeMap, BTreeSet};

use wasmtap_abi::Kind;

use super::fields;
use super::probes::ProbeSpec;
use super::table::{self, Pred, ProbeLookup, ProbeTable};
use super::tracefs::{self, FieldKind};
use crate::wit::types;

/// Which records a subscription takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    /// Not planned yet, or skipped.
    Nothing,
    Kind(Kind),
    Tracepoint(u32),
    /// uprobe and USDT records by the attachment slot they carry.
    User(BTreeSet<u32>),
    /// perf samples by event.
    Sample(u32),
    Interval(u64),
    Begin,
    End,
}

/// One subscription, planned: which records it takes, its comparisons, and the schema
/// its plugin is given.
#[derive(Debug)]
pub struct Planned {
    pub matcher: Matcher,
    /// Comparisons, offsets relative to `pred_base` in the record.
    pub preds: Vec<Pred>,
    pub pred_base: usize,
    pub schema: Option<types::ProbeSchema>,
}

impl Planned {
    /// A subscription with no comparisons and no schema: process events, timers, begin, end.
    fn bare(matcher: Matcher) -> Planned {
        Planned { matcher, preds: Vec::new(), pred_base: 0, schema: None }
    }
}

/// A planned subscription to syscalls, as the kernel push-down sees it.
pub struct SyscallSub<'a> {
    pub matcher: &'a Matcher,
    /// The syscalls it takes; `None` for all.
    pub syscalls: Option<&'a BTreeSet<u32>>,
    pub preds: &'a [Pred],
}

/// The probes of every plugin of one run, planned into one table for the collectors.
#[derive(Default)]
pub struct Planner {
    table: ProbeTable,
    /// Tracepoint entries by (category, name), perf entries by event: one each in the table.
    tracepoints: BTreeMap<(String, String), usize>,
    perf: BTreeMap<u32, usize>,
}

impl Planner {
    /// Plan one subscription to `spec` (its probe, parsed), taking stacks of `stacks`
    /// and the strings its pointer fields `strings` point to.
    pub fn plan(
        &mut self,
        wire: &types::Subscription,
        spec: &ProbeSpec,
        stacks: u8,
        strings: &[String],
        source: &ProbeLookup<'_>,
    ) -> Result<Planned, String> {
        let table = &mut self.table;
        let preds = &wire.filter.predicates;
        let schema = |fields: Vec<types::Field>, args: Vec<String>| types::ProbeSchema {
            probe: wire.probe.clone(),
            fields,
            args,
        };
        let planned = match spec {
            ProbeSpec::Syscall { kind, nr } => {
                let names: Vec<String> = match nr {
                    Some(nr) if *kind == Kind::SysEnter => {
                        let names = source.syscall_args(*nr);
                        table.syscall_args.insert(*nr, names.clone());
                        names
                    }
                    _ => Vec::new(),
                };
                let locate = |f: &str| fields::syscall_value(*kind, &names, f).map(|v| v.in_record());
                Planned {
                    matcher: Matcher::Kind(*kind),
                    preds: fields::compile_preds(preds, locate)?,
                    // args[6] and ret both sit at offset 64 of their records.
                    pred_base: wasmtap_abi::sys_enter::ARGS,
                    schema: Some(schema(Vec::new(), names)),
                }
            }
            ProbeSpec::Proc(kind) => {
                if !preds.is_empty() {
                    return Err("proc probes take no field comparisons; filter in the plugin".into());
                }
                Planned::bare(Matcher::Kind(*kind))
            }
            ProbeSpec::Tracepoint { category, name } => {
                let format = source.tracepoint(category, name)?;
                let compiled = fields::compile_preds(preds, |f| fields::tracepoint_field(&format, f))?;
                let planned = Planned {
                    matcher: Matcher::Tracepoint(format.id),
                    pred_base: wasmtap_abi::tracepoint::DATA,
                    schema: Some(tracepoint_schema(&wire.probe, &format)),
                    preds: compiled,
                };
                let offsets = strings
                    .iter()
                    .map(|f| fields::tracepoint_string(&format, f))
                    .collect::<Result<Vec<u16>, String>>()?;
                let key = (category.clone(), name.clone());
                let i = match self.tracepoints.get(&key) {
                    Some(&i) => {
                        let e = &mut table.tracepoints[i];
                        e.stacks |= stacks;
                        if e.preds != kernel_preds(&planned.preds) {
                            e.preds.clear();
                        }
                        i
                    }
                    None => {
                        self.tracepoints.insert(key, table.tracepoints.len());
                        let preds = kernel_preds(&planned.preds);
                        table.tracepoints.push(table::TracepointEntry { format, stacks, preds, strings: Vec::new() });
                        table.tracepoints.len() - 1
                    }
                };
                let e = &mut table.tracepoints[i];
                for off in offsets {
                    if !e.strings.contains(&off) {
                        e.strings.push(off);
                    }
                }
                if e.strings.len() > table::STRINGS_MAX {
                    return Err(format!(
                        "strings of {} pointer fields asked for (at most {} a probe)",
                        e.strings.len(),
                        table::STRINGS_MAX
                    ));
                }
                planned
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
                let compiled = fields::compile_preds(preds, |f| fields::user_value(&args, f))?;
                let mut wanted: Vec<u8> = Vec::new();
                for f in strings {
                    let at = fields::user_value(&args, f).map_err(|e| format!("str(): {e}"))?;
                    let i = ((at.off as usize - wasmtap_abi::user::ARGS) / 8) as u8;
                    if !wanted.contains(&i) {
                        wanted.push(i);
                    }
                }
                if wanted.len() > table::STRINGS_MAX {
                    return Err(format!(
                        "strings of {} arguments asked for (at most {} a probe)",
                        wanted.len(),
                        table::STRINGS_MAX
                    ));
                }
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
                        stacks,
                        preds: kernel_preds(&compiled),
                        strings: wanted.clone(),
                    });
                }
                Planned {
                    matcher: Matcher::User(slots),
                    preds: compiled,
                    pred_base: 0,
                    schema: Some(schema(Vec::new(), args)),
                }
            }
            ProbeSpec::Profile { .. } | ProbeSpec::Software { .. } => {
                let (event, name, freq, period) = match spec {
                    ProbeSpec::Profile { hz } => (0, "cpu-clock".to_string(), Some(*hz), 0),
                    ProbeSpec::Software { event, period } => (event.config, event.name.to_string(), None, *period),
                    _ => unreachable!(),
                };
                let compiled = fields::compile_preds(preds, fields::sample_field)?;
                match self.perf.get(&event) {
                    Some(&i) => {
                        let e = &mut table.perf[i];
                        if e.freq != freq || e.period != period {
                            return Err(format!(
                                "`{}` asks for a different rate than another subscription to {name}",
                                wire.probe
                            ));
                        }
                        e.stacks |= stacks;
                        if e.preds != kernel_preds(&compiled) {
                            e.preds.clear();
                        }
                    }
                    None => {
                        self.perf.insert(event, table.perf.len());
                        let preds = kernel_preds(&compiled);
                        table.perf.push(table::PerfEntry { event, name, freq, period, stacks, preds });
                    }
                }
                Planned {
                    matcher: Matcher::Sample(event),
                    preds: compiled,
                    pred_base: 0,
                    schema: Some(schema(Vec::new(), Vec::new())),
                }
            }
            ProbeSpec::Interval { period_ns } => Planned::bare(Matcher::Interval(*period_ns)),
            ProbeSpec::Begin => Planned::bare(Matcher::Begin),
            ProbeSpec::End => Planned::bare(Matcher::End),
        };
        if !strings.is_empty() && !matches!(planned.matcher, Matcher::Tracepoint(_) | Matcher::User(_)) {
            return Err("strings (str()) are read for tracepoint, uprobe and USDT probes only".into());
        }
        if stacks != 0 && !matches!(planned.matcher, Matcher::Tracepoint(_) | Matcher::User(_) | Matcher::Sample(_)) {
            return Err("stacks are recorded for tracepoint, uprobe, USDT, profile and software probes only".into());
        }
        Ok(planned)
    }

    /// Push syscall comparisons into the kernel where every subscriber of a syscall has
    /// the same ones: the collector then drops what no subscriber would take. A
    /// subscription to every syscall of a direction keeps that direction in the host.
    pub fn push_down_syscall_preds(&mut self, subs: &[SyscallSub<'_>], source: &ProbeLookup<'_>) {
        for exit in [false, true] {
            let kind = if exit { Kind::SysExit } else { Kind::SysEnter };
            let subs: Vec<&SyscallSub<'_>> = subs.iter().filter(|s| *s.matcher == Matcher::Kind(kind)).collect();
            if subs.iter().any(|s| s.syscalls.is_none()) {
                continue;
            }
            let nrs: BTreeSet<u32> = subs.iter().flat_map(|s| s.syscalls.into_iter().flatten().copied()).collect();
            for nr in nrs {
                let covering: Vec<&&SyscallSub<'_>> =
                    subs.iter().filter(|s| s.syscalls.is_some_and(|set| set.contains(&nr))).collect();
                let first = covering[0].preds;
                if first.is_empty() || covering.iter().any(|s| s.preds != first) || nr >= table::NR_SYSCALLS {
                    continue;
                }
                let key = if exit { table::NR_SYSCALLS + nr } else { nr };
                self.table.syscall_preds.insert(key, kernel_preds(first));
            }
        }
        if let ProbeLookup::Recorded(t) = source {
            self.table.syscall_args = t.syscall_args.clone();
        }
    }

    /// The table the collectors are configured with.
    pub fn into_table(self) -> ProbeTable {
        self.table
    }
}

/// The comparisons the collectors can evaluate: the first few.
fn kernel_preds(preds: &[Pred]) -> Vec<Pred> {
    preds.iter().take(table::KERNEL_PREDS_MAX).copied().collect()
}

/// The schema of a subscription to `probe`, a tracepoint of `format`.
pub fn tracepoint_schema(probe: &str, format: &tracefs::Format) -> types::ProbeSchema {
    types::ProbeSchema {
        probe: probe.to_string(),
        fields: format.fields.iter().map(wire_field).collect(),
        args: Vec::new(),
    }
}

/// `probes.describe` of tracepoint `probe` (`tracepoint:CATEGORY:NAME`) by `format`,
/// which finds a category's and name's format (the live system's, a recording's, the
/// collectors' side's).
pub fn describe(
    probe: &str,
    format: impl Fn(&str, &str) -> Result<tracefs::Format, String>,
) -> Result<types::ProbeSchema, String> {
    if ["uprobe:", "uretprobe:", "usdt:"].iter().any(|c| probe.starts_with(c)) {
        return describe_user(probe);
    }
    let rest = probe.strip_prefix("tracepoint:").ok_or_else(|| format!("`{probe}` is not a tracepoint"))?;
    let (category, name) = rest.split_once(':').ok_or_else(|| format!("`{probe}` is not a tracepoint"))?;
    format(category, name).map(|f| tracepoint_schema(probe, &f))
}

/// `probes.describe` of a uprobe, uretprobe or USDT probe: where it attaches must be
/// found (its binary, its function or note), or why not is the answer. Its records have
/// no fields: their arguments are registers.
pub fn describe_user(probe: &str) -> Result<types::ProbeSchema, String> {
    let spec = crate::collect::probes::parse(probe).map_err(|e| e.to_string())?;
    crate::collect::table::ProbeLookup::Live.user_sites(probe, &spec)?;
    Ok(types::ProbeSchema { probe: probe.to_string(), fields: Vec::new(), args: Vec::new() })
}

/// The live system's format of tracepoint `category:name`, or why not (with the nearest
/// names of a tracepoint it lacks).
pub fn live_format(category: &str, name: &str) -> Result<tracefs::Format, String> {
    tracefs::lookup(std::path::Path::new(tracefs::ROOT), category, name).map_err(|e| e.to_string())
}

/// A tracefs field as the contract describes it to plugins.
pub fn wire_field(f: &tracefs::Field) -> types::Field {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_probe_is_described_by_whether_it_can_attach() {
        let none = |c: &str, n: &str| Err(format!("{c}:{n}"));
        let me = std::env::current_exe().unwrap();
        let me = me.display();
        // This test binary has a `main`; it has no `wt_no_such_function`.
        let found = describe(&format!("uprobe:{me}:main"), none).unwrap();
        assert!(found.fields.is_empty() && found.probe.ends_with(":main"));
        assert!(describe(&format!("uretprobe:{me}:main"), none).is_ok());
        let err = describe(&format!("uprobe:{me}:wt_no_such_function"), none).unwrap_err();
        assert!(err.contains("wt_no_such_function"), "{err}");
        let err = describe("uprobe:libwt_no_such_library:f", none).unwrap_err();
        assert!(err.contains("libwt_no_such_library"), "{err}");
        let err = describe(&format!("usdt:{me}:wt:no_such_note"), none).unwrap_err();
        assert!(err.contains("no_such_note"), "{err}");
    }
}

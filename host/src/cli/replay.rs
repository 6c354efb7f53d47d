//! `wasmtap replay FILE PLUGIN...`: no root, no BPF, deterministic.

use anyhow::bail;

use super::{Outcome, ReplayArgs};
use crate::collect::probes::{self, ProbeSpec};
use crate::collect::recording::Reader;
use crate::collect::source::Replay;
use crate::collect::table::ProbeLookup;
use crate::package::trust::Trust;
use crate::pipeline;
use crate::sandbox::Sandbox;
use crate::watchdog::{self, Doing, Watchdog};

pub fn replay(args: ReplayArgs) -> anyhow::Result<Outcome> {
    let stall_timeout = super::limits::parse_watchdog(&args.common.watchdog)?;
    let mut sandbox = Sandbox::new()?;
    sandbox.set_trust(Trust::for_run(args.common.trust.as_deref())?);
    let reader = match &args.file {
        Some(f) => Some(Reader::open(f)?),
        None => None,
    };
    // A plugin that expands a pattern gets the tracepoints the recording holds.
    if let Some(r) = &reader {
        let recorded: Vec<String> = r.header.probes.iter().filter(|p| p.starts_with("tracepoint:")).cloned().collect();
        sandbox.set_lister(Box::new(move |pattern| {
            let glob = |p: &&String| crate::collect::tracefs::glob(pattern, &p["tracepoint:".len()..]);
            Ok(recorded.iter().filter(glob).cloned().collect())
        }));
        // And one that asks for a tracepoint's layout, the recording's.
        let formats: Vec<_> = r.header.table.tracepoints.iter().map(|t| t.format.clone()).collect();
        let probes = r.header.probes.clone();
        sandbox.set_describer(Box::new(move |probe| {
            // A user probe is there if the recording has it.
            if ["uprobe:", "uretprobe:", "usdt:"].iter().any(|c| probe.starts_with(c)) {
                if !probes.iter().any(|p| p == probe) {
                    return Err(format!("probe `{probe}` is not in the recording"));
                }
                let (fields, args) = (Vec::new(), Vec::new());
                return Ok(crate::wit::types::ProbeSchema { probe: probe.to_string(), fields, args });
            }
            crate::collect::plan::describe(probe, |category, name| {
                let found = formats.iter().find(|f| f.category == category && f.name == name);
                found.cloned().ok_or_else(|| format!("tracepoint `{category}:{name}` is not in the recording"))
            })
        }));
    }
    let Some(mut plugins) =
        super::run::start_plugins(&sandbox, &args.plugins, &args.common, "replay", false, &|l| l, None)?
    else {
        return Ok(Outcome::Clean);
    };
    let Some(reader) = reader else { bail!("wasmtap replay: name the recording to read") };
    let recorded = &reader.header.probes;
    for name in plugins.probe_names() {
        let Ok(spec) = probes::parse(&name) else { continue };
        if recorded.contains(&name) || spec.kind().is_none() {
            continue;
        }
        // A raw syscall recording holds every syscall; other probes must have been recorded.
        let raw = |kind| ProbeSpec::Syscall { kind, nr: None };
        let covered = matches!(spec, ProbeSpec::Syscall { kind, .. }
            if recorded.iter().any(|p| probes::parse(p).ok() == Some(raw(kind))));
        if !covered {
            bail!("the recording has no events for probe `{name}` (it recorded: {})", recorded.join(", "));
        }
    }
    let table = reader.header.table.clone();
    if let Ok(trailer) = reader.peek_trailer() {
        sandbox.set_symbols(Box::new(crate::plugin::symbols::Table::new(&trailer.symbols)));
    }
    plugins.plan_probes(&ProbeLookup::Recorded(&table))?;
    let _watchdog = match stall_timeout {
        Some(t) => Some(Watchdog::start(t, None)?),
        None => None,
    };
    let mut out = args.output.open()?;
    for w in plugins.warnings() {
        out.diag(&w);
    }
    out.attached(plugins.probe_names().len(), false);
    for r in &plugins.runners {
        for t in r.tables() {
            out.table_header(t);
        }
    }
    out.flush();
    let accounting = pipeline::run(&mut plugins, &mut Replay::new(reader), pipeline::RunOptions::default(), &mut out)?;
    watchdog::beat(Doing::Reporting);
    out.accounting(&accounting, args.common.stats);
    out.close().map_err(anyhow::Error::msg)?;
    Ok(if accounting.has_problems() { Outcome::Problems } else { Outcome::Clean })
}

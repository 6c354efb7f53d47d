//! `wasmtap replay FILE PLUGIN...`: no root, no BPF, deterministic.

use anyhow::bail;

use super::{Outcome, ReplayArgs};
use crate::collect::recording::Reader;
use crate::output::Output;
use crate::pipeline;
use crate::sandbox::Sandbox;

pub fn replay(args: ReplayArgs) -> anyhow::Result<Outcome> {
    let sandbox = Sandbox::new(args.common.limits())?;
    let reader = match &args.file {
        Some(f) => Some(Reader::open(f)?),
        None => None,
    };
    let Some(mut plugins) = super::run::start_plugins(&sandbox, &args.plugins, &args.common, "replay")? else {
        return Ok(Outcome::Clean);
    };
    let Some(reader) = reader else { bail!("wasmtap replay: name the recording to read") };
    let recorded = &reader.header.probes;
    for name in plugins.probe_names() {
        if !recorded.contains(&name) {
            let kind = crate::collect::probes::resolve(&name)?.kind;
            let covered = recorded
                .iter()
                .filter_map(|p| crate::collect::probes::resolve(p).ok())
                .any(|p| p.kind == kind && p.syscall.is_none());
            if !covered {
                bail!("the recording has no events for probe `{name}` (it recorded: {})", recorded.join(", "));
            }
        }
    }
    let mut out = Output::stdio(args.format);
    out.attached(plugins.probe_names().len(), false);
    for r in &plugins.runners {
        for t in r.tables() {
            out.table_header(t);
        }
    }
    out.flush();
    let accounting = pipeline::run_replay(&mut plugins, reader, &mut out)?;
    out.accounting(&accounting, args.common.stats);
    out.flush();
    Ok(if accounting.has_problems() { Outcome::Problems } else { Outcome::Clean })
}

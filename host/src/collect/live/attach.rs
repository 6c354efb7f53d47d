//! Attaching and detaching the collectors' programs: raw tracepoints, tracepoints,
//! uprobes and USDT probes, perf events, and the kernel aggregations' sites.

use super::*;

pub(super) fn attach(
    c: Collector,
    obj: &mut Ebpf,
    config: &LiveConfig,
    user_links: &mut Vec<crate::sys::PerfLink>,
) -> Result<(), CollectError> {
    let kinds = &config.kinds;
    let tracking = config.filter.targets.is_some();
    let prefix = match c {
        Collector::Tracepoint => Some("wt_tracepoint"),
        Collector::User => Some("wt_user"),
        Collector::Perf => Some("wt_perf"),
        _ => None,
    };
    if let Some(prefix) = prefix {
        if tracking && config.filter.follow_children {
            attach_raw(obj, &format!("{prefix}_track_fork"), "sched_process_fork")?;
        }
        if tracking {
            attach_raw(obj, &format!("{prefix}_untrack_exit"), "sched_process_exit")?;
        }
    }
    match c {
        Collector::Tracepoint => {
            let what = "the tracepoint collector (wt_tracepoint)";
            let p: &mut TracePoint = program(obj, "wt_tracepoint", what)?;
            p.load().map_err(|e| attach_error(what, verifier_error(&e)))?;
            let fd = p.fd().map_err(|e| attach_error(what, e))?.try_clone().map_err(|e| attach_error(what, e))?;
            for tp in &config.table.tracepoints {
                let (cat, name) = (&tp.format.category, &tp.format.name);
                if cat == "btf" {
                    attach_raw(obj, &format!("wt_btf_{name}"), name)?;
                    continue;
                }
                let link = crate::sys::attach_tracepoint(tp.format.id, fd.as_fd(), u64::from(tp.format.id))
                    .map_err(|e| attach_error(&format!("tracepoint:{cat}:{name}"), e))?;
                user_links.push(link);
            }
        }
        Collector::User => {
            for (slot, u) in config.table.user.iter().enumerate() {
                let prog = if u.ret { "wt_uretprobe" } else { "wt_uprobe" };
                let what = format!("{} ({}, offset {:#x})", u.probe, u.path.display(), u.offset);
                let p: &mut UProbe = program(obj, prog, &what)?;
                if p.fd().is_err() {
                    p.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
                }
                let fd = p.fd().map_err(|e| attach_error(&what, e))?;
                let link = crate::sys::attach_uprobe(
                    &u.path,
                    u.offset,
                    u.semaphore.unwrap_or(0),
                    u.ret,
                    fd.as_fd(),
                    slot as u64,
                )
                .map_err(|e| attach_error(&what, e))?;
                user_links.push(link);
            }
        }
        Collector::Perf => {
            let cpus = aya::util::online_cpus()
                .map_err(|(what, e)| attach_error("perf events", format!("cannot list CPUs ({what}): {e}")))?;
            for p in &config.table.perf {
                let what = format!("software:{}", p.name);
                let event = software_event(p.event).ok_or_else(|| attach_error(&what, "unknown software event"))?;
                let prog: &mut PerfEvent = program(obj, &format!("wt_perf_{}", p.event), &what)?;
                prog.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
                let policy = match p.freq {
                    Some(hz) => SamplePolicy::Frequency(hz),
                    None => SamplePolicy::Period(p.period),
                };
                for cpu in &cpus {
                    prog.attach(
                        PerfEventConfig::Software(event),
                        PerfEventScope::AllProcessesOneCpu { cpu: *cpu },
                        policy,
                        false,
                    )
                    .map_err(|e| attach_error(&format!("{what} on CPU {cpu}"), e))?;
                }
            }
        }
        _ => {}
    }
    match c {
        Collector::Syscalls => {
            if kinds.contains(&Kind::SysEnter) {
                attach_raw(obj, "wt_sys_enter", "sys_enter")?;
            }
            if kinds.contains(&Kind::SysExit) {
                attach_raw(obj, "wt_sys_exit", "sys_exit")?;
            }
            if tracking && config.filter.follow_children {
                attach_raw(obj, "wt_syscalls_track_fork", "sched_process_fork")?;
            }
            if tracking {
                attach_raw(obj, "wt_syscalls_untrack_exit", "sched_process_exit")?;
            }
        }
        Collector::Proc => {
            if kinds.contains(&Kind::Exec) {
                attach_tp(obj, "wt_execve_enter", "syscalls", "sys_enter_execve")?;
                attach_tp(obj, "wt_execveat_enter", "syscalls", "sys_enter_execveat")?;
                attach_tp(obj, "wt_execve_exit", "syscalls", "sys_exit_execve")?;
                attach_tp(obj, "wt_execveat_exit", "syscalls", "sys_exit_execveat")?;
            }
            if kinds.contains(&Kind::Fork) || (tracking && config.filter.follow_children) {
                attach_raw(obj, "wt_fork", "sched_process_fork")?;
            }
            if kinds.contains(&Kind::Exit) || tracking {
                attach_raw(obj, "wt_exit", "sched_process_exit")?;
            }
        }
        Collector::File => {
            for sys in ["open", "openat", "openat2", "creat"] {
                attach_tp(obj, &format!("wt_open_enter_{sys}"), "syscalls", &format!("sys_enter_{sys}"))?;
                attach_tp(obj, &format!("wt_open_exit_{sys}"), "syscalls", &format!("sys_exit_{sys}"))?;
            }
            if tracking && config.filter.follow_children {
                attach_raw(obj, "wt_file_track_fork", "sched_process_fork")?;
            }
            if tracking {
                attach_raw(obj, "wt_file_untrack_exit", "sched_process_exit")?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Attach the aggregation collector's programs to the sites that have actions.
pub(super) fn attach_aggs(
    obj: &mut Ebpf,
    config: &LiveConfig,
    btf: Option<Result<aya::Btf, String>>,
    links: &mut Vec<crate::sys::PerfLink>,
) -> Result<(), CollectError> {
    let f = &config.agg_filter;
    if f.targets.is_some() && f.follow_children {
        attach_raw(obj, "wt_agg_track_fork", "sched_process_fork")?;
    }
    // The exit program also forgets the starts of a thread's intervals.
    if f.targets.is_some() || !tid_keyed_aggs(&config.aggs).is_empty() {
        attach_raw(obj, "wt_agg_untrack_exit", "sched_process_exit")?;
    }
    let sched: Vec<SchedTp> = config
        .aggs
        .iter()
        .filter_map(|s| match s.attach {
            SiteAttach::Tracepoint { btf, .. } => btf,
            _ => None,
        })
        .collect();
    if !sched.is_empty() {
        attach_sched(obj, &sched, btf)?;
    }
    // A syscall timed in the per-CPU record moves to its thread when the thread is
    // switched out: attached before the syscall sites, so that no start is left behind.
    // The scheduler's own program does it when it is attached.
    if crate::collect::agg_maps::sys_interval(&config.aggs).is_some() && !sched.contains(&SchedTp::Switch) {
        attach_raw(obj, "wt_agg_sys_switch", "sched_switch")?;
    }
    let mut fd = None;
    for site in &config.aggs {
        match &site.attach {
            SiteAttach::SysEnter => attach_raw(obj, "wt_agg_sys_enter", "sys_enter")?,
            SiteAttach::SysExit => attach_raw(obj, "wt_agg_sys_exit", "sys_exit")?,
            SiteAttach::Tracepoint { btf: Some(_), .. } => {}
            SiteAttach::Tracepoint { id, name, btf: None } => {
                let what = "the aggregation collector (wt_agg_tracepoint)";
                if fd.is_none() {
                    let p: &mut TracePoint = program(obj, "wt_agg_tracepoint", what)?;
                    p.load().map_err(|e| attach_error(what, verifier_error(&e)))?;
                    let owned =
                        p.fd().map_err(|e| attach_error(what, e))?.try_clone().map_err(|e| attach_error(what, e))?;
                    fd = Some(owned);
                }
                let Some(fd) = fd.as_ref() else { continue };
                let link = crate::sys::attach_tracepoint(*id, fd.as_fd(), u64::from(site.site))
                    .map_err(|e| attach_error(&format!("tracepoint:{name} (aggregation)"), e))?;
                links.push(link);
            }
        }
    }
    Ok(())
}

/// Load and attach the aggregation collector's programs for the scheduler's BTF
/// tracepoints `sched`. Each is verified for its own tracepoint (a quarter of a second
/// each here: every action kind of the collector), so they are verified at once.
fn attach_sched(obj: &mut Ebpf, sched: &[SchedTp], btf: Option<Result<aya::Btf, String>>) -> Result<(), CollectError> {
    let what = |tp: SchedTp| format!("tracepoint:sched:{} (aggregation, {})", tp.program().1, tp.program().0);
    let btf = match btf {
        Some(Ok(btf)) => btf,
        Some(Err(e)) => return Err(attach_error(&what(sched[0]), format!("the kernel's BTF: {e}"))),
        None => return Err(attach_error(&what(sched[0]), "the kernel's BTF was not read")),
    };
    let mut progs: Vec<(SchedTp, &mut aya::programs::BtfTracePoint)> = Vec::new();
    for (name, p) in obj.programs_mut() {
        if let Some(tp) = sched.iter().copied().find(|tp| tp.program().0 == name) {
            let p = p.try_into().map_err(|e| attach_error(&what(tp), e))?;
            progs.push((tp, p));
        }
    }
    if progs.len() != sched.len() {
        return Err(attach_error(&what(sched[0]), "program missing from the collector"));
    }
    let btf = &btf;
    let loaded: Vec<Result<(), CollectError>> = std::thread::scope(|s| {
        let jobs: Vec<_> = progs
            .iter_mut()
            .map(|(tp, p)| {
                let tp = *tp;
                s.spawn(move || p.load(tp.program().1, btf).map_err(|e| attach_error(&what(tp), verifier_error(&e))))
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or_else(|_| Err(attach_error("the verifier's thread", "panicked"))))
            .collect()
    });
    loaded.into_iter().collect::<Result<Vec<()>, _>>()?;
    for (tp, p) in progs {
        p.attach().map_err(|e| attach_error(&what(tp), e))?;
    }
    Ok(())
}

pub(super) fn software_event(config: u32) -> Option<SoftwareEvent> {
    use SoftwareEvent::*;
    [
        CpuClock,
        TaskClock,
        PageFaults,
        ContextSwitches,
        CpuMigrations,
        PageFaultsMin,
        PageFaultsMaj,
        AlignmentFaults,
        EmulationFaults,
        Dummy,
        BpfOutput,
        CgroupSwitches,
    ]
    .into_iter()
    .find(|e| *e as u32 == config)
}

/// Detach and unload one collector program (the maps stay).
pub(super) fn detach(prog: &mut aya::programs::Program) {
    use aya::programs::Program;
    let _ = match prog {
        Program::TracePoint(p) => p.unload(),
        Program::RawTracePoint(p) => p.unload(),
        Program::BtfTracePoint(p) => p.unload(),
        Program::PerfEvent(p) => p.unload(),
        Program::UProbe(p) => p.unload(),
        _ => Ok(()),
    };
}

/// A raw tracepoint: no kernel BTF to parse for it, unlike a BTF-typed one.
pub(super) fn attach_raw(obj: &mut Ebpf, prog: &str, event: &str) -> Result<(), CollectError> {
    let what = format!("raw_tp/{event} ({prog})");
    let p: &mut RawTracePoint = program(obj, prog, &what)?;
    p.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
    p.attach(event).map_err(|e| attach_error(&what, e))?;
    Ok(())
}

pub(super) fn attach_tp(obj: &mut Ebpf, prog: &str, category: &str, name: &str) -> Result<(), CollectError> {
    let what = format!("tracepoint:{category}:{name} ({prog})");
    let p: &mut TracePoint = program(obj, prog, &what)?;
    p.load().map_err(|e| attach_error(&what, verifier_error(&e)))?;
    p.attach(category, name).map_err(|e| attach_error(&what, e))?;
    Ok(())
}

/// A collector program, typed as the attach type it was written for.
pub(super) fn program<'a, T>(obj: &'a mut Ebpf, prog: &str, what: &str) -> Result<&'a mut T, CollectError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = obj.program_mut(prog).ok_or_else(|| attach_error(what, "program missing from the collector"))?;
    p.try_into().map_err(|e| attach_error(what, e))
}

pub(super) fn attach_error(what: &str, reason: impl std::fmt::Display) -> CollectError {
    CollectError::Attach { what: what.to_string(), reason: reason.to_string() }
}

pub(super) fn verifier_error(e: &aya::programs::ProgramError) -> String {
    let full = format!("{e:#}");
    let tail: Vec<&str> = full.lines().rev().take(6).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

//! `wasmtap run` and `wasmtap record`.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context};

use super::{ExportArgs, Outcome, OutputArgs, PluginArgs, RecordArgs, RunArgs, TraceArgs};
use crate::accounting::RunBounds;
use crate::clock::Clock;
use crate::collect::live::{EventQuota, KernelFilter, Live, LiveConfig};
use crate::collect::map_sizes::MapSizes;
use crate::collect::overload;
use crate::collect::recording::{Header, Writer};
use crate::collect::source::{EventSource, LiveSource};
use crate::collect::table::ProbeLookup;
use crate::output::Format;
use crate::package::trust::Trust;
use crate::pipeline::{self, RunOptions, Tee};
use crate::plugin::{self, params, PluginSet, Runner};
use crate::privilege;
use crate::sandbox::Sandbox;
use crate::service::executor::{CollectorOptions, Link, ShmSource};
use crate::service::tenant::{TenantRule, TENANT_KERNEL_CPU};
use crate::sys::creds::User;
use crate::sys::GatedChild;
use crate::watchdog::{self, Doing, Watchdog};

pub fn run(args: RunArgs) -> anyhow::Result<Outcome> {
    trace("run", &args.plugins, &args.trace, &args.common, &args.output, None, &args.export)
}

pub fn record(args: RecordArgs) -> anyhow::Result<Outcome> {
    let text = OutputArgs { format: Format::Text, flamegraph: None };
    let to = match (&args.file, args.trace.recording_fd) {
        (_, Some(fd)) => Some(RecordTo::Fd(fd)),
        (Some(path), None) if ["text", "json", "folded", "prometheus"].iter().any(|f| path.as_os_str() == *f) => bail!(
            "wasmtap record: -o names the recording to write, and `{}` looks like an output format (formats \
             are chosen at replay: wasmtap replay FILE PLUGIN -o {}); name a file, e.g. -o trace.wtrec",
            path.display(),
            path.display()
        ),
        (Some(path), None) => Some(RecordTo::Path(path)),
        (None, None) if args.common.help => None,
        (None, None) => bail!("wasmtap record: name the recording to write with -o FILE"),
    };
    trace("record", &args.plugins, &args.trace, &args.common, &text, to, &ExportArgs::default())
}

/// Where `record` writes: a file it creates, or one the daemon's client created and sent.
enum RecordTo<'a> {
    Path(&'a Path),
    Fd(i32),
}

fn trace(
    verb: &str,
    plugin_args: &[String],
    trace: &TraceArgs,
    common: &PluginArgs,
    output: &OutputArgs,
    record_to: Option<RecordTo<'_>>,
    export: &ExportArgs,
) -> anyhow::Result<Outcome> {
    // A tenant's run joins its session's cgroup while it has one thread (its executor
    // starts in it).
    if trace.executor_fd.is_none() {
        crate::service::cgroup::join(&trace.cgroup)?;
    }
    // Read now: once confined, the thread that reports opens no file.
    let cgroup_bounds = crate::service::cgroup::bounds(&trace.cgroup);
    // Checked first, like any other bad input: nothing is loaded or started yet.
    let map_sizes = MapSizes::from_env()?;
    let tenant: Option<TenantRule> = match &trace.tenant {
        Some(json) => Some(serde_json::from_str(json).context("bad --tenant rule")?),
        None => None,
    };
    let mut max_kernel_cpu = super::limits::parse_kernel_cpu(&trace.max_kernel_cpu)?;
    if tenant.is_some() {
        // A tenant's run keeps the overload guard, at most at its ceiling.
        max_kernel_cpu = Some(max_kernel_cpu.map_or(TENANT_KERNEL_CPU, |v| v.min(TENANT_KERNEL_CPU)));
    }
    if let (Some(t), None) = (&tenant, trace.executor_fd) {
        // The collectors' side of a tenant's run: its plugins run in the executor it
        // starts, which reports to the user.
        let opts = CollectorOptions { max_kernel_cpu, events_per_sec: trace.max_events_per_sec };
        return match crate::service::executor::collect(t, opts)? {
            0 => Ok(Outcome::Clean),
            1 => Ok(Outcome::Problems),
            code => crate::sys::exit_now(code),
        };
    }
    // A tenant's executor: the socket to its collectors, taken before any plugin loads.
    let link = match trace.executor_fd {
        Some(_) if tenant.is_none() => bail!("--executor-fd is for a tenant's run, which sets --tenant too"),
        Some(fd) => Some(Link::inherited(fd)?),
        None => None,
    };
    let stall_timeout = super::limits::parse_watchdog(&common.watchdog)?;
    let listening = export.serve.is_some() || export.otlp.is_some();
    let exporting = listening || export.export_fd.is_some();
    if listening && tenant.is_some() {
        bail!(
            "--serve and --otlp are not for runs through the daemon: a tenant's run opens no \
             network socket (run as root, or ask the administrator for the daemon's metrics)"
        );
    }
    let auto_interval = exporting.then_some(export.export_interval);
    // The kernel's BTF takes longest to start: parse it while the plugins load.
    crate::collect::live::prefetch_loader();
    // Files first: a bad path stops the run before anything is traced, and once attached
    // the host gives up the privileges that let it create files anywhere.
    let mut created = Created::default();
    let recording = match &record_to {
        Some(RecordTo::Path(path)) => {
            let file = crate::private::create("recording", path)?;
            Some((created.add(path), file))
        }
        Some(RecordTo::Fd(fd)) => {
            let file = crate::sys::fds::inherited_file(*fd).context("the recording the client sent")?;
            Some((PathBuf::from("the recording"), file))
        }
        None => None,
    };
    let mut out = output.open()?;
    if let Some(path) = &output.flamegraph {
        created.add(path);
    }
    if let Some(fd) = trace.flamegraph_fd {
        let file = crate::sys::fds::inherited_file(fd).context("the flame graph the client sent")?;
        out.set_flamegraph_file(PathBuf::from("the flame graph"), file);
    }
    let cap = |l: crate::limits::Limits| match &tenant {
        Some(t) => t.cap(l),
        None => l,
    };
    let mut sandbox = Sandbox::new()?;
    sandbox.set_lister(match &link {
        Some(l) => l.lister()?,
        None => Box::new(crate::collect::tracefs::tracepoint_names),
    });
    sandbox.set_describer(match &link {
        Some(l) => l.describer()?,
        None => Box::new(|probe| crate::collect::plan::describe(probe, crate::collect::plan::live_format)),
    });
    sandbox.set_trust(match &tenant {
        Some(t) => t.trust.clone(),
        None => Trust::for_run(common.trust.as_deref())?,
    });
    // Plugin files a daemon's client sent: read from what the daemon handed this run.
    let sent = |arg: &String| {
        let path = trace.plugin_file.iter().find_map(|f| f.rsplit_once('=').filter(|(a, _)| a == arg).map(|(_, p)| p));
        path.map_or_else(|| arg.clone(), str::to_string)
    };
    let plugin_args: Vec<String> = plugin_args.iter().map(sent).collect();
    let Some(mut plugins) = start_plugins(&sandbox, &plugin_args, common, verb, true, &cap, auto_interval)? else {
        return Ok(Outcome::Clean);
    };
    // Listening now: a busy or bad address stops the run before anything is traced, and
    // the export thread starts before the run confines itself.
    let exporter = match exporting {
        true => Some(start_export(&mut plugins, common, export, &mut out)?),
        false => None,
    };
    let user = privilege::command_user(trace.run_as.as_deref())?;
    let mut child = spawn_command(trace, user.as_ref())?;
    for pid in &trace.pids {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    // A recording must hold the events kernel aggregations need, so they run in the host.
    plugins.aggregate_in_host(record_to.is_some());
    let ask;
    plugins.plan_probes(&match &link {
        Some(l) => {
            ask = |category: &str, name: &str| l.format(category, name);
            ProbeLookup::Asked(&ask)
        }
        None => ProbeLookup::Live,
    })?;
    if let Some(t) = &tenant {
        for name in plugins.probe_names() {
            if let Ok(spec) = crate::collect::probes::parse(&name) {
                t.check_probe(&name, &spec)?;
            }
        }
        if !t.kernel_addresses && plugins.table.has_kernel_stacks() {
            bail!("a plugin asks for kernel stacks, which {} does not allow user {}", t.rule, t.user);
        }
    }
    let agreed = plugins.kernel_filter();
    let targets = match &child {
        Some(c) => Some(vec![c.pid()]),
        None if !trace.pids.is_empty() => Some(trace.pids.clone()),
        None => agreed.targets.clone(),
    };
    let agg_filter = plugins.agg_filter();
    let agg_targets = match (&targets, &agg_filter.targets) {
        (Some(run), Some(own)) => Some(run.iter().filter(|p| own.contains(p)).copied().collect()),
        (Some(run), None) => Some(run.clone()),
        (None, own) => own.clone(),
    };
    // Started before the collectors load, so that they never see it; it learns which
    // programs to measure once they are loaded.
    let meter = match (max_kernel_cpu, &link) {
        (Some(_), None) => Some(overload::Meter::spawn()?),
        _ => None,
    };
    let follow_children = child.is_some() || trace.follow;
    let narrow = |f: KernelFilter| match &tenant {
        Some(t) => t.narrow(f),
        None => Ok(f),
    };
    let quota = match &tenant {
        Some(t) => Some(t.cap_events(trace.max_events_per_sec)),
        None => trace.max_events_per_sec,
    }
    .map(|per_sec| EventQuota { per_sec });
    let config = LiveConfig {
        kinds: plugins.kinds(),
        filter: narrow(KernelFilter { targets: targets.clone(), follow_children, ..agreed })?,
        table: plugins.table.clone(),
        aggs: plugins.agg_sites(),
        agg_filter: narrow(KernelFilter { targets: agg_targets, follow_children, ..agg_filter })?,
        map_sizes,
        meter_tgid: meter.as_ref().map(overload::Meter::pid),
        executor_tgid: None,
        quota,
    };
    let mut overload = None;
    let (collected, kallsyms) = match link {
        None => {
            let (mut live, rx) = Live::start(&config)?;
            if let Some(values) = live.take_values() {
                plugins.attach_kernel_values(values);
            }
            if let (Some(meter), Some(limit)) = (meter, max_kernel_cpu) {
                overload = Some(overload::Guard::start(meter, live.programs(), limit)?);
            }
            (Collected::Here(Box::new(LiveSource::new(live, rx))), None)
        }
        Some(link) => {
            let started = link.start(&config)?;
            if let Some(values) = started.values {
                plugins.attach_kernel_values(values);
            }
            (Collected::Elsewhere(started.source), started.kallsyms)
        }
    };
    let writer = match recording {
        Some((path, file)) => Some(Writer::new(file, &path, &recording_header(&plugins))?),
        None => None,
    };
    let _watchdog = match stall_timeout {
        Some(t) => Some(Watchdog::start(t, child.as_ref().map(GatedChild::pid))?),
        None => None,
    };
    for w in plugins.warnings() {
        out.diag(&w);
    }
    out.attached(plugins.probe_names().len(), true);
    for r in &plugins.runners {
        for t in r.tables() {
            out.table_header(t);
        }
    }
    out.flush();
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let symbols = match &kallsyms {
        Some(file) => {
            use std::os::fd::AsRawFd;
            crate::plugin::symbols::Live::start_with_kallsyms(format!("/proc/self/fd/{}", file.as_raw_fd()).into())
        }
        None => crate::plugin::symbols::Live::start(),
    }
    .context("cannot start the symbolizer thread")?;
    // Once it is the user, the run sees kernel addresses as 0: read them now. An exported
    // run's plugins symbolize at their first interval, within a call's deadline: the
    // kernel's symbols are read before that, too.
    if (exporting || tenant.as_ref().is_some_and(|t| t.kernel_addresses)) && plugins.table.has_kernel_stacks() {
        symbols.warm_kernel();
    }
    sandbox.set_symbols(Box::new(symbols.clone()));
    let other_user = user.as_ref().is_some_and(|u| u.uid != crate::sys::creds::uids().1);
    // This thread dispatches records to the plugins from now on.
    let confine = privilege::seccomp_wanted();
    if confine {
        // wasmtime-wasi's Tokio runtime (a plugin's stderr writes) starts on first use by
        // reading cgroup files and starting threads: the filter refuses both, so start it now.
        crate::sandbox::start_wasi_runtime();
        privilege::prepare_dispatch_thread();
        crate::collect::live::prepare_reads();
    }
    match &tenant {
        // A tenant's executor is the tenant's user from its start, with nothing to give up.
        Some(_) => {}
        None => {
            // The symbolizer's thread reads /proc for plugins that ask the `proc` tapset too
            // (an executable's path needs what reading memory maps does).
            let reads_processes = plugins.table.has_addresses() || plugins.runners.iter().any(|r| r.asks_processes());
            privilege::drop_after_attach(privilege::keep_after_attach(reads_processes, other_user))?;
        }
    }
    if confine {
        privilege::confine_dispatch_thread(child.as_ref().map(GatedChild::pid))?;
    }
    // The daemon's client releases its held command now: the run is confined already.
    if trace.attached_to_stdin {
        tell_attached();
    }
    created.keep();
    let opts = RunOptions {
        stop,
        duration: trace.duration,
        child: child.take(),
        symbols: Some(symbols.clone()),
        overload,
        export: exporter.as_ref().map(|e| (e.sink.clone(), export.export_interval)),
    };
    let (mut here, mut elsewhere);
    let inner: &mut dyn EventSource = match collected {
        Collected::Here(source) => {
            here = source;
            &mut *here
        }
        Collected::Elsewhere(source) => {
            elsewhere = source;
            &mut elsewhere
        }
    };
    let mut tee;
    let source: &mut dyn EventSource = match writer {
        Some(writer) => {
            tee = Tee::new(inner, writer, Some(symbols));
            &mut tee
        }
        None => inner,
    };
    let mut accounting = pipeline::run(&mut plugins, source, opts, &mut out)?;
    if let Some(said) = exporter.and_then(crate::export::serve::Exporter::finish) {
        out.diag(&said);
    }
    accounting.bounds = RunBounds { events_per_sec: quota.map(|q| q.per_sec), cgroup: cgroup_bounds };
    watchdog::beat(Doing::Reporting);
    out.accounting(&accounting, common.stats);
    out.close().map_err(anyhow::Error::msg)?;
    Ok(if accounting.has_problems() { Outcome::Problems } else { Outcome::Clean })
}

/// Where a live run's events come from: collectors this process attached, or, in a
/// tenant's executor, the collectors' process.
enum Collected {
    Here(Box<LiveSource>),
    Elsewhere(ShmSource),
}

/// Tell the daemon that started this run that it is attached: one byte to stdin, the
/// daemon's end of a socket pair.
fn tell_attached() {
    use std::io::Write;
    use std::os::fd::AsFd;
    if let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() {
        let _ = std::fs::File::from(fd).write_all(b"A");
    }
}

/// Fork the `-c` command, held before exec, as `user` if given.
fn spawn_command(trace: &TraceArgs, user: Option<&User>) -> anyhow::Result<Option<GatedChild>> {
    let Some(cmd) = &trace.command else { return Ok(None) };
    let argv = shlex::split(cmd).filter(|a| !a.is_empty()).with_context(|| format!("cannot parse command `{cmd}`"))?;
    Ok(Some(GatedChild::spawn(&argv, user).with_context(|| format!("cannot start `{cmd}`"))?))
}

/// Files this run created, removed again if it stops before tracing.
#[derive(Default)]
struct Created {
    paths: Vec<PathBuf>,
}

impl Created {
    fn add(&mut self, path: &Path) -> PathBuf {
        self.paths.push(path.to_path_buf());
        path.to_path_buf()
    }

    /// The run has started: the files are its output now.
    fn keep(&mut self) {
        self.paths.clear();
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn recording_header(plugins: &PluginSet) -> Header {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let clock = Clock::live();
    Header {
        layout_version: wasmtap_abi::LAYOUT_VERSION,
        wall_offset_ns: clock.wall_offset_ns,
        started_mono_ns: crate::sys::monotonic_ns(),
        probes: plugins.probe_names(),
        table: plugins.table.clone(),
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
    }
}

/// Load, describe and start the plugins, each within its limits (budgets enforced
/// when `live`); `None` when only help was asked for.
pub(super) fn start_plugins(
    sandbox: &Sandbox,
    plugin_args: &[String],
    common: &PluginArgs,
    verb: &str,
    live: bool,
    cap: &dyn Fn(crate::limits::Limits) -> crate::limits::Limits,
    auto_interval: Option<std::time::Duration>,
) -> anyhow::Result<Option<PluginSet>> {
    if plugin_args.is_empty() && !common.help {
        bail!("wasmtap {verb}: name at least one plugin (vetted: {})", plugin::find::available().join(", "));
    }
    let limits = common.limits.parse()?;
    let mut described = Vec::new();
    for arg in plugin_args {
        described.push(plugin::describe(sandbox, arg, Clock::live(), &cap(limits.defaults()))?);
    }
    if common.help {
        print_help(verb, &described);
        return Ok(None);
    }
    let specs: Vec<_> = described.iter().map(|d| (d.info.name.clone(), d.info.params.clone())).collect();
    params::check_unclaimed(&common.params, &specs)?;
    let names: Vec<String> = specs.iter().map(|(n, _)| n.clone()).collect();
    limits.check_names(&names)?;
    let mut runners = Vec::new();
    for d in described {
        // Exporting: a plugin reports to the metrics at each export interval through its
        // own `interval` parameter, unless the user set that.
        let mut raw = common.params.clone();
        if let Some(every) = auto_interval.filter(|_| takes_interval(&d.info) && !interval_given(common, &d.info.name))
        {
            raw.push(params::RawParam {
                plugin: Some(d.info.name.clone()),
                name: "interval".into(),
                value: format!("{}ns", every.as_nanos()),
            });
        }
        let ps = params::bind(&d.info.name, &d.info.params, &raw)?;
        let own = cap(limits.of(&d.info.name));
        let d = if limits.overrides(&d.info.name) { d.with_limits(&own)? } else { d };
        runners.push(Runner::start(d, &ps, own, live)?);
    }
    Ok(Some(PluginSet::new(runners)))
}

/// Whether a plugin takes an `interval` duration: its report timer.
fn takes_interval(info: &crate::wit::types::PluginInfo) -> bool {
    info.params.iter().any(|p| p.name == "interval" && p.kind == crate::wit::types::ParamKind::Duration)
}

/// Whether the user gave `plugin` an `interval` with --param.
fn interval_given(common: &PluginArgs, plugin: &str) -> bool {
    common.params.iter().any(|p| p.name == "interval" && p.plugin.as_deref().is_none_or(|n| n == plugin))
}

/// The metrics export of a run: the plugins feed its sink, its thread listens and pushes.
fn start_export(
    plugins: &mut PluginSet,
    common: &PluginArgs,
    export: &ExportArgs,
    out: &mut crate::output::Output,
) -> anyhow::Result<crate::export::serve::Exporter> {
    let names: Vec<String> = plugins.runners.iter().map(|r| r.info.name.clone()).collect();
    let sink = Arc::new(crate::export::Sink::new(&names, crate::export::unix_ns()));
    let print_ticks: Vec<bool> = plugins.runners.iter().map(|r| interval_given(common, &r.info.name)).collect();
    plugins.export_to(&sink, &print_ticks);
    for r in plugins.runners.iter().filter(|_| export.serve.is_some() || export.otlp.is_some()) {
        if !takes_interval(&r.info) {
            out.diag(&format!(
                "{}: it has no `interval` parameter, so its aggregations reach the metrics when the run ends; \
                 its accounting is live",
                r.info.name
            ));
        }
    }
    let to_daemon = match export.export_fd {
        Some(fd) => Some(crate::sys::fds::inherited_file(fd).context("the daemon's metrics descriptor")?),
        None => None,
    };
    let config = crate::export::serve::Config {
        serve: export.serve.clone(),
        otlp: export.otlp.clone(),
        every: export.export_interval,
        to_daemon,
    };
    let exporter = crate::export::serve::Exporter::start(config, sink)?;
    if let Some(addr) = exporter.address() {
        out.diag(&format!("serving metrics at http://{addr}/metrics"));
    }
    if let Some(url) = exporter.endpoint() {
        out.diag(&format!("pushing metrics over OTLP to {url} every {:?}", export.export_interval));
    }
    Ok(exporter)
}

/// The plugins' parameters first (what `wasmtap run PLUGIN --help` is asked for), then
/// the subcommand's own options.
fn print_help(verb: &str, described: &[plugin::Described]) {
    use clap::CommandFactory;
    for (n, d) in described.iter().enumerate() {
        let i = &d.info;
        let gap = if n == 0 { "" } else { "\n" };
        println!("{gap}Plugin {} {} (built for {}): {}", i.name, i.version, d.world(), i.description);
        if i.params.is_empty() {
            println!("  (no parameters)");
        }
        let rows: Vec<(String, String)> = i
            .params
            .iter()
            .map(|p| {
                let kind = format!("{:?}", p.kind).rsplit("::").next().unwrap_or("").to_ascii_uppercase();
                let default = match &p.default_value {
                    Some(v) if v.is_empty() => String::new(),
                    Some(v) => format!(" [default: {v}]"),
                    None => " [required]".to_string(),
                };
                (format!("--param {}={kind}", p.name), format!("{}{default}", p.description))
            })
            .collect();
        let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        for (left, right) in rows {
            println!("  {left:<width$}  {right}");
        }
    }
    let mut cmd = super::Cli::command();
    if let Some(sub) = cmd.find_subcommand_mut(verb) {
        if !described.is_empty() {
            println!("\nOptions of wasmtap {verb}:");
        }
        let _ = sub.clone().bin_name(format!("wasmtap {verb}")).print_help();
    }
}

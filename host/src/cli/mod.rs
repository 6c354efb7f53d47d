//! Command-line interface: raw arguments (`*Args`) become a validated run in the
//! command modules, one per subcommand.

mod limits;
mod list;
mod plugin;
mod replay;
mod run;
mod service;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;
use crate::plugin::params::RawParam;

/// How a command ended, for the exit code: 0 clean, 1 finished with problems.
pub enum Outcome {
    Clean,
    Problems,
}

#[derive(Parser, Debug)]
#[command(
    name = "wasmtap",
    version,
    about = "Trace Linux with sandboxed WebAssembly plugins over vetted eBPF collectors"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The arguments parsed, after [`expand_script`]: what a run through the daemon
    /// forwards (`-e PROGRAM` as `run script --param script.program=…`).
    #[arg(skip)]
    argv: Vec<String>,
}

impl Cli {
    /// Parse `args` as they come from [`expand_script`], keeping them for the daemon.
    pub fn try_parse_args(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
        let argv = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        Ok(Cli { argv, ..Cli::try_parse_from(args)? })
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run plugins over live kernel events (needs CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH, or root).
    Run(RunArgs),
    /// List the probes this kernel offers, with their fields.
    List(ListArgs),
    /// Run plugins and record the events they subscribe to into a file.
    Record(RecordArgs),
    /// Run plugins over a recording (no root, no BPF; deterministic).
    Replay(ReplayArgs),
    /// Package, sign, verify and inspect plugins (docs/plugins.md).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Serve users who are not root: the shared host's tracing service (as root).
    Daemon(DaemonArgs),
    /// List your sessions on the daemon (everyone's, for an admin).
    Sessions(SocketArgs),
    /// End a session on the daemon: its run stops and reports.
    Stop(StopArgs),
    /// The overload guard's measuring process (started by a live run, not by people).
    #[command(name = "__collector-stats", hide = true)]
    CollectorStats,
}

/// Options shared by everything that runs plugins.
#[derive(Args, Debug, Clone)]
pub struct PluginArgs {
    /// A plugin parameter; `PLUGIN.NAME=VALUE` when several plugins run.
    #[arg(long = "param", value_name = "[PLUGIN.]NAME=VALUE")]
    params: Vec<RawParam>,
    /// Print per-probe and per-plugin event accounting, with each plugin's limits, at the end.
    #[arg(long)]
    stats: bool,
    /// Show this help, and the parameters of the plugins named.
    #[arg(short = 'h', long)]
    help: bool,
    /// End the run, with a message and exit code 1, when it makes no progress for this
    /// long (a stdout nobody reads, a stuck host call); 0 turns the watchdog off. Long by
    /// default so that a pager paused by its reader does not end the run.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    watchdog: String,
    /// The trust policy: which plugins may run (docs/plugins.md). Default:
    /// /etc/wasmtap/trust.toml when it exists; without one, any plugin runs.
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
    #[command(flatten)]
    limits: limits::LimitArgs,
}

/// Options that choose what live events to trace.
#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Trace only this process (repeatable); filtered in the kernel.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Run this command and trace it and its children; stop when it exits.
    #[arg(short = 'c', long = "cmd", value_name = "'CMD ARGS'", conflicts_with = "pids")]
    command: Option<String>,
    /// Run the -c command as USER (name or uid), with that user's groups. Default: the
    /// user who ran sudo (SUDO_UID), else wasmtap's own user; `root` only when wasmtap runs as root.
    #[arg(long, value_name = "USER", requires = "command")]
    run_as: Option<String>,
    /// Stop after this long, e.g. 5s.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop the run when the collectors' kernel programs use more than this share of one
    /// CPU, summed over CPUs (measured for 150 ms every 5 s); 0 turns the guard off. One
    /// CPU by default: one traced thread in a syscall storm may spend half its time in
    /// the collectors, but no more than its own CPU.
    #[arg(long, value_name = "PERCENT", default_value = "100")]
    max_kernel_cpu: String,
    /// Let at most N events a second reach the plugins, over all probes (the events
    /// kernel aggregations count are not events sent); the rest are lost in the kernel,
    /// counted under `quota`. A tenant's run holds to its policy's `events_per_sec`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_events_per_sec: Option<u64>,
    /// Talk to the wasmtap daemon at SOCKET (the way a user without privileges runs);
    /// the default for a user who is not root is the policy's socket.
    #[arg(long, value_name = "SOCKET")]
    daemon: Option<PathBuf>,
    /// Set by the daemon: the tenant rule this run holds to (JSON).
    #[arg(long, hide = true, value_name = "JSON")]
    tenant: Option<String>,
    /// Set by the daemon: trace the children of the -p processes too.
    #[arg(long, hide = true)]
    follow: bool,
    /// Set by the daemon: write one byte to stdin (a socket) once attached.
    #[arg(long, hide = true)]
    attached_to_stdin: bool,
    /// Set by the daemon: join this cgroup directory before anything else (repeatable).
    #[arg(long, hide = true, value_name = "DIR")]
    cgroup: Vec<PathBuf>,
    /// Set by the daemon: the plugin argument ARG is the file at PATH (one the client sent).
    #[arg(long, hide = true, value_name = "ARG=PATH")]
    plugin_file: Vec<String>,
    /// Set by the daemon: `record` writes to this inherited descriptor (the client's file).
    #[arg(long, hide = true, value_name = "FD")]
    recording_fd: Option<i32>,
    /// Set by the daemon: `--flamegraph` writes to this inherited descriptor.
    #[arg(long, hide = true, value_name = "FD")]
    flamegraph_fd: Option<i32>,
    /// Set by a tenant's run for its executor: the socket to its collectors' process.
    #[arg(long, hide = true, value_name = "FD")]
    executor_fd: Option<i32>,
}

/// How results are written (`run`, `replay`).
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub(super) format: Format,
    /// Also draw the stack-keyed aggregations as an SVG flame graph into FILE.
    #[arg(long, value_name = "FILE")]
    pub(super) flamegraph: Option<PathBuf>,
}

impl OutputArgs {
    /// The sink these options describe, on stdout and stderr; the flame graph's file is
    /// created now.
    fn open(&self) -> anyhow::Result<crate::output::Output> {
        let mut out = crate::output::Output::stdio(self.format);
        if let Some(path) = &self.flamegraph {
            out.set_flamegraph(path.clone()).map_err(anyhow::Error::msg)?;
        }
        Ok(out)
    }
}

/// Live metrics for Prometheus and OpenTelemetry (`run`; docs/fleet.md).
#[derive(Args, Debug, Clone, Default)]
pub struct ExportArgs {
    /// Serve every plugin's aggregations and the run's accounting as Prometheus metrics
    /// at http://ADDR/metrics (127.0.0.1:9464, or :9464 for every address); the run
    /// goes on until Ctrl-C or SIGTERM unless -d or -c ends it.
    #[arg(long, value_name = "ADDR")]
    serve: Option<String>,
    /// Push the same metrics over OTLP/HTTP (protobuf) to URL at every export interval
    /// (http://collector:4318; /v1/metrics is added when the URL has no path).
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// How often plugins report to the metrics (each plugin's `interval`, unless given
    /// with --param) and OTLP pushes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    export_interval: Duration,
    /// Set by the daemon: write the metrics to this inherited descriptor at each export
    /// interval, for the daemon's own endpoint.
    #[arg(long, hide = true, value_name = "FD")]
    export_fd: Option<i32>,
}

#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct RunArgs {
    /// Plugins: vetted names (`syscount`) or paths to .wasm components.
    #[arg(value_name = "PLUGIN")]
    plugins: Vec<String>,
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    export: ExportArgs,
    #[command(flatten)]
    common: PluginArgs,
}

#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct RecordArgs {
    #[arg(value_name = "PLUGIN")]
    plugins: Vec<String>,
    /// The recording to write.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    common: PluginArgs,
}

#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct ReplayArgs {
    /// A file written by `wasmtap record`.
    #[arg(value_name = "FILE", required_unless_present = "help")]
    file: Option<PathBuf>,
    #[arg(value_name = "PLUGIN")]
    plugins: Vec<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    common: PluginArgs,
}

#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// The policy: who may trace what.
    #[arg(long, value_name = "FILE", default_value = crate::policy::DEFAULT_PATH)]
    policy: PathBuf,
    /// Listen here instead of the policy's socket.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The trust policy: the keys tenants' signed plugins are checked against (default
    /// /etc/wasmtap/trust.toml when it exists).
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
    /// Where each tenant's compiled plugins are kept, one directory per uid owned by
    /// that user (`off`: tenants' plugins are compiled on every run).
    #[arg(long, value_name = "DIR", default_value = crate::service::executor::TENANT_CACHE)]
    tenant_cache: PathBuf,
}

#[derive(Args, Debug)]
pub struct SocketArgs {
    /// The daemon's socket (default: WASMTAP_SOCKET, else /run/wasmtap/wasmtap.sock).
    #[arg(long, value_name = "SOCKET")]
    daemon: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    /// The session, as `wasmtap sessions` lists it.
    id: u64,
    #[command(flatten)]
    socket: SocketArgs,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only probes matching this pattern (`*` matches anything), e.g. 'syscall:open*'.
    pattern: Option<String>,
    /// Ask the wasmtap daemon at SOCKET (the way a user without privileges lists the
    /// kernel's tracepoints); the default for a user who is not root is the policy's socket.
    #[arg(long, value_name = "SOCKET")]
    daemon: Option<PathBuf>,
}

/// The command line with bpftrace's ways of running a program in the `script` plugin's
/// terms: `wasmtap -e PROGRAM [ARGS…] [OPTIONS]`, `wasmtap script FILE [ARGS…] [OPTIONS]`,
/// and `wasmtap FILE [ARGS…]` (a `#!/usr/bin/env wasmtap` script run as a command) become
/// `wasmtap run script --param script.program=… --param script.args=…` and the options.
/// Positional parameters (`$1`…) are the words before the first option, and every word
/// after `--`; `--explain` says where each block runs. Anything else is returned as it came.
pub fn expand_script(args: Vec<std::ffi::OsString>) -> Result<Vec<std::ffi::OsString>, String> {
    const COMMANDS: &[&str] =
        &["run", "list", "record", "replay", "plugin", "daemon", "sessions", "stop", "help", "__collector-stats"];
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else { return Ok(args) };
    let (program, from) = match first {
        "-e" => match args.get(2).and_then(|a| a.to_str()) {
            Some(p) => (p.to_string(), 3),
            None => {
                return Err(
                    "-e needs a program: wasmtap -e 'tracepoint:syscalls:sys_enter_openat { @[comm] = count(); }'"
                        .into(),
                )
            }
        },
        "script" => match args.get(2) {
            Some(path) => (read_script(std::path::Path::new(path))?, 3),
            None => return Err("script needs a file: wasmtap script FILE.bt [ARGS…] [OPTIONS]".into()),
        },
        f if !f.starts_with('-') && !COMMANDS.contains(&f) && std::path::Path::new(f).is_file() => {
            (read_script(std::path::Path::new(f))?, 2)
        }
        _ => return Ok(args),
    };
    let rest = &args[from..];
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut in_options = false;
    let mut after_dashes = false;
    let mut explain = false;
    for a in rest {
        let text = a.to_str().ok_or("arguments must be UTF-8")?;
        if after_dashes {
            positional.push(text.to_string());
        } else if text == "--" {
            after_dashes = true;
        } else if text == "--explain" {
            in_options = true;
            explain = true;
        } else if in_options || text.starts_with('-') {
            in_options = true;
            options.push(a.clone());
        } else {
            positional.push(text.to_string());
        }
    }
    let sep = '\u{1f}';
    if positional.iter().any(|p| p.contains(sep)) {
        return Err("a positional parameter may not contain U+001F".into());
    }
    let mut out: Vec<std::ffi::OsString> = vec![args[0].clone(), "run".into(), "script".into()];
    out.push("--param".into());
    out.push(format!("script.program={program}").into());
    if !positional.is_empty() {
        out.push("--param".into());
        out.push(format!("script.args={}", positional.join(&sep.to_string())).into());
    }
    if explain {
        out.push("--param".into());
        out.push("script.explain=true".into());
    }
    // time() shows this machine's local time, as bpftrace's does (the sandbox has no
    // time zones of its own).
    let utc_offset = crate::sys::local_utc_offset();
    if utc_offset != 0 {
        out.push("--param".into());
        out.push(format!("script.utc_offset={utc_offset}").into());
    }
    out.extend(options);
    Ok(out)
}

fn read_script(path: &std::path::Path) -> Result<String, String> {
    const MAX: u64 = 1 << 20;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the script {}: {e}", path.display()))?;
    let mut text = String::new();
    use std::io::Read;
    file.take(MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the script {}: {e}", path.display()))?;
    if text.len() as u64 > MAX {
        return Err(format!("the script {} is larger than 1 MiB", path.display()));
    }
    Ok(text)
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Run(args) if service::through_daemon(&args.trace) => service::run(args, &cli.argv),
        Command::Run(args) => run::run(args),
        Command::Daemon(args) => {
            let opts = crate::service::daemon::Options {
                policy: args.policy,
                trust: args.trust,
                socket: args.socket,
                tenant_cache: args.tenant_cache,
                parse_run: service::parse_run,
            };
            crate::service::daemon::serve(opts)?;
            Ok(Outcome::Clean)
        }
        Command::Plugin(command) => plugin::run(command),
        Command::Sessions(args) => service::sessions(args),
        Command::Stop(args) => service::stop(args),
        Command::Record(args) if service::through_daemon(&args.trace) => service::record(args, &cli.argv),
        Command::Record(args) => run::record(args),
        Command::Replay(args) => replay::replay(args),
        Command::List(args) if service::list_through_daemon(&args) => service::list(args),
        Command::List(args) => list::list(args),
        Command::CollectorStats => {
            crate::collect::overload::serve()?;
            Ok(Outcome::Clean)
        }
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::plugin::params::parse_duration(s).ok_or_else(|| format!("`{s}` is not a duration (try 500ms, 5s, 1m)"))
}

//! The command line's side of the shared host: `run` through the daemon for a user who is
//! not root, `sessions`, `stop`, and how the daemon reads a `run` request's arguments
//! (with this parser, so the daemon sees the flags exactly as a run would).

use clap::Parser;

use super::{Cli, Command, ListArgs, Outcome, RecordArgs, RunArgs, SocketArgs, StopArgs, TraceArgs};
use crate::service::daemon::RunShape;
use crate::service::wire::{Ask, Passed, Reply};
use crate::service::{client, default_socket};

/// Whether `run` goes through the daemon: when asked to (`--daemon`), or for a user who
/// can trace neither as root nor with CAP_BPF or CAP_SYS_ADMIN of its own; never for a
/// tenant's executor, which the daemon's run started.
pub fn through_daemon(trace: &TraceArgs) -> bool {
    use crate::sys::creds::{effective_caps, CAP_BPF, CAP_SYS_ADMIN};
    if trace.executor_fd.is_some() {
        return false;
    }
    let can_trace = crate::sys::euid() == 0
        || effective_caps().is_ok_and(|caps| caps & ((1 << CAP_BPF) | (1 << CAP_SYS_ADMIN)) != 0);
    trace.daemon.is_some() || !can_trace
}

/// Whether `list` asks the daemon: tracefs is root's, so a user who cannot read it lists
/// tracepoints through the daemon (or when asked to, `--daemon`). A binary's functions
/// and USDT probes are read here, as the user: nothing privileged is needed for them.
pub fn list_through_daemon(args: &ListArgs) -> bool {
    let pattern = args.pattern.as_deref().unwrap_or("*");
    let local = ["uprobe:", "uretprobe:", "usdt:"].iter().any(|p| pattern.starts_with(p));
    let events = std::path::Path::new(crate::collect::tracefs::ROOT).join("events");
    !local && (args.daemon.is_some() || (crate::sys::euid() != 0 && std::fs::read_dir(events).is_err()))
}

/// `wasmtap list` through the daemon.
pub fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    let socket = args.daemon.unwrap_or_else(default_socket);
    match client::list(&socket, args.pattern)?.code {
        0 => Ok(Outcome::Clean),
        code => std::process::exit(code),
    }
}

/// `wasmtap run` through the daemon: the arguments as typed, less `--daemon` and `-c`,
/// whose command this process starts as its user, and `--flamegraph FILE`, which it
/// creates as its user and sends.
pub fn run(args: RunArgs, argv: &[String]) -> anyhow::Result<Outcome> {
    let mut files = Vec::new();
    if let Some(path) = &args.output.flamegraph {
        files.push((Passed::Flamegraph, crate::private::create("flame graph", path)?));
    }
    through(argv, &args.plugins, &args.trace, "run", &["--flamegraph"], files)
}

/// `wasmtap record` through the daemon: as `run`, with `-o FILE` created here, as the user.
pub fn record(args: RecordArgs, argv: &[String]) -> anyhow::Result<Outcome> {
    let Some(path) = &args.file else { anyhow::bail!("wasmtap record: name the recording to write with -o FILE") };
    let files = vec![(Passed::Recording, crate::private::create("recording", path)?)];
    through(argv, &args.plugins, &args.trace, "record", &["-o", "--output"], files)
}

fn through(
    argv: &[String],
    plugins: &[String],
    trace: &TraceArgs,
    verb: &str,
    sent_flags: &[&str],
    files: Vec<(Passed, std::fs::File)>,
) -> anyhow::Result<Outcome> {
    if trace.run_as.is_some() {
        anyhow::bail!("--run-as: through the daemon, a command runs as the user who starts it");
    }
    let socket = trace.daemon.clone().unwrap_or_else(default_socket);
    // As typed, or as `-e` and `script` expanded them.
    let typed: Vec<String> = argv.iter().skip_while(|a| *a != verb).skip(1).cloned().collect();
    let forwarded = without_client_flags(&typed, sent_flags);
    // Files the user names, and packages of a registry, pulled here as the user into the
    // user's own store: the daemon gets the bytes, never a path or a reference to follow.
    let mut plugin_files = Vec::new();
    for p in plugins {
        if crate::package::registry::is_reference(p) {
            let pulled = crate::package::registry::Store::from_env().pull(p)?;
            plugin_files.push((p.clone(), pulled.path));
        } else if crate::plugin::find::is_path(p) {
            plugin_files.push((p.clone(), std::path::PathBuf::from(p)));
        }
    }
    let sent = client::Sent { command: trace.command.as_deref(), plugin_files: &plugin_files, files };
    let ended = client::run(&socket, forwarded, verb == "record", sent)?;
    match ended.code {
        0 => Ok(Outcome::Clean),
        1 => Ok(Outcome::Problems),
        code => std::process::exit(code),
    }
}

/// `typed` without `--daemon SOCKET`, `-c CMD` and the flags of `sent` with their values (in
/// any of their spellings).
fn without_client_flags(typed: &[String], sent: &[&str]) -> Vec<String> {
    let mut flags = vec!["--daemon", "-c", "--cmd"];
    flags.extend(sent);
    let mut out = Vec::new();
    let mut it = typed.iter();
    while let Some(a) = it.next() {
        let joined = |f: &&str| match f.strip_prefix("--") {
            Some(_) => a.starts_with(&format!("{f}=")),
            None => a.starts_with(f) && a.len() > f.len() && !a.starts_with("--"),
        };
        if flags.contains(&a.as_str()) {
            it.next();
        } else if !flags.iter().any(joined) {
            out.push(a.clone());
        }
    }
    out
}

/// How the daemon reads a run request: this command line's own parser.
pub fn parse_run(record: bool, args: &[String]) -> Result<RunShape, String> {
    let verb = if record { "record" } else { "run" };
    let argv = ["wasmtap", verb].into_iter().map(String::from).chain(args.iter().cloned());
    let cli = Cli::try_parse_from(argv).map_err(|e| {
        let text = e.to_string();
        let said: Vec<&str> =
            text.lines().map(str::trim).take_while(|l| !l.starts_with("Usage:")).filter(|l| !l.is_empty()).collect();
        format!("bad arguments: {}", said.join(" ").trim_start_matches("error: "))
    })?;
    let (plugins, trace, flamegraph, file, trust, export_fd) = match cli.command {
        Command::Run(r) => {
            (r.plugins, r.trace, r.output.flamegraph.is_some(), false, r.common.trust, r.export.export_fd.is_some())
        }
        Command::Record(r) => (r.plugins, r.trace, false, r.file.is_some(), r.common.trust, false),
        _ => return Err("not a run".into()),
    };
    Ok(RunShape {
        plugins,
        pids: trace.pids,
        command: trace.command.is_some(),
        run_as: trace.run_as.is_some(),
        flamegraph,
        file,
        daemon_flags: trace.tenant.is_some()
            || !trace.plugin_file.is_empty()
            || !trace.cgroup.is_empty()
            || trace.recording_fd.is_some()
            || trace.flamegraph_fd.is_some()
            || trace.executor_fd.is_some()
            || trace.follow
            || trace.attached_to_stdin
            || trace.daemon.is_some()
            || export_fd,
        trust: trust.is_some(),
    })
}

pub fn sessions(args: SocketArgs) -> anyhow::Result<Outcome> {
    let socket = args.daemon.unwrap_or_else(default_socket);
    let Reply::Sessions { sessions } = client::ask(&socket, Ask::Sessions)? else {
        anyhow::bail!("the daemon answered something else than its sessions");
    };
    println!("{:>6} {:<12} {:>8} {:>8}  ARGS", "ID", "USER", "UID", "PID");
    for s in sessions {
        println!("{:>6} {:<12} {:>8} {:>8}  {}", s.id, s.user, s.uid, s.pid, s.args.join(" "));
    }
    Ok(Outcome::Clean)
}

pub fn stop(args: StopArgs) -> anyhow::Result<Outcome> {
    let socket = args.socket.daemon.unwrap_or_else(default_socket);
    client::ask(&socket, Ask::StopSession { id: args.id })?;
    eprintln!("wasmtap: session {} stopped", args.id);
    Ok(Outcome::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_keeps_its_own_flags() {
        let typed: Vec<String> = [
            "syscount",
            "--daemon",
            "/s",
            "-c",
            "ls -l",
            "--param",
            "top=0",
            "--daemon=/t",
            "-cls",
            "--cmd=x",
            "-d",
            "2s",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(without_client_flags(&typed, &[]), ["syscount", "--param", "top=0", "-d", "2s"]);
        // What the client sends as descriptors goes too: a recording's -o, a flame graph.
        let typed: Vec<String> = [
            "syscount",
            "-o",
            "r.rec",
            "-d",
            "1s",
            "--output=x",
            "-or.rec",
            "--flamegraph",
            "f.svg",
            "--flamegraph=g.svg",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(without_client_flags(&typed, &["-o", "--output", "--flamegraph"]), ["syscount", "-d", "1s"]);
    }

    #[test]
    fn the_daemon_reads_a_run_as_the_command_line_does() {
        let args: Vec<String> = ["syscount", "-p", "42", "--param", "top=3"].map(String::from).to_vec();
        let shape = parse_run(false, &args).unwrap();
        assert_eq!(shape, RunShape { plugins: vec!["syscount".into()], pids: vec![42], ..RunShape::default() });
        for flag in [
            "--tenant={}",
            "--cgroup=/sys/fs/cgroup/memory",
            "--plugin-file=x.wasm=/etc/shadow",
            "--follow",
            "--recording-fd=3",
            "--flamegraph-fd=3",
            "--executor-fd=100",
        ] {
            let sneaky: Vec<String> = ["syscount", flag].map(String::from).to_vec();
            assert!(parse_run(false, &sneaky).unwrap().daemon_flags, "{flag}");
        }
        let bad: Vec<String> = ["syscount", "--no-such-flag"].map(String::from).to_vec();
        let err = parse_run(false, &bad).unwrap_err();
        assert!(err.starts_with("bad arguments: unexpected argument '--no-such-flag'"), "{err}");
    }
}

//! The command line's side of the shared host: `run` through the daemon for a user who is
//! not root, `sessions`, `stop`, and how the daemon reads a `run` request's arguments
//! (with this parser, so the daemon sees the flags exactly as a run would).

use clap::Parser;

use super::{Cli, Command, Outcome, RunArgs, SocketArgs, StopArgs};
use crate::service::daemon::RunShape;
use crate::service::wire::{Ask, Reply};
use crate::service::{client, default_socket};

/// Whether `run` goes through the daemon: when asked to (`--daemon`), or for a user who
/// can trace neither as root nor with CAP_BPF or CAP_SYS_ADMIN of its own.
pub fn through_daemon(args: &RunArgs) -> bool {
    use crate::sys::creds::{effective_caps, CAP_BPF, CAP_SYS_ADMIN};
    let can_trace = crate::sys::euid() == 0
        || effective_caps().is_ok_and(|caps| caps & ((1 << CAP_BPF) | (1 << CAP_SYS_ADMIN)) != 0);
    args.trace.daemon.is_some() || !can_trace
}

/// `wasmtap run` through the daemon: the arguments as typed, less `--daemon` and `-c`,
/// whose command this process starts as its user.
pub fn run(args: RunArgs) -> anyhow::Result<Outcome> {
    if args.trace.run_as.is_some() {
        anyhow::bail!("--run-as: through the daemon, a command runs as the user who starts it");
    }
    let socket = args.trace.daemon.clone().unwrap_or_else(default_socket);
    let typed: Vec<String> = std::env::args().skip_while(|a| a != "run").skip(1).collect();
    let forwarded = without_client_flags(&typed);
    let files: Vec<String> = args.plugins.iter().filter(|p| crate::plugin::find::is_path(p)).cloned().collect();
    let ended = client::run(&socket, forwarded, args.trace.command.as_deref(), &files)?;
    match ended.code {
        0 => Ok(Outcome::Clean),
        1 => Ok(Outcome::Problems),
        code => std::process::exit(code),
    }
}

/// `typed` without `--daemon SOCKET` and `-c CMD` (in any of their spellings).
fn without_client_flags(typed: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = typed.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--daemon" | "-c" | "--cmd" => {
                it.next();
            }
            _ if a.starts_with("--daemon=") || a.starts_with("--cmd=") => {}
            _ if a.starts_with("-c") && a.len() > 2 && !a.starts_with("--") => {}
            _ => out.push(a.clone()),
        }
    }
    out
}

/// How the daemon reads a run request: this command line's own parser.
pub fn parse_run(args: &[String]) -> Result<RunShape, String> {
    let argv = ["wasmtap", "run"].into_iter().map(String::from).chain(args.iter().cloned());
    let cli = Cli::try_parse_from(argv).map_err(|e| {
        let text = e.to_string();
        let said: Vec<&str> =
            text.lines().map(str::trim).take_while(|l| !l.starts_with("Usage:")).filter(|l| !l.is_empty()).collect();
        format!("bad arguments: {}", said.join(" ").trim_start_matches("error: "))
    })?;
    let Command::Run(r) = cli.command else { return Err("not a run".into()) };
    Ok(RunShape {
        plugins: r.plugins,
        pids: r.trace.pids,
        command: r.trace.command.is_some(),
        run_as: r.trace.run_as.is_some(),
        flamegraph: r.output.flamegraph.is_some(),
        daemon_flags: r.trace.tenant.is_some()
            || !r.trace.plugin_file.is_empty()
            || !r.trace.cgroup.is_empty()
            || r.trace.follow
            || r.trace.attached_to_stdin
            || r.trace.daemon.is_some(),
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
        assert_eq!(without_client_flags(&typed), ["syscount", "--param", "top=0", "-d", "2s"]);
    }

    #[test]
    fn the_daemon_reads_a_run_as_the_command_line_does() {
        let args: Vec<String> = ["syscount", "-p", "42", "--param", "top=3"].map(String::from).to_vec();
        let shape = parse_run(&args).unwrap();
        assert_eq!(shape, RunShape { plugins: vec!["syscount".into()], pids: vec![42], ..RunShape::default() });
        for flag in ["--tenant={}", "--cgroup=/sys/fs/cgroup/memory", "--plugin-file=x.wasm=/etc/shadow", "--follow"] {
            let sneaky: Vec<String> = ["syscount", flag].map(String::from).to_vec();
            assert!(parse_run(&sneaky).unwrap().daemon_flags, "{flag}");
        }
        let bad: Vec<String> = ["syscount", "--no-such-flag"].map(String::from).to_vec();
        let err = parse_run(&bad).unwrap_err();
        assert!(err.starts_with("bad arguments: unexpected argument '--no-such-flag'"), "{err}");
    }
}

//! `wasmtap daemon`: the service on tokio. It listens on a Unix socket, identifies each
//! client by the socket's peer credentials (never by what the client says), checks what
//! it asks against its tenant's rule, and runs each session as a child `wasmtap run`
//! holding that rule, which writes to the stdout and stderr the client passed with its
//! request (or whose output it relays, for a client that passed none). A client that stops
//! reading holds up only its own run; a client that goes away ends its run.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

use super::cgroup::{Quota, SessionCgroup};
use super::tenant::TenantRule;
use super::wire::{Ask, Frame, Kind, Passed, Reply, Request, SessionInfo, PROTOCOL};
use crate::package::trust::{Origin, Trust};
use crate::package::Package;
use crate::policy::{PluginRule, Policy, Scope, Verdict};
use crate::sys::creds;

/// How a `run` request's arguments read: what the daemon checks before starting a run.
/// The command line's parser fills it (the daemon does not parse flags by hand).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunShape {
    pub plugins: Vec<String>,
    pub pids: Vec<u32>,
    pub command: bool,
    pub run_as: bool,
    pub flamegraph: bool,
    /// `record -o FILE` (a client sends the file, and forwards no `-o`).
    pub file: bool,
    /// Flags only the daemon sets (`--tenant`, `--follow`, `--attached-to-stdin`, `--cgroup`,
    /// `--plugin-file`, `--export-fd`, `--daemon`).
    pub daemon_flags: bool,
    /// `--trust FILE`: the operator's, never a client's.
    pub trust: bool,
}

/// Reads a `run` request's arguments (the command line's parser).
pub type ParseRun = fn(bool, &[String]) -> Result<RunShape, String>;

/// What `wasmtap daemon` was told.
pub struct Options {
    pub policy: PathBuf,
    /// The trust policy (else the default file, if it exists).
    pub trust: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    /// Where tenants' compiled plugins are kept (`off`: nowhere).
    pub tenant_cache: PathBuf,
    pub parse_run: ParseRun,
}

struct State {
    policy_path: PathBuf,
    policy: Mutex<Arc<Policy>>,
    /// The trust policy's file, if named (else the default file, if it exists).
    trust_path: Option<PathBuf>,
    /// The keys and digests tenants' signed plugins are checked against.
    trust: Mutex<Arc<Trust>>,
    sessions: Mutex<BTreeMap<u64, Session>>,
    /// The latest metrics of each session that exports them, for the daemon's endpoint.
    metrics: Mutex<BTreeMap<u64, Exported>>,
    next_id: AtomicU64,
    parse_run: ParseRun,
    exe: PathBuf,
    tenant_cache: PathBuf,
}

/// What a session's run last sent for the daemon's `/metrics`.
struct Exported {
    user: String,
    snapshot: Option<Arc<crate::export::Snapshot>>,
}

#[derive(Clone)]
struct Session {
    info: SessionInfo,
    /// The run's pid, to stop it.
    run_pid: Option<u32>,
}

/// Read the policy and the trust policy again; both are replaced, or neither.
fn reload(state: &State) -> anyhow::Result<()> {
    let policy = Policy::load(&state.policy_path)?;
    let trust = Trust::for_run(state.trust_path.as_deref())?;
    check_signers(&policy, &trust)?;
    *state.policy.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    *state.trust.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(trust);
    Ok(())
}

/// Every key a tenant's `signed_by` names is one the trust policy has.
fn check_signers(policy: &Policy, trust: &Trust) -> anyhow::Result<()> {
    for (i, t) in policy.tenants.iter().enumerate() {
        let PluginRule::Signed(Some(names)) = &t.plugins else { continue };
        if let Some(name) = names.iter().find(|n| !trust.keys.iter().any(|k| &k.name == *n)) {
            let file = policy.source.as_ref().map_or_else(|| "policy".into(), |p| p.display().to_string());
            anyhow::bail!(
                "{file}:{}: `tenant[{i}].signed_by`: no key `{name}` in the {} (its keys: {})",
                t.line,
                trust.rule,
                trust.keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok(())
}

/// Serve until SIGTERM or SIGINT.
pub fn serve(opts: Options) -> anyhow::Result<()> {
    if creds::uids().1 != 0 {
        anyhow::bail!("wasmtap daemon must run as root: it loads the collectors for everyone");
    }
    let policy = Policy::load(&opts.policy)?;
    let trust = Trust::for_run(opts.trust.as_deref())?;
    check_signers(&policy, &trust)?;
    let socket = opts.socket.clone().unwrap_or_else(|| policy.socket.clone());
    let metrics_listener =
        policy.metrics.as_deref().map(|addr| crate::export::serve::listen_as("daemon.metrics", addr)).transpose()?;
    let exe = std::env::current_exe().context("cannot find the wasmtap executable")?;
    let state = Arc::new(State {
        policy_path: opts.policy.clone(),
        policy: Mutex::new(Arc::new(policy)),
        trust_path: opts.trust.clone(),
        trust: Mutex::new(Arc::new(trust)),
        sessions: Mutex::default(),
        metrics: Mutex::default(),
        next_id: AtomicU64::new(1),
        parse_run: opts.parse_run,
        exe,
        tenant_cache: opts.tenant_cache.clone(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("wasmtap-daemon")
        .build()
        .context("cannot start the daemon's runtime")?;
    rt.block_on(async move {
        if let Some(listener) = metrics_listener {
            // The daemon's `/metrics`: every exporting session's latest snapshot, its
            // series labelled with the session and its user, and the daemon's own gauges.
            let state = state.clone();
            tokio::spawn(crate::export::serve::serve(listener, move || families(&state)));
        }
        listen(state, socket).await
    })
}

/// The metric families of every exporting session, and the daemon's own.
fn families(state: &State) -> Vec<prometheus::proto::MetricFamily> {
    use crate::export::prom;
    let sessions: Vec<(u64, String)> = state.sessions().iter().map(|(id, s)| (*id, s.info.user.clone())).collect();
    let exported: Vec<(u64, String, Option<Arc<crate::export::Snapshot>>)> =
        state.exported().iter().map(|(id, e)| (*id, e.user.clone(), e.snapshot.clone())).collect();
    let mut by_user: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (id, user) in &sessions {
        let e = by_user.entry(user.clone()).or_default();
        e.0 += 1;
        e.1 += u64::from(exported.iter().any(|(x, _, _)| x == id));
    }
    let gauge = |pick: fn(&(u64, u64)) -> u64| {
        by_user.iter().map(|(user, n)| (vec![("user", user.clone())], pick(n) as f64)).collect::<Vec<_>>()
    };
    // With no session, no gauge family: the encoder refuses a family without series.
    let own = match by_user.is_empty() {
        true => Vec::new(),
        false => vec![
            prom::gauges("wasmtap_daemon_sessions", "Sessions running, by user", gauge(|n| n.0)),
            prom::gauges(
                "wasmtap_daemon_sessions_exported",
                "Sessions whose metrics are on this endpoint, by user",
                gauge(|n| n.1),
            ),
        ],
    };
    // Rendering happens here, on the scrape: a session's run only sends its snapshot.
    let mut sources = vec![own];
    for (id, user, snapshot) in exported {
        let Some(snapshot) = snapshot else { continue };
        sources.push(prom::families(&snapshot, &[("session", id.to_string()), ("user", user)]));
    }
    prom::merge(sources).0
}

async fn listen(state: Arc<State>, socket: PathBuf) -> anyhow::Result<()> {
    let listener = bind(&socket, &state.policy())?;
    let source = match &state.policy().source {
        Some(p) => p.display().to_string(),
        None => format!("none at {}: root only", state.policy_path.display()),
    };
    eprintln!("wasmtap daemon: listening on {} (policy: {source})", socket.display());
    notify_ready();
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let state = state.clone();
                    tokio::spawn(async move { connection(state, stream).await });
                }
                Err(e) => eprintln!("wasmtap daemon: accept: {e}"),
            },
            _ = hup.recv() => match reload(&state) {
                Ok(()) => eprintln!("wasmtap daemon: policy reloaded from {}", state.policy_path.display()),
                Err(e) => eprintln!("wasmtap daemon: policy not reloaded, the previous one stays: {e:#}"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    // Stop every run; each session relays its report and ends.
    let runs: Vec<u32> = state.sessions().values().filter_map(|s| s.run_pid).collect();
    for pid in runs {
        crate::sys::signal_child(pid, libc::SIGINT);
    }
    for _ in 0..500 {
        if state.sessions().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

/// The socket, created afresh: mode 0660 and the policy's group, or 0666 without one
/// (who may do what is the policy's to say, by the peer's credentials, not the mode's).
fn bind(socket: &Path, policy: &Policy) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if std::os::unix::net::UnixStream::connect(socket).is_ok() {
        anyhow::bail!("another daemon is listening on {}", socket.display());
    }
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket).with_context(|| format!("cannot listen on {}", socket.display()))?;
    let mode = match &policy.socket_group {
        Some(g) => {
            std::os::unix::fs::chown(socket, Some(0), Some(g.id))
                .with_context(|| format!("cannot give {} to group {}", socket.display(), g.name))?;
            0o660
        }
        None => 0o666,
    };
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// `READY=1` to systemd when it started us with `Type=notify`.
fn notify_ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else { return };
    let path = path.to_string_lossy().into_owned();
    let msg = b"READY=1\nSTATUS=serving\n";
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()) {
            let _ = sock.send_to_addr(msg, &addr);
        }
    } else {
        let _ = sock.send_to(msg, &path);
    }
}

impl State {
    fn policy(&self) -> Arc<Policy> {
        self.policy.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn trust(&self) -> Arc<Trust> {
        self.trust.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn exported(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Exported>> {
        self.metrics.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Who is on the other end: from the socket, never from the client's word.
struct Peer {
    uid: u32,
    /// The user's primary group (from the password database, else the socket's).
    gid: u32,
    pid: u32,
    user: String,
    groups: Vec<u32>,
}

async fn connection(state: Arc<State>, stream: UnixStream) {
    let cred = match stream.peer_cred() {
        Ok(c) => c,
        Err(_) => return,
    };
    let (rd, mut wr) = stream.into_split();
    let mut frames = Frames { rd, buf: Vec::new(), fds: Vec::new() };
    let hello = tokio::time::timeout(Duration::from_secs(10), frames.next()).await;
    let ask = match hello {
        Ok(Ok(Some(f))) => match f.message::<Request>() {
            Ok(Request::Hello { protocol, ask }) if protocol == PROTOCOL => ask,
            Ok(Request::Hello { protocol, .. }) => {
                let msg = format!(
                    "this daemon speaks protocol {PROTOCOL}, the client {protocol}: use the same wasmtap version"
                );
                return refuse(&mut wr, msg).await;
            }
            Ok(_) => return refuse(&mut wr, "the first message must be `hello`".into()).await,
            Err(e) => return refuse(&mut wr, format!("bad request: {e}")).await,
        },
        Ok(Err(e)) => return refuse(&mut wr, format!("bad request: {e}")).await,
        Ok(Ok(None)) => return,
        Err(_) => return refuse(&mut wr, "no hello within 10 s".into()).await,
    };
    let uid = cred.uid();
    let (user, gid, groups) = match creds::user_with_uid(uid) {
        Ok(Some(u)) => (u.name, u.gid, u.groups),
        _ => (uid.to_string(), cred.gid(), vec![cred.gid()]),
    };
    let peer = Peer { uid, gid, pid: cred.pid().unwrap_or(0) as u32, user, groups };
    let policy = state.policy();
    let verdict = policy.verdict(peer.uid, &peer.groups);
    if verdict == Verdict::Refused {
        let msg = format!(
            "user {} (uid {}) may not trace through this host's wasmtap daemon: no tenant of its policy ({}) names the user or its groups",
            peer.user,
            peer.uid,
            policy.source.as_ref().map_or_else(|| "none: root only".into(), |p| p.display().to_string())
        );
        return refuse(&mut wr, msg).await;
    }
    let admin = match &verdict {
        Verdict::Root => true,
        Verdict::Tenant(t) => t.admin,
        Verdict::Refused => false,
    };
    match ask {
        Ask::List { pattern, fds } => {
            let passed = match take_passed(&fds, std::mem::take(&mut frames.fds), None) {
                Ok(PassedFds { output: Some(output), .. }) => output,
                Ok(_) => return refuse(&mut wr, "list: the client passes its stdout and stderr".into()).await,
                Err(msg) => return refuse(&mut wr, msg).await,
            };
            let code = list(&state.exe, pattern, passed).await;
            let _ = write(&mut wr, &Frame::control(&Reply::Exit { code })).await;
        }
        Ask::Sessions => {
            let sessions =
                state.sessions().values().filter(|s| admin || s.info.uid == peer.uid).map(|s| s.info.clone()).collect();
            let _ = write(&mut wr, &Frame::control(&Reply::Sessions { sessions })).await;
        }
        Ask::StopSession { id } => {
            let found = state.sessions().get(&id).cloned();
            match found {
                Some(s) if admin || s.info.uid == peer.uid => {
                    if let Some(pid) = s.run_pid {
                        crate::sys::signal_child(pid, libc::SIGINT);
                    }
                    let _ = write(&mut wr, &Frame::control(&Reply::Exit { code: 0 })).await;
                }
                _ => refuse(&mut wr, format!("no session {id} of user {}", peer.user)).await,
            }
        }
        Ask::Run { args, command_pid, fds, record } => {
            let mut passed = match take_passed(&fds, std::mem::take(&mut frames.fds), command_pid) {
                Ok(p) => p,
                Err(msg) => return refuse(&mut wr, msg).await,
            };
            let sent: Vec<String> = passed.plugins.iter().map(|(a, _)| a.clone()).collect();
            let files = (sent.as_slice(), passed.recording.is_some(), passed.flamegraph.is_some());
            let started = match check_run(&state, &policy, &verdict, &peer, (record, &args), command_pid, files) {
                Ok(run) => run,
                Err(msg) => return refuse(&mut wr, msg).await,
            };
            let sent = std::mem::take(&mut passed.plugins);
            // A copy of at most 64 MiB from the user's file, checked against the tenant's
            // trust before the run compiles any of it: this worker only, briefly.
            let copied = if sent.is_empty() {
                Ok(sent)
            } else {
                tokio::task::block_in_place(|| copy_plugins(sent, started.trust.as_ref()))
            };
            passed.plugins = match copied {
                Ok(p) => p,
                Err(msg) => return refuse(&mut wr, msg).await,
            };
            // The command checked by its pid is still the process the client opened:
            // alive, so its pid is no one else's.
            if passed.command.as_ref().is_some_and(|fd| !crate::sys::fds::pidfd_alive(fd.as_fd())) {
                return refuse(&mut wr, "the -c command ended before its run started".into()).await;
            }
            session(state, peer, args, started, passed, frames, wr).await;
        }
    }
}

/// `wasmtap list [PATTERN]` as root (tracefs is root's), written to the client's own
/// stdout and stderr; its exit code. The pattern is one argument after `--`, never a flag.
/// A listing that takes more than 30 s is ended.
async fn list(exe: &Path, pattern: Option<String>, (out, err): (OwnedFd, OwnedFd)) -> i32 {
    let mut command = tokio::process::Command::new(exe);
    command.arg("list").arg("--").args(pattern).stdin(Stdio::null()).stdout(out).stderr(err).kill_on_drop(true);
    let Ok(mut child) = command.spawn() else { return 2 };
    match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
        Ok(Ok(status)) => status.code().unwrap_or(2),
        _ => {
            let _ = child.start_kill();
            2
        }
    }
}

/// The descriptors a client passed with its hello, checked.
struct PassedFds {
    /// Its stdout and stderr, for the run to write to directly.
    output: Option<(OwnedFd, OwnedFd)>,
    /// A pidfd of its `-c` command.
    command: Option<OwnedFd>,
    /// Plugin files it opened, by the argument naming each (once read, their copies).
    plugins: Vec<(String, OwnedFd)>,
    /// The recording and the flame graph it created, for the run to write.
    recording: Option<OwnedFd>,
    flamegraph: Option<OwnedFd>,
}

/// The largest plugin file a client may send.
const PLUGIN_MAX: u64 = 64 << 20;

/// Copy each plugin file a client sent into a sealed memfd: read through its descriptor
/// (what the user could read; a descriptor opened only as a path reads nothing), at most
/// [`PLUGIN_MAX`] bytes, and never changed afterwards under the run that loads it.
fn copy_plugins(sent: Vec<(String, OwnedFd)>, trust: Option<&Trust>) -> Result<Vec<(String, OwnedFd)>, String> {
    use std::io::{Read, Seek, Write};
    let mut copies = Vec::new();
    for (name, fd) in sent {
        let fail = |why: String| format!("plugin file {name}: {why}");
        let mut file = std::fs::File::from(fd);
        let _ = file.rewind();
        // Read once: the bytes checked are the bytes the sealed copy holds.
        let mut bytes = Vec::new();
        (&mut file).take(PLUGIN_MAX + 1).read_to_end(&mut bytes).map_err(|e| fail(format!("cannot read it: {e}")))?;
        if bytes.len() as u64 > PLUGIN_MAX {
            return Err(fail(format!("larger than {} MiB", PLUGIN_MAX >> 20)));
        }
        if let Some(trust) = trust {
            let package = Package::parse(&bytes).map_err(|e| format!("plugin `{name}` is not a valid package: {e}"))?;
            trust.admit(&package, Origin::File).map_err(|why| format!("plugin `{name}` {why}"))?;
        }
        let mut copy = crate::sys::memfd("wasmtap-plugin").map_err(|e| fail(e.to_string()))?;
        copy.write_all(&bytes).map_err(|e| fail(e.to_string()))?;
        crate::sys::seal(&copy).map_err(|e| fail(e.to_string()))?;
        copies.push((name, OwnedFd::from(copy)));
    }
    Ok(copies)
}

/// Match the descriptors that came with the hello to the names it gave them, and check
/// each: outputs the run may write (`check_output_fd`), a pidfd of `command_pid`.
fn take_passed(names: &[Passed], fds: Vec<OwnedFd>, command_pid: Option<u32>) -> Result<PassedFds, String> {
    use crate::sys::fds::{check_output_fd, pidfd_pid};
    if names.len() != fds.len() {
        return Err(format!("the hello names {} descriptors, and {} came with it", names.len(), fds.len()));
    }
    let (mut out, mut err, mut command, mut plugins) = (None, None, None, Vec::new());
    let (mut recording, mut flamegraph) = (None, None);
    for (name, fd) in names.iter().zip(fds) {
        let slot = match name {
            Passed::Stdout => &mut out,
            Passed::Stderr => &mut err,
            Passed::Command => &mut command,
            Passed::Recording => &mut recording,
            Passed::Flamegraph => &mut flamegraph,
            Passed::Plugin(arg) => {
                if plugins.iter().any(|(a, _)| a == arg) {
                    return Err(format!("the hello passes plugin file {arg} twice"));
                }
                plugins.push((arg.clone(), fd));
                continue;
            }
        };
        if slot.replace(fd).is_some() {
            return Err(format!("the hello passes its {name:?} twice"));
        }
    }
    for (what, fd) in [("stdout", &out), ("stderr", &err), ("recording", &recording), ("flame graph", &flamegraph)] {
        if let Some(fd) = fd {
            check_output_fd(fd.as_fd()).map_err(|why| format!("the run cannot write to your {what}: {why}"))?;
        }
    }
    if let Some(fd) = &command {
        if command_pid.is_none() || pidfd_pid(fd.as_fd()) != command_pid {
            return Err("the command's pidfd is not of the command the hello names".into());
        }
    }
    let output = match (out, err) {
        (Some(o), Some(e)) => Some((o, e)),
        (None, None) => None,
        _ => return Err("the hello passes one of stdout and stderr: both or neither".into()),
    };
    Ok(PassedFds { output, command, plugins, recording, flamegraph })
}

/// A run the daemon agreed to: the child's arguments and the rule it holds to.
struct Agreed {
    argv: Vec<String>,
    rule: String,
    /// What a tenant's plugin files must satisfy (none for root's run: its own policy).
    trust: Option<Trust>,
    /// The cgroup limits of a tenant's run (none for root's).
    quota: Option<Quota>,
    /// Whether its metrics go on the daemon's endpoint: root's always, a tenant's if its
    /// rule says `metrics = true`.
    metrics: bool,
}

/// Check a run request against the policy; the refusal names the rule.
fn check_run(
    state: &State,
    policy: &Policy,
    verdict: &Verdict<'_>,
    peer: &Peer,
    (record, args): (bool, &[String]),
    command_pid: Option<u32>,
    (sent, recording, flamegraph): (&[String], bool, bool),
) -> Result<Agreed, String> {
    let shape = (state.parse_run)(record, args)?;
    if record && (shape.file || !recording) {
        return Err("record through the daemon: the client creates the recording and sends it".into());
    }
    if shape.daemon_flags {
        return Err(
            "flags --tenant, --follow, --attached-to-stdin, --cgroup, --plugin-file, --export-fd, --executor-fd and --daemon are the daemon's to set"
                .into()
        );
    }
    if shape.trust {
        return Err(
            "--trust: through the daemon, plugins are trusted by the operator's policy, not the client's".into()
        );
    }
    if shape.command {
        return Err("-c is started by the client, as its user: use a wasmtap of the daemon's version".into());
    }
    if shape.run_as {
        return Err("--run-as: through the daemon, a command runs as the user who starts it".into());
    }
    if shape.flamegraph && !flamegraph {
        return Err("--flamegraph: the client creates the flame graph and sends it".into());
    }
    let where_ = |line: usize, i: usize| {
        let file = policy.source.as_ref().map_or_else(|| "policy".into(), |p| p.display().to_string());
        format!("tenant[{i}] of {file}:{line}")
    };
    let tenant = match verdict {
        Verdict::Tenant(t) => Some((*t, policy.tenants.iter().position(|x| std::ptr::eq(x, *t)).unwrap_or(0))),
        _ => None,
    };
    let mut argv = vec![if record { "record" } else { "run" }.to_string()];
    argv.extend(args.iter().cloned());
    let mut quota = None;
    let mut trust = None;
    let metrics = policy.metrics.is_some() && tenant.is_none_or(|(t, _)| t.metrics);
    let rule = match tenant {
        None => {
            // Root's run holds to the daemon's trust policy, as root's own runs do.
            if let Some(path) = &state.trust_path {
                argv.extend(["--trust".to_string(), path.display().to_string()]);
            }
            "root".to_string()
        }
        Some((t, i)) => {
            let rule = where_(t.line, i);
            let is_file = |p: &str| p.contains('/') || p.ends_with(".wasm");
            let vetted_only = t.plugins == PluginRule::Vetted;
            let names_vetted = t.plugins != PluginRule::Any;
            let installed = crate::plugin::find::installed();
            let refused = |p: &&String| match is_file(p) {
                true => vetted_only || !sent.contains(p),
                false => names_vetted && !installed.contains(p),
            };
            if let Some(p) = shape.plugins.iter().find(refused) {
                let why = match (vetted_only, is_file(p)) {
                    (true, _) => {
                        format!("{rule} lets user {} run vetted plugins only ({})", peer.user, installed.join(", "))
                    }
                    (false, false) => format!(
                        "{rule} lets user {} name vetted plugins only ({}); others run from signed files",
                        peer.user,
                        installed.join(", ")
                    ),
                    (false, true) => "a plugin file must come with the request (the wasmtap client sends it)".into(),
                };
                return Err(format!("plugin `{p}`: {why}"));
            }
            if shape.plugins.len() > t.quotas.plugins as usize {
                return Err(format!(
                    "{} plugins in one session, more than the {} {rule} allows",
                    shape.plugins.len(),
                    t.quotas.plugins
                ));
            }
            let mine = state.sessions().values().filter(|s| s.info.uid == peer.uid).count();
            if mine >= t.quotas.sessions as usize {
                return Err(format!(
                    "user {} has {mine} sessions, the most {rule} allows; end one with `wasmtap stop ID`",
                    peer.user
                ));
            }
            for &pid in &shape.pids {
                check_pid(pid, &t.scope, peer, &rule)?;
            }
            let probes: Vec<_> = t.probes.iter().cloned().collect();
            let plugin_trust = match &t.plugins {
                PluginRule::Vetted => state.trust().narrowed(rule.clone(), false, Some(&[])),
                PluginRule::Signed(keys) => state.trust().narrowed(rule.clone(), false, keys.as_deref()),
                PluginRule::Any => state.trust().narrowed(rule.clone(), true, None),
            };
            let tr = TenantRule::new(
                (&peer.user, peer.uid, peer.gid),
                rule.clone(),
                &t.scope,
                &probes,
                t.kernel_addresses,
                &t.quotas,
                plugin_trust.clone(),
            );
            trust = Some(plugin_trust);
            argv.push("--tenant".into());
            argv.push(serde_json::to_string(&tr).map_err(|e| e.to_string())?);
            let plugins = shape.plugins.len().max(1) as u64;
            quota = Some(Quota::for_plugins(plugins, u64::from(t.quotas.memory_mib), u64::from(t.quotas.cpu_percent)));
            rule
        }
    };
    if let Some(pid) = command_pid {
        if owner_of(pid) != Some(peer.uid) || crate::sys::parent_of(pid) != Some(peer.pid) {
            return Err(format!("process {pid} is not a command user {} started", peer.user));
        }
        argv.extend(["-p".to_string(), pid.to_string(), "--follow".to_string()]);
    }
    argv.push("--attached-to-stdin".into());
    Ok(Agreed { argv, rule, quota, trust, metrics })
}

/// `-p PID` of a tenant: a process within its scope, and never pid 1.
fn check_pid(pid: u32, scope: &Scope, peer: &Peer, rule: &str) -> Result<(), String> {
    if pid == 1 {
        return Err(format!("-p 1: pid 1 is the system's, which {rule} does not let user {} trace", peer.user));
    }
    match scope {
        Scope::All => Ok(()),
        Scope::Own => match owner_of(pid) {
            Some(uid) if uid == peer.uid => Ok(()),
            Some(uid) => Err(format!(
                "-p {pid}: process {pid} runs as uid {uid}, and {rule} (scope \"own\") lets user {} trace only its own processes",
                peer.user
            )),
            None => Err(format!("-p {pid}: no process with pid {pid}")),
        },
        Scope::Cgroups(dirs) => {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let path = cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("");
            let root = crate::collect::cgroup::mount_point().unwrap_or_default();
            let full = root.join(path.trim_start_matches('/'));
            if dirs.iter().any(|d| full.starts_with(d)) {
                Ok(())
            } else {
                Err(format!(
                    "-p {pid}: process {pid} is in cgroup {}, outside the cgroups {rule} delegates to user {}",
                    full.display(),
                    peer.user
                ))
            }
        }
    }
}

/// The real uid a process runs as (its effective uid too must be the same).
fn owner_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let ids: Vec<u32> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    match ids[..] {
        // A process whose effective uid differs (a setuid program) is no one's to trace.
        [real, effective, ..] => Some(if real == effective { real } else { u32::MAX }),
        _ => None,
    }
}

/// One run: started, its output written to the client's own stdout and stderr (or
/// relayed, if the client passed none), ended.
async fn session(
    state: Arc<State>,
    peer: Peer,
    args: Vec<String>,
    agreed: Agreed,
    passed: PassedFds,
    mut frames: Frames,
    mut wr: OwnedWriteHalf,
) {
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    let info = SessionInfo {
        id,
        user: peer.user.clone(),
        uid: peer.uid,
        pid: peer.pid,
        started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        args,
    };
    state.sessions().insert(id, Session { info, run_pid: None });
    let _forget = Forget { state: state.clone(), id };
    // A tenant's run goes into a cgroup of its own, limited by the quotas: the kernel
    // holds it to them. The run joins it first thing, before it starts a thread (a
    // real-time thread could not join a v1 cpu cgroup later).
    let mut argv = agreed.argv.clone();
    let _cgroup = match agreed.quota {
        Some(quota) => match SessionCgroup::create(id, quota) {
            Ok(cg) => {
                for dir in cg.dirs() {
                    argv.push("--cgroup".into());
                    argv.push(dir.display().to_string());
                }
                Some(cg)
            }
            Err(e) => return refuse(&mut wr, format!("cannot hold the run to its quotas in a cgroup: {e}")).await,
        },
        None => None,
    };
    let (ours, theirs) = match std::os::unix::net::UnixStream::pair() {
        Ok(pair) => pair,
        Err(e) => return refuse(&mut wr, format!("cannot start the run: {e}")).await,
    };
    let PassedFds { output, plugins, recording, flamegraph, .. } = passed;
    let relaying = output.is_none();
    let (stdout, stderr) = match output {
        Some((o, e)) => (Stdio::from(o), Stdio::from(e)),
        None => (Stdio::piped(), Stdio::piped()),
    };
    let mut command = tokio::process::Command::new(&state.exe);
    // The plugin files sent, as descriptors the run inherits (and only that run).
    // The plugin files and output files sent, as descriptors the run inherits (and only
    // that run).
    let mut flags = Vec::new();
    let mut fds = Vec::new();
    for (name, fd) in plugins {
        flags.push(("--plugin-file", format!("{name}=/proc/self/fd/")));
        fds.push(fd);
    }
    // The run's metrics, read by a thread of their own for the daemon's endpoint.
    let export = match agreed.metrics {
        true => match pipe() {
            Ok((read, write)) => Some((read, write)),
            Err(e) => return refuse(&mut wr, format!("cannot start the run: {e}")).await,
        },
        false => None,
    };
    let export_read = export.map(|(read, write)| {
        flags.push(("--export-fd", String::new()));
        fds.push(write);
        read
    });
    for (flag, fd) in [("--recording-fd", recording), ("--flamegraph-fd", flamegraph)] {
        if let Some(fd) = fd {
            flags.push((flag, String::new()));
            fds.push(fd);
        }
    }
    let numbers = crate::sys::fds::pass_to_child(&mut command, fds);
    for ((flag, prefix), n) in flags.into_iter().zip(numbers) {
        argv.push(flag.into());
        argv.push(format!("{prefix}{n}"));
    }
    let spawned = command
        .env(crate::service::executor::TENANT_CACHE_VAR, &state.tenant_cache)
        .args(&argv)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn();
    // The descriptors the run inherited are closed here: the end of the run is the end
    // of its metrics.
    drop(command);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return refuse(&mut wr, format!("cannot start the run: {e}")).await,
    };
    if let Some(read) = export_read {
        state.exported().insert(id, Exported { user: peer.user.clone(), snapshot: None });
        let state = state.clone();
        tokio::task::spawn_blocking(move || read_metrics(&state, id, read));
    }
    let run_pid = child.id();
    if let Some(s) = state.sessions().get_mut(&id) {
        s.run_pid = run_pid;
    }
    let welcome = Reply::Welcome { protocol: PROTOCOL, session: id, rule: agreed.rule };
    if write(&mut wr, &Frame::control(&welcome)).await.is_err() {
        return;
    }
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let attached = ours.set_nonblocking(true).ok().and_then(|_| UnixStream::from_std(ours).ok());
    let mut attached = attached;
    let (mut out_open, mut err_open, mut client_open) = (out.is_some(), err.is_some(), true);
    // Writing to the client's own descriptors, the run is over when it exits.
    let mut exited = None;
    // Buffers only to relay a run's output (a client that passed no descriptors).
    let buf = || if relaying { vec![0u8; 64 << 10] } else { Vec::new() };
    let (mut obuf, mut ebuf) = (buf(), buf());
    let mut abuf = [0u8; 1];
    // Once the client is gone, the run has this long to end on SIGTERM before SIGKILL.
    let mut kill_at: Option<tokio::time::Instant> = None;
    while out_open || err_open || (!relaying && exited.is_none()) {
        if !client_open && kill_at.is_none() {
            kill_at = Some(tokio::time::Instant::now() + Duration::from_secs(5));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)), if kill_at.is_some() => {
                let _ = child.start_kill();
                break;
            },
            status = child.wait(), if !relaying => exited = Some(status),
            n = async { out.as_mut().expect("guarded").read(&mut obuf).await }, if out_open => match n {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => if write(&mut wr, &Frame { kind: Kind::Stdout, payload: obuf[..n].to_vec() }).await.is_err() {
                    client_open = false;
                    stop(run_pid, libc::SIGTERM);
                },
            },
            n = async { err.as_mut().expect("guarded").read(&mut ebuf).await }, if err_open => match n {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => if write(&mut wr, &Frame { kind: Kind::Stderr, payload: ebuf[..n].to_vec() }).await.is_err() {
                    client_open = false;
                    stop(run_pid, libc::SIGTERM);
                },
            },
            n = async { attached.as_mut().expect("guarded").read(&mut abuf).await }, if attached.is_some() => {
                attached = None;
                if matches!(n, Ok(1)) && client_open && write(&mut wr, &Frame::control(&Reply::Attached)).await.is_err() {
                    client_open = false;
                    stop(run_pid, libc::SIGTERM);
                }
            },
            f = frames.next(), if client_open => match f {
                Ok(Some(f)) if f.message::<Request>() == Ok(Request::Stop) => stop(run_pid, libc::SIGINT),
                Ok(Some(_)) => {}
                // The client is gone, or spoke nonsense: its run ends.
                Ok(None) | Err(_) => {
                    client_open = false;
                    stop(run_pid, libc::SIGTERM);
                }
            },
        }
    }
    let status = match exited {
        Some(status) => status,
        None => tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the run did not end"))),
    };
    let code = match status {
        Ok(status) => status.code().unwrap_or(2),
        _ => {
            let _ = child.start_kill();
            2
        }
    };
    if client_open {
        let _ = write(&mut wr, &Frame::control(&Reply::Exit { code })).await;
    }
    drop((obuf, ebuf, frames, wr));
    // A daemon lives long: what a session freed goes back to the system now.
    crate::sys::trim_heap();
}

fn stop(pid: Option<u32>, signal: libc::c_int) {
    if let Some(pid) = pid {
        crate::sys::signal_child(pid, signal);
    }
}

/// A pipe, both ends close-on-exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = std::io::pipe()?;
    Ok((read.into(), write.into()))
}

/// Read a session's metrics until its run ends, keeping the latest snapshot. What the run
/// writes is untrusted (it is the tenant's user by then): a frame over the bound or that
/// does not decode ends the session's metrics, and the rest is read and thrown away, so
/// that the run never waits on a full pipe.
fn read_metrics(state: &State, id: u64, read: OwnedFd) {
    let mut file = std::fs::File::from(read);
    let why = loop {
        match crate::export::wire::read_frame(&mut file) {
            Ok(Some(payload)) => match crate::export::wire::decode(&payload) {
                Ok(snapshot) => match state.exported().get_mut(&id) {
                    Some(e) => e.snapshot = Some(Arc::new(snapshot)),
                    None => break None,
                },
                Err(e) => break Some(e),
            },
            Ok(None) => return,
            Err(e) => break Some(e.to_string()),
        }
    };
    if let Some(why) = why {
        eprintln!("wasmtap daemon: session {id}: its metrics are left out: {why}");
        state.exported().remove(&id);
    }
    let _ = std::io::copy(&mut file, &mut std::io::sink());
}

/// Removes a session from the list when it ends, however it ends.
struct Forget {
    state: Arc<State>,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.state.sessions().remove(&self.id);
        self.state.exported().remove(&self.id);
    }
}

async fn refuse(wr: &mut OwnedWriteHalf, message: String) {
    let _ = write(wr, &Frame::control(&Reply::Error { message })).await;
    let _ = wr.shutdown().await;
}

async fn write(wr: &mut OwnedWriteHalf, frame: &Frame) -> std::io::Result<()> {
    wr.write_all(&frame.encode()).await
}

/// Frames from a client, bounded: a frame over the limit is an error before it is buffered.
/// Descriptors passed along (`SCM_RIGHTS`) are kept, at most [`MAX_FDS`](crate::sys::fds::MAX_FDS).
struct Frames {
    rd: OwnedReadHalf,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Frames {
    async fn next(&mut self) -> anyhow::Result<Option<Frame>> {
        loop {
            if let Some((frame, used)) = Frame::decode(&self.buf)? {
                self.buf.drain(..used);
                return Ok(Some(frame));
            }
            let mut chunk = [0u8; 16 << 10];
            let stream: &UnixStream = self.rd.as_ref();
            stream.readable().await?;
            let got = stream
                .try_io(tokio::io::Interest::READABLE, || crate::sys::fds::recv_with_fds(stream.as_fd(), &mut chunk));
            let (n, fds) = match got {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            };
            self.fds.extend(fds);
            if self.fds.len() > crate::sys::fds::MAX_FDS {
                anyhow::bail!("more than {} descriptors passed", crate::sys::fds::MAX_FDS);
            }
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

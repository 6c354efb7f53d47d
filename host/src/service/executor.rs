//! A tenant's run in two processes. The daemon starts the run as root, in the session's
//! cgroup; that process keeps the *collectors* and starts the *executor*: the same
//! program, as the tenant's user from its first instruction (no capability,
//! `no_new_privs`, undumpable, killed with its parent), which loads the plugins, plans
//! what they need and sends the plan over a socket pair. The collectors' side checks the
//! plan as it would any hostile input (the executor ran plugin code to make it): every
//! probe's class against the tenant's rule, every tracepoint's id against tracefs, every
//! uprobe's binary readable by the user, kernel stacks only with the right, its filters
//! narrowed to the scope. Then it loads and attaches the collectors and hands the
//! executor a ring in shared memory ([`crate::sys::shm`]), on which the collectors'
//! records arrive in chunks, the kernel aggregations' maps, and, where the rule allows
//! kernel addresses, a copy of `/proc/kallsyms`. From then on it drains the collectors
//! into that ring, one eventfd wakeup per chunk, and answers the executor's questions:
//! the counters, stop, and the end.
//!
//! So plugin code never runs in a process that holds a privilege, and the drain and the
//! plugins each have a core. What the executor could do if it escaped wasmtime is what
//! its user can: read its own session's events and maps, and ask the collectors' side
//! what any plugin could ask.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use wasmtap_abi::Kind;

use super::tenant::TenantRule;
use crate::accounting::{CollectorCost, KernelCounters};
use crate::clock::Clock;
use crate::collect::agg_maps::{KernelValues, SiteAttach, SiteConfig, ACTION_BYTES};
use crate::collect::live::{EventQuota, KernelFilter, Live, LiveConfig};
use crate::collect::map_sizes::MapSizes;
use crate::collect::overload;
use crate::collect::recording::RecordingError;
use crate::collect::source::{EventSource, Next, SourceEnd};
use crate::collect::table::ProbeTable;
use crate::collect::tracefs::Format;
use crate::collect::Chunk;
use crate::sys::shm::{Handles, ShmRing};

/// Bytes of the shared ring: beside the collectors' own rings and the 12 MiB queue
/// before it, a plugin held up for a deadline's time loses nothing at a million events
/// a second.
pub const RING_BYTES: usize = 8 << 20;
/// The largest message either side reads (a plan with thousands of probes is a few MiB).
const MESSAGE_MAX: u32 = 16 << 20;
/// The lowest descriptor number the executor may find its socket at: above every one
/// the daemon passes the run (from 100 up), see [`socket_number`].
const EXECUTOR_FD_MIN: i32 = 100;

/// What the plugins need, as the executor sends it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    kinds: Vec<u16>,
    filter: KernelFilter,
    table: ProbeTable,
    aggs: Vec<Site>,
    agg_filter: KernelFilter,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Site {
    site: u32,
    attach: SiteAttach,
    actions: Vec<Vec<u8>>,
    flags: u32,
}

impl Plan {
    /// The plan of a run's collectors, to send.
    pub fn of(config: &LiveConfig) -> Plan {
        Plan {
            kinds: config.kinds.iter().map(|k| *k as u16).collect(),
            filter: config.filter.clone(),
            table: config.table.clone(),
            aggs: config
                .aggs
                .iter()
                .map(|s| Site {
                    site: s.site,
                    attach: s.attach.clone(),
                    actions: s.actions.iter().map(|a| a.to_vec()).collect(),
                    flags: s.flags,
                })
                .collect(),
            agg_filter: config.agg_filter.clone(),
        }
    }
}

/// What the executor sends before the collectors start: questions it could not answer as
/// its user, then its plan.
#[derive(Debug, Serialize, Deserialize)]
enum Before {
    /// A tracepoint's format (tracefs is root's): its fields, for a plugin's schema,
    /// filters and kernel aggregations, and a syscall's argument names.
    Format {
        category: String,
        name: String,
    },
    /// The tracepoints matching a pattern (`probes.expand`).
    List {
        pattern: String,
    },
    Plan(Box<Plan>),
}

/// The most formats one run may ask for: more than the tracepoints a run may attach.
const FORMATS_MAX: usize = 4096;

/// The collectors' answer to a plan.
#[derive(Debug, Serialize, Deserialize)]
enum Ready {
    /// Attached; the descriptors came along: the ring's memory and wakeup, then the five
    /// aggregation maps if `values`, then the kernel's symbols if `kallsyms`.
    Started { values: bool, kallsyms: bool },
    /// Refused or failed, in the words the user reads.
    Refused(String),
}

#[derive(Debug, Serialize, Deserialize)]
enum Ask {
    Counters,
    Stop,
    /// The stream ended: the final counters.
    Finish,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    kernel: KernelCounters,
    /// What the collectors' side has to say (the overload guard), once each.
    notices: Vec<String>,
    ended: Option<Ended>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Ended {
    ring_bytes: u64,
    queue_peak_bytes: u64,
    collectors: Option<CollectorCost>,
}

fn send<T: Serialize>(mut s: impl Write, v: &T) -> io::Result<()> {
    let json = serde_json::to_vec(v).map_err(io::Error::other)?;
    let mut frame = (json.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&json);
    s.write_all(&frame)
}

/// The next message, or `None` when the other side closed the socket between messages.
fn recv<T: for<'de> Deserialize<'de>>(mut s: impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        r => r?,
    }
    let len = u32::from_le_bytes(len);
    if len > MESSAGE_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message of {len} bytes")));
    }
    let mut json = vec![0u8; len as usize];
    s.read_exact(&mut json)?;
    serde_json::from_slice(&json).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

// ---------------------------------------------------------------------------------------
// The collectors' side.

/// What the collectors' side of a tenant's run needs besides the rule.
pub struct CollectorOptions {
    pub max_kernel_cpu: Option<u32>,
    pub events_per_sec: Option<u64>,
}

/// Be the collectors' side of a tenant's run: start the executor with this process's own
/// arguments, serve it, and return its exit code (it reports to the user; this side
/// writes only what the executor cannot: its own failure).
pub fn collect(tenant: &TenantRule, opts: CollectorOptions) -> anyhow::Result<i32> {
    let (mut ours, theirs) = UnixStream::pair().context("cannot make the executor's socket")?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let number = socket_number();
    args.push("--executor-fd".into());
    args.push(number.to_string().into());
    let exe = std::env::current_exe().context("cannot find this program to start the executor")?;
    let base = std::env::var_os(TENANT_CACHE_VAR).unwrap_or_else(|| TENANT_CACHE.into());
    let cache = match tenant_cache(Path::new(&base), tenant.uid, tenant.gid) {
        Ok(Some(dir)) => dir.into_os_string(),
        Ok(None) => "off".into(),
        Err(e) => {
            eprintln!("wasmtap: warning: plugins are compiled on every run: {e}");
            "off".into()
        }
    };
    let mut child = crate::sys::spawn_executor(&exe, &args, (tenant.uid, tenant.gid), &cache, theirs.into(), number)
        .context("cannot start the executor")?;
    let served = serve(&mut ours, child.id(), tenant, &opts);
    if let Err(e) = &served {
        // The executor is told nothing more; it ends when the socket closes.
        eprintln!("wasmtap: error: {e:#}");
        let _ = child.kill();
    }
    drop(ours);
    let status = child.wait().context("cannot wait for the executor")?;
    Ok(match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
        (Some(code), _) => code,
        (None, Some(sig)) => {
            eprintln!(
                "wasmtap: error: the run's executor was killed by signal {sig}{}",
                if sig == libc::SIGKILL { " (over its session's memory limit?)" } else { "" }
            );
            2
        }
        _ => 2,
    })
}

/// Tracepoint `category:name`'s format, read as root. A format describes the kernel,
/// not anyone's events (`wasmtap list` shows any user the tracepoints); whether the
/// tenant may attach the tracepoint is the plan's check. The names are the executor's
/// and may be anything: each must name one directory of tracefs (`read_format`).
fn format_of(category: &str, name: &str) -> Result<Format, String> {
    crate::collect::tracefs::ensure_mounted();
    let root = Path::new(crate::collect::tracefs::ROOT);
    crate::collect::tracefs::lookup(root, category, name).map_err(|e| e.to_string())
}

/// Where tenants' compiled plugins are kept unless the daemon says otherwise
/// (`--tenant-cache`), and the variable through which it tells each run.
pub const TENANT_CACHE: &str = "/var/cache/wasmtap/tenants";
pub const TENANT_CACHE_VAR: &str = "WASMTAP_TENANT_CACHE";

/// Tenant `uid`'s directory of compiled plugins under `base` (`off`: none), made here as
/// root: `base` root's and writable by root alone (so no one else can put a name in
/// it), the directory the tenant's own (mode 0700). The executor, running as the
/// tenant, uses it as any user's run uses its own cache: only a directory that is its
/// own, only entries whose checksum holds. What a tenant could plant there runs in its
/// own executor, with nothing a process of its own could not have.
fn tenant_cache(base: &Path, uid: u32, gid: u32) -> Result<Option<PathBuf>, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if base.as_os_str() == "off" || base.as_os_str().is_empty() {
        return Ok(None);
    }
    let name = |p: &Path| p.display().to_string();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(base)
        .map_err(|e| format!("cannot make {}: {e}", name(base)))?;
    let meta = std::fs::symlink_metadata(base).map_err(|e| format!("{}: {e}", name(base)))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(format!("{} is not a directory of root's that only root may write", name(base)));
    }
    let dir = base.join(uid.to_string());
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => std::os::unix::fs::lchown(&dir, Some(uid), Some(gid)).map_err(|e| format!("{}: {e}", name(&dir)))?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", name(&dir))),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", name(&dir)))?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(format!("{} is not a directory of uid {uid}'s", name(&dir)));
    }
    // Its mode is its owner's business: the cache itself refuses a directory others
    // may write.
    Ok(Some(dir))
}

/// A descriptor number above every one this process has open (the descriptors the
/// daemon passed the run, which the executor inherits at their numbers).
fn socket_number() -> i32 {
    let open = std::fs::read_dir("/proc/self/fd").into_iter().flatten().flatten();
    let highest = open.filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).max().unwrap_or(0);
    (highest + 1).max(EXECUTOR_FD_MIN)
}

fn serve(sock: &mut UnixStream, executor: u32, tenant: &TenantRule, opts: &CollectorOptions) -> anyhow::Result<()> {
    let mut formats = 0;
    let plan: Plan = loop {
        match recv(&mut *sock) {
            Ok(Some(Before::Plan(plan))) => break *plan,
            Ok(Some(Before::Format { category, name })) => {
                formats += 1;
                let answer: Result<Format, String> = match formats > FORMATS_MAX {
                    true => Err(format!("more than {FORMATS_MAX} tracepoint formats asked for")),
                    false => format_of(&category, &name),
                };
                send(&mut *sock, &answer).context("cannot answer the executor")?;
            }
            Ok(Some(Before::List { pattern })) => {
                formats += 1;
                let answer: Result<Vec<String>, String> = match formats > FORMATS_MAX {
                    true => Err(format!("more than {FORMATS_MAX} questions about tracepoints")),
                    false => crate::collect::tracefs::tracepoint_names(&pattern),
                };
                send(&mut *sock, &answer).context("cannot answer the executor")?;
            }
            // It ended before planning: it said why itself.
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let _ = refuse(sock, format!("the executor's plan is malformed: {e}"));
                return Ok(());
            }
            Err(e) => return Err(e).context("cannot read the executor's plan"),
        }
    };
    let mut config = match check(plan, tenant) {
        Ok(c) => c,
        Err(why) => return refuse(sock, why),
    };
    config.map_sizes = MapSizes::from_env().map_err(|e| anyhow::anyhow!("{e}"))?;
    config.quota = Some(EventQuota { per_sec: tenant.cap_events(opts.events_per_sec) });
    config.executor_tgid = Some(executor);
    let meter = match opts.max_kernel_cpu {
        Some(_) => Some(overload::Meter::spawn()?),
        None => None,
    };
    config.meter_tgid = meter.as_ref().map(overload::Meter::pid);
    let (mut live, rx) = match Live::start(&config) {
        Ok(started) => started,
        Err(e) => return refuse(sock, e.to_string()),
    };
    let values = live.take_values();
    let (ring, handles) = ShmRing::create(RING_BYTES).context("cannot make the executor's event ring")?;
    let kallsyms = match tenant.kernel_addresses && config.table.has_kernel_stacks() {
        true => Some(kallsyms_copy().context("cannot copy the kernel's symbols")?),
        false => None,
    };
    let mut fds = vec![handles.memory, handles.wake];
    if let Some(v) = &values {
        fds.extend(v.fds().context("cannot hand over the aggregation maps")?);
    }
    let ready = Ready::Started { values: values.is_some(), kallsyms: kallsyms.is_some() };
    fds.extend(kallsyms);
    let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    crate::sys::fds::send_with_fds(sock.as_fd(), b"F", &borrowed).context("cannot hand the executor its ring")?;
    send(&mut *sock, &ready)?;
    drop(borrowed);
    drop(fds);
    let guard = match (meter, opts.max_kernel_cpu) {
        (Some(meter), Some(limit)) => Some(overload::Guard::start(meter, live.programs(), limit)?),
        _ => None,
    };
    let ring_bytes = live.ring_bytes() + ring.data_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let shared =
        Arc::new(Shared { live: Mutex::new(live), notices: Mutex::new(Vec::new()), gone: AtomicBool::new(false) });
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<Ended>();
    let control = {
        let (shared, stop) = (shared.clone(), stop.clone());
        let sock = sock.try_clone()?;
        std::thread::Builder::new()
            .name("wasmtap-control".into())
            .spawn(move || answer(sock, &shared, &stop, ended_rx))
            .context("cannot start the executor's control thread")?
    };
    let (peak, collectors) = forward(rx, ring, &shared, &stop, guard);
    let _ = ended_tx.send(Ended { ring_bytes, queue_peak_bytes: peak, collectors });
    let _ = control.join();
    Ok(())
}

/// What the forwarding loop and the control thread share.
struct Shared {
    live: Mutex<Live>,
    notices: Mutex<Vec<String>>,
    /// The executor closed its socket: no one reads the ring any more.
    gone: AtomicBool,
}

fn refuse(sock: &mut UnixStream, why: String) -> anyhow::Result<()> {
    crate::sys::fds::send_with_fds(sock.as_fd(), b"F", &[])?;
    send(sock, &Ready::Refused(why))?;
    Ok(())
}

/// Move chunks from the collectors' queue into the executor's ring until the stream
/// ends: stop the collectors when asked (a signal, the executor, the overload guard).
/// Returns the queue's peak and the collectors' measured cost.
fn forward(
    rx: crate::collect::live::ChunkReceiver,
    mut ring: ShmRing,
    shared: &Shared,
    stop: &AtomicBool,
    guard: Option<overload::Guard>,
) -> (u64, Option<CollectorCost>) {
    let mut stopped = false;
    let mut broken = false;
    loop {
        if !stopped {
            let (why, overloaded) = match guard.as_ref().and_then(overload::Guard::poll) {
                Some(overload::Notice::Overloaded(why)) => (Some(why), true),
                Some(overload::Notice::Unmeasured(why)) => (Some(why), false),
                None => (None, false),
            };
            if let Some(why) = why {
                shared.notices.lock().unwrap_or_else(|e| e.into_inner()).push(why);
            }
            stop.fetch_or(overloaded, Ordering::Relaxed);
            if stop.load(Ordering::Relaxed) || shared.gone.load(Ordering::Relaxed) {
                shared.live.lock().unwrap_or_else(|e| e.into_inner()).stop();
                stopped = true;
            }
        }
        let chunk = match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(chunk) => chunk,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // Back-pressure: wait for room while the executor reads; the collectors' queue
        // and rings fill behind, and the kernel counts what does not fit.
        while !broken {
            match ring.push(&chunk.bytes, chunk.records) {
                Ok(true) => break,
                Ok(false) if shared.gone.load(Ordering::Relaxed) => broken = true,
                Ok(false) => {
                    // Told to stop while the executor is behind: detach now, so the
                    // kernel stops writing while the last chunks wait for room.
                    if !stopped && stop.load(Ordering::Relaxed) {
                        shared.live.lock().unwrap_or_else(|e| e.into_inner()).stop();
                        stopped = true;
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
                Err(e) => {
                    shared.notices.lock().unwrap_or_else(|e| e.into_inner()).push(e.to_string());
                    broken = true;
                }
            }
            if broken && !stopped {
                shared.live.lock().unwrap_or_else(|e| e.into_inner()).stop();
                stopped = true;
            }
        }
    }
    ring.close();
    (rx.peak_bytes(), guard.map(overload::Guard::finish))
}

/// The control thread: answer the executor until it closes its socket.
fn answer(mut sock: UnixStream, shared: &Shared, stop: &AtomicBool, ended: std::sync::mpsc::Receiver<Ended>) {
    let mut final_ended: Option<Ended> = None;
    // Until it closes the socket, or sends what is not a question: either way it is done
    // with this side.
    while let Ok(Some(ask)) = recv::<Ask>(&mut sock) {
        let mut reply = Answer::default();
        match ask {
            Ask::Counters => {}
            Ask::Stop => stop.store(true, Ordering::Relaxed),
            Ask::Finish => {
                stop.store(true, Ordering::Relaxed);
                if final_ended.is_none() {
                    final_ended = ended.recv().ok();
                }
                reply.ended = final_ended.clone().or_else(|| Some(Ended::default()));
            }
        }
        reply.kernel = shared.live.lock().unwrap_or_else(|e| e.into_inner()).counters();
        reply.notices = std::mem::take(&mut *shared.notices.lock().unwrap_or_else(|e| e.into_inner()));
        if send(&mut sock, &reply).is_err() {
            break;
        }
    }
    shared.gone.store(true, Ordering::Relaxed);
}

/// The plan as the collectors will run it, if the tenant's rule allows all of it.
fn check(mut plan: Plan, tenant: &TenantRule) -> Result<LiveConfig, String> {
    use crate::policy::ProbeClass;
    let mut kinds = BTreeSet::new();
    for k in &plan.kinds {
        kinds
            .insert(Kind::from_u16(*k).ok_or_else(|| format!("the plan names record kind {k}, which does not exist"))?);
    }
    let allow = |what: String, class: ProbeClass| tenant.check_class(&what, &class);
    for k in &kinds {
        match k {
            Kind::SysEnter | Kind::SysExit => allow("a syscall probe".into(), ProbeClass::Syscall)?,
            Kind::Open => allow("an open probe".into(), ProbeClass::File)?,
            Kind::Exec | Kind::Exit | Kind::Fork => allow("a process probe".into(), ProbeClass::Proc)?,
            _ => {}
        }
    }
    let root = std::path::Path::new(crate::collect::tracefs::ROOT);
    let tracepoint = |category: &str, name: &str, id: u32| -> Result<Format, String> {
        allow(format!("tracepoint `{category}:{name}`"), ProbeClass::Tracepoint(Some(category.to_string())))?;
        match crate::collect::tracefs::read_format(root, category, name) {
            Ok(f) if f.id == id => Ok(f),
            Ok(f) => Err(format!("tracepoint `{category}:{name}` has id {}, not {id}", f.id)),
            Err(e) => Err(e.to_string()),
        }
    };
    for t in &mut plan.table.tracepoints {
        // The collectors copy and compare as the kernel's format says, not the plan: a
        // longer entry or a field past its end would read kernel memory beyond it.
        let real = match t.format.category.as_str() {
            "btf" => {
                let name = &t.format.name;
                allow(format!("tracepoint `btf:{name}`"), ProbeClass::Tracepoint(Some("btf".into())))?;
                let real = crate::collect::table::btf_format(name)?;
                if real.id != t.format.id {
                    return Err(format!("tracepoint `btf:{name}` has id {}, not {}", real.id, t.format.id));
                }
                real
            }
            category => tracepoint(category, &t.format.name, t.format.id)?,
        };
        check_entry_offsets(t, &real)?;
        t.format = real;
    }
    for u in &plan.table.user {
        let class = if u.usdt.is_some() { ProbeClass::Usdt } else { ProbeClass::Uprobe };
        allow(format!("probe `{}`", u.probe), class)?;
        if !readable_by(&u.path, tenant) {
            return Err(format!("probe `{}`: user {} cannot read {}", u.probe, tenant.user, u.path.display()));
        }
    }
    for p in &plan.table.perf {
        let class = if p.freq.is_some() { ProbeClass::Profile } else { ProbeClass::Software };
        allow(format!("probe `{}`", p.name), class)?;
    }
    if plan.table.has_kernel_stacks() && !tenant.kernel_addresses {
        return Err(format!(
            "a plugin asks for kernel stacks, which {} does not allow user {}",
            tenant.rule, tenant.user
        ));
    }
    let mut aggs = Vec::new();
    for s in plan.aggs {
        match &s.attach {
            SiteAttach::SysEnter | SiteAttach::SysExit => allow("a syscall aggregation".into(), ProbeClass::Syscall)?,
            SiteAttach::Tracepoint { id, name, .. } => {
                let (category, tp) = name.split_once(':').ok_or_else(|| format!("aggregation site `{name}`"))?;
                tracepoint(category, tp, *id)?;
            }
        }
        let mut actions = Vec::new();
        for a in s.actions {
            let len = a.len();
            actions
                .push(<[u8; ACTION_BYTES]>::try_from(a).map_err(|_| format!("an aggregation action of {len} bytes"))?);
        }
        aggs.push(SiteConfig { site: s.site, attach: s.attach, actions, flags: s.flags });
    }
    let narrow = |f: KernelFilter| tenant.narrow(f).map_err(|e| format!("{e:#}"));
    Ok(LiveConfig {
        kinds,
        filter: narrow(plan.filter)?,
        table: plan.table,
        aggs,
        agg_filter: narrow(plan.agg_filter)?,
        map_sizes: MapSizes::default(),
        meter_tgid: None,
        executor_tgid: None,
        quota: None,
    })
}

/// Whether tracepoint entry `t`'s comparisons and string fields lie within the fixed
/// part of its real format, the strings' on 8-byte fields.
fn check_entry_offsets(t: &crate::collect::table::TracepointEntry, real: &Format) -> Result<(), String> {
    let name = format!("{}:{}", real.category, real.name);
    let fixed = real.fixed_size();
    if t.preds.len() > crate::collect::table::KERNEL_PREDS_MAX
        || t.preds.iter().any(|p| u32::from(p.off) + u32::from(p.size) > fixed || !matches!(p.size, 1 | 2 | 4 | 8))
    {
        return Err(format!("a comparison on tracepoint `{name}` outside its fields"));
    }
    if t.strings.len() > crate::collect::table::STRINGS_MAX {
        return Err(format!("strings of {} fields of tracepoint `{name}`", t.strings.len()));
    }
    for off in &t.strings {
        if !real.fields.iter().any(|f| !f.common && f.offset == u32::from(*off) && f.size == 8) {
            return Err(format!("a string of tracepoint `{name}` at offset {off}, where it has no pointer field"));
        }
    }
    Ok(())
}

/// Whether the tenant's user may read `path` by its owner, group and mode (access
/// control lists aside: a binary readable only through one is refused).
fn readable_by(path: &std::path::Path, tenant: &TenantRule) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else { return false };
    let groups = crate::sys::creds::user_with_uid(tenant.uid).ok().flatten().map(|u| u.groups).unwrap_or_default();
    let mode = m.mode();
    if m.uid() == tenant.uid {
        mode & 0o400 != 0
    } else if m.gid() == tenant.gid || groups.contains(&m.gid()) {
        mode & 0o040 != 0
    } else {
        mode & 0o004 != 0
    }
}

/// `/proc/kallsyms` as root sees it, in a sealed memfd.
fn kallsyms_copy() -> io::Result<OwnedFd> {
    let text = std::fs::read("/proc/kallsyms")?;
    let mut file = crate::sys::memfd("wasmtap-kallsyms")?;
    file.write_all(&text)?;
    crate::sys::seal(&file)?;
    Ok(OwnedFd::from(file))
}

// ---------------------------------------------------------------------------------------
// The executor's side.

/// Tracepoint `category:name`'s format, asked of the collectors' side over `sock`.
fn ask_format(mut sock: &UnixStream, category: &str, name: &str) -> Result<Format, String> {
    let ask = Before::Format { category: category.into(), name: name.into() };
    let lost = |e: io::Error| format!("tracepoint `{category}:{name}`: the collectors' process: {e}");
    send(&mut sock, &ask).map_err(lost)?;
    recv::<Result<Format, String>>(&mut sock).map_err(lost)?.ok_or_else(|| lost(io::ErrorKind::UnexpectedEof.into()))?
}

/// The executor's end of the socket, inherited at the number `--executor-fd` says.
pub struct Link {
    sock: UnixStream,
}

/// What the collectors handed the executor.
pub struct Started {
    pub source: ShmSource,
    pub values: Option<KernelValues>,
    /// A copy of `/proc/kallsyms`, to name kernel addresses from.
    pub kallsyms: Option<std::fs::File>,
}

impl Link {
    /// The socket this process inherited as a tenant's executor; the process becomes
    /// undumpable first.
    pub fn inherited(fd: i32) -> anyhow::Result<Link> {
        crate::sys::set_undumpable().context("cannot make the executor undumpable")?;
        let file = crate::sys::fds::inherited_file(fd).context("the executor's socket")?;
        let sock = UnixStream::from(OwnedFd::from(file));
        Ok(Link { sock })
    }

    /// Tracepoint `category:name`'s format, from the collectors' side (tracefs is
    /// root's), in the words `tracefs::lookup` would use.
    pub fn format(&self, category: &str, name: &str) -> Result<Format, String> {
        ask_format(&self.sock, category, name)
    }

    /// What answers `probes.describe`: formats from the collectors' side, over a handle
    /// of the socket of its own.
    pub fn describer(&self) -> anyhow::Result<crate::sandbox::Describer> {
        let sock = self.sock.try_clone().context("the executor's socket")?;
        Ok(Box::new(move |probe: &str| crate::collect::plan::describe(probe, |c, n| ask_format(&sock, c, n))))
    }

    /// The live system's tracepoints matching `pattern`, from the collectors' side; a
    /// lister for `probes.expand` that holds its own handle of the socket.
    pub fn lister(&self) -> anyhow::Result<crate::sandbox::Lister> {
        let sock = self.sock.try_clone().context("the executor's socket")?;
        Ok(Box::new(move |pattern: &str| {
            let lost = |e: io::Error| format!("`{pattern}`: the collectors' process: {e}");
            send(&sock, &Before::List { pattern: pattern.into() }).map_err(lost)?;
            recv::<Result<Vec<String>, String>>(&sock)
                .map_err(lost)?
                .ok_or_else(|| lost(io::ErrorKind::UnexpectedEof.into()))?
        }))
    }

    /// Send the plan; once the collectors are attached, the source of their events.
    pub fn start(mut self, config: &LiveConfig) -> anyhow::Result<Started> {
        send(&mut self.sock, &Before::Plan(Box::new(Plan::of(config))))
            .context("cannot send the plan to the collectors")?;
        let mut byte = [0u8; 1];
        let (n, mut fds) =
            crate::sys::fds::recv_with_fds(self.sock.as_fd(), &mut byte).context("cannot hear from the collectors")?;
        if n == 0 {
            anyhow::bail!("the collectors' process ended before attaching");
        }
        let ready: Ready = recv(&mut self.sock)?.context("the collectors' process ended before attaching")?;
        let (values, kallsyms) = match ready {
            Ready::Refused(why) => anyhow::bail!("{why}"),
            Ready::Started { values, kallsyms } => (values, kallsyms),
        };
        let want = 2 + 5 * usize::from(values) + usize::from(kallsyms);
        if fds.len() != want {
            anyhow::bail!("the collectors sent {} descriptors, not {want}", fds.len());
        }
        let kallsyms = if kallsyms { fds.pop().map(std::fs::File::from) } else { None };
        let maps = fds.split_off(2);
        let wake = fds.pop().context("the ring's wakeup")?;
        let memory = fds.pop().context("the ring's memory")?;
        let ring = ShmRing::open(Handles { memory, wake }).context("cannot map the event ring")?;
        let values = match values {
            true => Some(KernelValues::from_fds(maps).map_err(|e| anyhow::anyhow!("the aggregation maps: {e}"))?),
            false => None,
        };
        let source = ShmSource {
            ring,
            link: std::cell::RefCell::new(self),
            notices: std::cell::RefCell::new(Vec::new()),
            stopped: false,
        };
        Ok(Started { source, values, kallsyms })
    }

    fn ask(&mut self, ask: Ask) -> Result<Answer, RecordingError> {
        let lost = |e: io::Error| RecordingError::Collectors(format!("the collectors' process: {e}"));
        send(&mut self.sock, &ask).map_err(lost)?;
        recv(&mut self.sock).map_err(lost)?.ok_or_else(|| lost(io::ErrorKind::UnexpectedEof.into()))
    }
}

/// The events of a tenant's run, as the executor reads them from the shared ring.
pub struct ShmSource {
    ring: ShmRing,
    link: std::cell::RefCell<Link>,
    notices: std::cell::RefCell<Vec<String>>,
    stopped: bool,
}

impl ShmSource {
    fn keep(&self, answer: &mut Answer) {
        self.notices.borrow_mut().append(&mut answer.notices);
    }
}

impl EventSource for ShmSource {
    fn next(&mut self) -> Result<Next, RecordingError> {
        let mut chunk = Chunk::with_capacity(0);
        let broken = |e: crate::sys::shm::Broken| RecordingError::Collectors(e.to_string());
        if let Some(records) = self.ring.pop(&mut chunk.bytes).map_err(broken)? {
            chunk.records = records;
            return Ok(Next::Chunk(chunk));
        }
        if self.ring.closed() {
            // Closed after its last chunk: take what came between the two looks.
            return Ok(match self.ring.pop(&mut chunk.bytes).map_err(broken)? {
                Some(records) => Next::Chunk(Chunk { records, ..chunk }),
                None => Next::End,
            });
        }
        self.ring.wait(5);
        Ok(Next::Idle)
    }

    fn clock(&self) -> Clock {
        Clock::live()
    }

    fn counters_now(&self) -> Option<KernelCounters> {
        let mut answer = self.link.borrow_mut().ask(Ask::Counters).ok()?;
        self.keep(&mut answer);
        Some(answer.kernel)
    }

    fn notices(&mut self) -> Vec<String> {
        std::mem::take(&mut *self.notices.borrow_mut())
    }

    fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let _ = self.link.borrow_mut().ask(Ask::Stop).map(|mut a| self.keep(&mut a));
        }
    }

    fn finish(&mut self) -> Result<SourceEnd, RecordingError> {
        let mut answer = self.link.borrow_mut().ask(Ask::Finish)?;
        self.keep(&mut answer);
        let ended = answer.ended.unwrap_or_default();
        Ok(SourceEnd {
            kernel: answer.kernel,
            ring_bytes: ended.ring_bytes,
            queue_peak_bytes: ended.queue_peak_bytes,
            collectors: ended.collectors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::table::{PerfEntry, STACK_KERNEL};

    fn tenant(probes: &[&str], kernel_addresses: bool) -> TenantRule {
        TenantRule {
            user: "alice".into(),
            uid: 4242,
            gid: 4242,
            rule: "policy.toml:1 tenant[0]".into(),
            scope: Some(super::super::tenant::TenantScope::Uid(4242)),
            probes: probes.iter().map(|p| p.to_string()).collect(),
            kernel_addresses,
            memory_mib: 64,
            cpu_percent: 50,
            output_kib_per_sec: 1024,
            events_per_sec: 1000,
            trust: crate::package::trust::Trust::anything(),
        }
    }

    fn plan(kinds: &[u16]) -> Plan {
        Plan {
            kinds: kinds.to_vec(),
            filter: KernelFilter::default(),
            table: ProbeTable::default(),
            aggs: Vec::new(),
            agg_filter: KernelFilter::default(),
        }
    }

    #[test]
    fn a_plan_is_held_to_the_rule_whatever_the_executor_says() {
        let t = tenant(&["proc"], false);
        let err = check(plan(&[Kind::SysEnter as u16]), &t).unwrap_err();
        assert_eq!(
            err,
            "a syscall probe is of class `syscall`, which policy.toml:1 tenant[0] does not allow user alice (allowed: proc)"
        );
        assert_eq!(check(plan(&[999]), &t).unwrap_err(), "the plan names record kind 999, which does not exist");
        // Allowed, and narrowed to the scope whatever filter it came with.
        let mut wide = plan(&[Kind::Exec as u16]);
        wide.filter.uids = Some(vec![0, 4242]);
        let config = check(wide, &t).unwrap();
        assert_eq!(config.filter.uids, Some(vec![4242]));
        assert!(config.filter.effective_uids);
        assert_eq!(config.agg_filter.uids, Some(vec![4242]));
        // Kernel stacks need the right; a sample needs its class.
        let sampled = || {
            let mut p = plan(&[Kind::Sample as u16]);
            p.table.perf.push(PerfEntry {
                event: 0,
                name: "profile:hz:99".into(),
                freq: Some(99),
                period: 0,
                stacks: STACK_KERNEL,
                preds: Vec::new(),
            });
            p
        };
        assert!(check(sampled(), &t).unwrap_err().starts_with("probe `profile:hz:99` is of class `profile`"));
        let err = check(sampled(), &tenant(&["profile"], false)).unwrap_err();
        assert_eq!(err, "a plugin asks for kernel stacks, which policy.toml:1 tenant[0] does not allow user alice");
        // An aggregation action of the wrong size is refused, not cut or padded.
        let mut agg = plan(&[]);
        agg.aggs.push(Site { site: 0, attach: SiteAttach::SysEnter, actions: vec![vec![0; 3]], flags: 0 });
        assert_eq!(check(agg, &tenant(&["syscall"], false)).unwrap_err(), "an aggregation action of 3 bytes");
    }

    #[test]
    fn a_tracepoint_is_read_as_its_real_format_says_not_as_the_plan_does() {
        use crate::collect::table::{btf_format, Op, Pred, TracepointEntry};
        let t = tenant(&["tracepoint"], false);
        let real = btf_format("block_rq_issue").unwrap();
        let with = |edit: &dyn Fn(&mut TracepointEntry)| {
            let mut p = plan(&[Kind::Tracepoint as u16]);
            let mut e = TracepointEntry { format: real.clone(), stacks: 0, preds: Vec::new(), strings: Vec::new() };
            edit(&mut e);
            p.table.tracepoints.push(e);
            check(p, &t)
        };
        // A forged format (a longer entry, a field of its own) is replaced by the real one.
        let config = with(&|e| {
            e.format.fields.push(crate::collect::tracefs::Field { offset: 3000, ..e.format.fields[5].clone() });
            e.strings = vec![8];
        })
        .unwrap();
        assert_eq!(config.table.tracepoints[0].format, real);
        assert_eq!(config.table.tracepoints[0].strings, [8]);
        let err = with(&|e| e.strings = vec![3000]).unwrap_err();
        assert_eq!(err, "a string of tracepoint `btf:block_rq_issue` at offset 3000, where it has no pointer field");
        let err = with(&|e| e.strings = vec![16]).unwrap_err();
        assert!(err.contains("at offset 16, where it has no pointer field"), "a 4-byte field: {err}");
        let pred = Pred { off: 4000, size: 8, signed: false, op: Op::Eq, value: 1 };
        let err = with(&|e| e.preds = vec![pred]).unwrap_err();
        assert_eq!(err, "a comparison on tracepoint `btf:block_rq_issue` outside its fields");
        let err = with(&|e| e.format.id = 7).unwrap_err();
        assert_eq!(err, "tracepoint `btf:block_rq_issue` has id 65539, not 7");
    }

    #[test]
    fn a_tenants_cache_is_refused_under_a_base_others_may_write_or_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = std::env::temp_dir().join(format!("wasmtap-tcache-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let open = tmp.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = tenant_cache(&open, 1000, 1000).unwrap_err();
        assert!(e.contains("only root may write"), "{e}");
        std::os::unix::fs::symlink(&open, tmp.join("link")).unwrap();
        let e = tenant_cache(&tmp.join("link"), 1000, 1000).unwrap_err();
        assert!(e.contains("only root may write"), "{e}");
        assert_eq!(tenant_cache(Path::new("off"), 1000, 1000), Ok(None));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_plan_survives_the_trip_between_the_processes() {
        let mut p = plan(&[Kind::SysEnter as u16, Kind::Open as u16]);
        p.aggs.push(Site {
            site: 7,
            attach: SiteAttach::Tracepoint { id: 12, name: "sched:sched_switch".into(), btf: None },
            actions: vec![vec![1; ACTION_BYTES]],
            flags: 3,
        });
        let (mut a, mut b) = UnixStream::pair().unwrap();
        send(&mut a, &p).unwrap();
        let back: Plan = recv(&mut b).unwrap().unwrap();
        assert_eq!(format!("{back:?}"), format!("{p:?}"));
        // A length past the bound is refused before anything is read into memory.
        a.write_all(&(MESSAGE_MAX + 1).to_le_bytes()).unwrap();
        assert_eq!(recv::<Plan>(&mut b).unwrap_err().kind(), io::ErrorKind::InvalidData);
        drop(a);
        assert!(recv::<Plan>(&mut b).unwrap().is_none(), "closed between messages");
    }
}

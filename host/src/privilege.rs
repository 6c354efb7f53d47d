//! What a live run needs from the system, and what it gives back once its collectors are
//! attached. Loading and attaching needs [`ATTACH`]; afterwards the host reads its maps and
//! rings through descriptors it already holds, which needs no capability, so it keeps only
//! what the symbolizer and a `-c` command under another user need ([`keep_after_attach`]).
//! The thread that runs plugins then confines itself with a seccomp filter
//! ([`confine_dispatch_thread`]). The `-c` command runs as the user who invoked `sudo`,
//! or as `--run-as`.
//!
//! ```no_run
//! # fn main() -> Result<(), wasmtap::privilege::PrivilegeError> {
//! wasmtap::privilege::check_attach(false)?;
//! // ... load and attach the collectors ...
//! let kept = wasmtap::privilege::drop_after_attach(wasmtap::privilege::keep_after_attach(false, false))?;
//! assert_eq!(kept, 0);
//! # Ok(()) }
//! ```

use crate::sys::creds::{self, User};

/// The capabilities loading and attaching the collectors needs (measured on Linux 6.18,
/// tracefs mounted): BPF programs and maps, perf events for tracepoints and sampling, and
/// reading tracefs, whose directories only root may read. Map memory is charged to the
/// memory cgroup (Linux 5.11+), so no RLIMIT_MEMLOCK and no CAP_SYS_RESOURCE.
pub const ATTACH: &[(u32, &str)] = &[
    (creds::CAP_BPF, "CAP_BPF"),
    (creds::CAP_PERFMON, "CAP_PERFMON"),
    (creds::CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
];

/// What uprobes and USDT probes need besides: perf_event_open of the `uprobe` PMU fails
/// with EACCES under CAP_PERFMON alone on the kernels measured (6.18).
pub const UPROBES: &[(u32, &str)] = &[(creds::CAP_SYS_ADMIN, "CAP_SYS_ADMIN")];

/// What the symbolizer needs to name frames in every process: read their memory maps
/// (`CAP_SYS_PTRACE`) and the files behind them (`CAP_DAC_READ_SEARCH`, and
/// `CAP_CHECKPOINT_RESTORE` for `/proc/PID/map_files`), and see kernel addresses in
/// `/proc/kallsyms` (`CAP_SYSLOG`).
pub const SYMBOLIZE: &[(u32, &str)] = &[
    (creds::CAP_SYS_PTRACE, "CAP_SYS_PTRACE"),
    (creds::CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
    (creds::CAP_CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE"),
    (creds::CAP_SYSLOG, "CAP_SYSLOG"),
];

/// Why privileges could not be checked, dropped or chosen.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error(
        "loading collectors needs {} (missing: {}); `wasmtap replay` runs a recording without privileges",
        .needed.join(", "), .missing.join(", ")
    )]
    Missing { needed: Vec<&'static str>, missing: Vec<&'static str> },
    #[error("cannot read this process's capabilities: {0}")]
    Read(std::io::Error),
    #[error("cannot give up privileges after attaching: {0}")]
    Drop(std::io::Error),
    #[error("{0} (WASMTAP_SECCOMP=off runs without it)")]
    Confine(std::io::Error),
    #[error("--run-as {0}: no such user")]
    UnknownUser(String),
    #[error("--run-as {0}: cannot look the user up: {1}")]
    Lookup(String, std::io::Error),
    #[error("--run-as {user}: running the command as another user needs {needs}")]
    NotAllowed { user: String, needs: &'static str },
}

fn mask(caps: &[(u32, &str)]) -> u64 {
    caps.iter().fold(0, |m, (cap, _)| m | (1u64 << cap))
}

/// Refuse to start, naming what is missing, unless the process holds [`ATTACH`], and
/// [`UPROBES`] too when the run attaches uprobes or USDT probes.
pub fn check_attach(uprobes: bool) -> Result<(), PrivilegeError> {
    let have = creds::effective_caps().map_err(PrivilegeError::Read)?;
    let needed: Vec<(u32, &'static str)> = ATTACH.iter().chain(if uprobes { UPROBES } else { &[] }).copied().collect();
    let missing: Vec<&'static str> =
        needed.iter().filter(|(cap, _)| have & (1 << cap) == 0).map(|(_, name)| *name).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(PrivilegeError::Missing { needed: needed.iter().map(|(_, name)| *name).collect(), missing })
}

/// What the host still needs once attached: the symbolizer's capabilities when records
/// carry stacks or user addresses, and `CAP_KILL` to stop a `-c` command that runs
/// under another uid.
pub fn keep_after_attach(symbolizes: bool, command_as_other_user: bool) -> u64 {
    let mut keep = 0;
    if symbolizes {
        keep |= mask(SYMBOLIZE);
    }
    if command_as_other_user {
        keep |= 1 << creds::CAP_KILL;
    }
    keep
}

/// Give up every capability not in `keep` on every thread, and set `no_new_privs`, so
/// nothing the host runs later (plugins, parsers, the symbolizer) can regain them.
/// Returns the capabilities kept (those of `keep` the process held).
pub fn drop_after_attach(keep: u64) -> Result<u64, PrivilegeError> {
    creds::restrict_all_threads(keep).map_err(PrivilegeError::Drop)
}

/// [`drop_after_attach`] for a tenant's run: every thread also becomes the tenant's user
/// (uid, gid), so the plugins run with no capability, `no_new_privs`, and no more rights
/// than the user who asked (who cannot ptrace the run: the switch leaves it undumpable).
pub fn drop_to_user_after_attach(uid: u32, gid: u32) -> Result<(), PrivilegeError> {
    creds::restrict_all_threads_as(0, Some((uid, gid))).map(|_| ()).map_err(PrivilegeError::Drop)
}

/// Whether the dispatch thread is confined by its seccomp filter after attach: yes, unless
/// `WASMTAP_SECCOMP=off` (to tell whether the filter is behind a problem).
pub fn seccomp_wanted() -> bool {
    std::env::var_os("WASMTAP_SECCOMP").is_none_or(|v| v != "off")
}

/// Do now, on the dispatch thread and before privileges are dropped, what it would
/// otherwise do on first use with calls its filter refuses: open `/proc/self/status` for
/// the host's memory report. (The sandbox's own first-use work, its WASI runtime, is
/// started by the caller.)
pub fn prepare_dispatch_thread() {
    crate::sys::rss_bytes();
}

/// Install the dispatch thread's seccomp filter on the calling thread, the one that runs
/// plugins from now on ([`crate::sys::seccomp`]). `command`: the pid of the `-c` command,
/// the one process it may still signal.
pub fn confine_dispatch_thread(command: Option<u32>) -> Result<(), PrivilegeError> {
    crate::sys::seccomp::confine_this_thread(command).map_err(PrivilegeError::Confine)
}

/// The user a `-c` command runs as: `--run-as USER` if given; otherwise, when root was
/// reached through sudo, the user who ran sudo (`SUDO_UID`); otherwise this process's
/// own user (None: no switch).
pub fn command_user(run_as: Option<&str>) -> Result<Option<User>, PrivilegeError> {
    let (_, euid) = creds::uids();
    let Some(name) = run_as else { return Ok(sudo_user(euid)) };
    let user = creds::user_named(name)
        .map_err(|e| PrivilegeError::Lookup(name.into(), e))?
        .ok_or_else(|| PrivilegeError::UnknownUser(name.into()))?;
    if user.uid == euid {
        return Ok(if euid == 0 { Some(user) } else { None });
    }
    // Becoming root from a non-root uid would hand the command every capability.
    if user.uid == 0 {
        return Err(PrivilegeError::NotAllowed { user: name.into(), needs: "wasmtap itself to run as root" });
    }
    let have = creds::effective_caps().map_err(PrivilegeError::Read)?;
    let needed = (1u64 << creds::CAP_SETUID) | (1 << creds::CAP_SETGID);
    if have & needed != needed {
        return Err(PrivilegeError::NotAllowed { user: name.into(), needs: "CAP_SETUID and CAP_SETGID" });
    }
    Ok(Some(user))
}

/// The user behind `sudo`, when this process is root through it.
fn sudo_user(euid: u32) -> Option<User> {
    if euid != 0 {
        return None;
    }
    let uid: u32 = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    if uid == 0 {
        return None;
    }
    let gid = std::env::var("SUDO_GID").ok().and_then(|g| g.parse().ok());
    match creds::user_with_uid(uid) {
        Ok(Some(user)) => Some(User { gid: gid.unwrap_or(user.gid), ..user }),
        // A uid the database does not know: its ids alone, no supplementary groups.
        _ => Some(User { name: uid.to_string(), uid, gid: gid.unwrap_or(uid), groups: vec![gid.unwrap_or(uid)] }),
    }
}

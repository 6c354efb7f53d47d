//! Credentials: the capabilities this process holds and gives up, `no_new_privs`, the
//! users a `-c` command may run as, and the mount of tracefs. Capabilities and
//! `no_new_privs` belong to each thread, so giving them up is done on every thread.

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Capability numbers (linux/capability.h) of the capabilities wasmtap names.
pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_KILL: u32 = 5;
pub const CAP_SETGID: u32 = 6;
pub const CAP_SETUID: u32 = 7;
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_SYSLOG: u32 = 34;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;
pub const CAP_CHECKPOINT_RESTORE: u32 = 40;

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets as two 32-bit halves.
const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's effective and permitted capabilities, as bit masks.
fn caps_of_this_thread() -> io::Result<(u64, u64)> {
    let mut header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and two data structs are valid and writable, as capget v3 expects.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((join(data[0].effective, data[1].effective), join(data[0].permitted, data[1].permitted)))
}

/// The effective capabilities of the calling thread.
pub fn effective_caps() -> io::Result<u64> {
    caps_of_this_thread().map(|(effective, _)| effective)
}

/// What every thread keeps, read by [`restrict_this_thread`] in the signal handler.
static KEEP: AtomicU64 = AtomicU64::new(0);
/// The user every thread becomes (uid in the low half, gid in the high), or `NO_SWITCH`.
static BECOME: AtomicU64 = AtomicU64::new(NO_SWITCH);
const NO_SWITCH: u64 = u64::MAX;

/// Reduce the calling thread to the capabilities in `keep` (which it must hold), empty
/// its bounding and ambient sets and set `no_new_privs`. Only raw system calls, so a
/// signal handler may run it. False if a step that matters failed.
fn restrict_this_thread(keep: u64) -> bool {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which capset removes.
    // Past the kernel's last capability the call fails with EINVAL, which is fine.
    for cap in 0..64u64 {
        if keep & (1 << cap) == 0 {
            // SAFETY: prctl with integer arguments only.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        }
    }
    // Then the user, while CAP_SETUID and CAP_SETGID are still held: once every uid is
    // not 0 the kernel clears the permitted and effective sets on its own.
    let user_to_be = BECOME.load(Ordering::SeqCst);
    if user_to_be != NO_SWITCH {
        let (uid, gid) = (user_to_be as u32, (user_to_be >> 32) as u32);
        let groups = [gid as libc::gid_t];
        // SAFETY: raw set*id calls with integers and a valid one-element array.
        let switched = unsafe {
            libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()) == 0
                && libc::syscall(libc::SYS_setresgid, gid, gid, gid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
        };
        if !switched {
            return false;
        }
    }
    let mut header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let half = |lo: bool| if lo { keep as u32 } else { (keep >> 32) as u32 };
    let data = [false, true].map(|hi| CapData { effective: half(!hi), permitted: half(!hi), inheritable: 0 });
    // SAFETY: header and data are valid capset v3 arguments; pid 0 is the calling thread.
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) };
    // SAFETY: prctl with integer arguments only.
    let ambient = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    // SAFETY: as above.
    let nnp = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    set == 0 && ambient == 0 && nnp == 0
}

extern "C" fn on_restrict_signal(_signal: libc::c_int) {
    restrict_this_thread(KEEP.load(Ordering::SeqCst));
}

/// The signal that asks a thread to restrict itself: one glibc leaves to programs.
fn restrict_signal() -> libc::c_int {
    libc::SIGRTMIN() + 4
}

/// Reduce every thread of this process to the capabilities in `keep` (masked to what
/// the calling thread holds) and set `no_new_privs` on each; returns the set kept.
/// Other threads are signalled to do it themselves, then checked in `/proc` until each
/// shows the reduced set, so none is left holding more.
pub fn restrict_all_threads(keep: u64) -> io::Result<u64> {
    restrict_all_threads_as(keep, None)
}

/// [`restrict_all_threads`], and every thread becomes user `user_to_be` (uid, gid; no
/// supplementary groups but the gid) first. Capabilities cannot outlive the switch to a
/// uid that is not 0, so nothing is kept then.
pub fn restrict_all_threads_as(keep: u64, user_to_be: Option<(u32, u32)>) -> io::Result<u64> {
    let (effective, _) = caps_of_this_thread()?;
    let keep = if user_to_be.is_some_and(|(uid, _)| uid != 0) { 0 } else { keep & effective };
    KEEP.store(keep, Ordering::SeqCst);
    BECOME.store(user_to_be.map_or(NO_SWITCH, |(uid, gid)| u64::from(uid) | (u64::from(gid) << 32)), Ordering::SeqCst);
    // SAFETY: a zeroed sigaction with a handler that only makes raw system calls and
    // reads an atomic: async-signal-safe. SA_RESTART resumes the calls it interrupts.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_restrict_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(restrict_signal(), &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if !restrict_this_thread(keep) {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for _ in 0..500 {
        let pending: Vec<i32> = tasks()?.into_iter().filter(|&tid| !task_restricted(tid, keep)).collect();
        if pending.is_empty() {
            return Ok(keep);
        }
        for tid in pending {
            // SAFETY: tgkill with our own pid and one of its threads; a thread that has
            // exited meanwhile gives ESRCH, which is fine.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, restrict_signal()) };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err(io::Error::other("a thread did not give up its capabilities within a second"))
}

/// The thread ids of this process.
fn tasks() -> io::Result<Vec<i32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// True when thread `tid` holds exactly `keep` and has `no_new_privs`, or is gone.
fn task_restricted(tid: i32, keep: u64) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")) else { return true };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let caps = |name: &str| field(name).and_then(|v| u64::from_str_radix(v, 16).ok());
    let user_to_be = BECOME.load(Ordering::SeqCst);
    let user = user_to_be == NO_SWITCH || {
        let ids = |name: &str| -> Vec<u32> {
            field(name).map(|v| v.split_whitespace().filter_map(|x| x.parse().ok()).collect()).unwrap_or_default()
        };
        ids("Uid:").iter().all(|&u| u == user_to_be as u32)
            && ids("Gid:").iter().all(|&g| g == (user_to_be >> 32) as u32)
    };
    caps("CapEff:") == Some(keep) && caps("CapPrm:") == Some(keep) && field("NoNewPrivs:") == Some("1") && user
}

/// The real and effective uid of this process.
pub fn uids() -> (u32, u32) {
    // SAFETY: getuid and geteuid have no preconditions and cannot fail.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// A user a command runs as: ids and supplementary groups, as login would set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// The user named `name` (or with numeric uid `name`) in the password database.
pub fn user_named(name: &str) -> io::Result<Option<User>> {
    match name.parse::<u32>() {
        Ok(uid) => user_with_uid(uid),
        Err(_) => {
            let c_name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            passwd_entry(&mut |pwd, buf, result| {
                // SAFETY: every pointer is valid for the call; getpwnam_r writes into buf.
                unsafe { libc::getpwnam_r(c_name.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result) }
            })
        }
    }
}

/// The user with uid `uid`; None if the password database does not know it.
pub fn user_with_uid(uid: u32) -> io::Result<Option<User>> {
    passwd_entry(&mut |pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; getpwuid_r writes into buf.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

type Lookup<'a> = dyn FnMut(*mut libc::passwd, &mut [libc::c_char], *mut *mut libc::passwd) -> libc::c_int + 'a;

fn passwd_entry(lookup: &mut Lookup<'_>) -> io::Result<Option<User>> {
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    // SAFETY: passwd is plain data; a zeroed one is valid to be overwritten.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let r = lookup(&mut pwd as *mut libc::passwd, &mut buf, &mut result as *mut *mut libc::passwd);
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    if result.is_null() {
        return Ok(None);
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside buf.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }.to_string_lossy().into_owned();
    let groups = group_list(&name, pwd.pw_gid)?;
    Ok(Some(User { name, uid: pwd.pw_uid, gid: pwd.pw_gid, groups }))
}

/// The groups `name` belongs to, with `gid` among them (what initgroups would set).
fn group_list(name: &str, gid: u32) -> io::Result<Vec<u32>> {
    let c_name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: groups has room for n entries; getgrouplist writes at most n and sets n.
        let r = unsafe { libc::getgrouplist(c_name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if r >= 0 {
            groups.truncate(n.max(0) as usize);
            return Ok(groups);
        }
        if groups.len() >= 1 << 16 {
            return Err(io::Error::other("too many groups"));
        }
        groups.resize((n.max(0) as usize).max(groups.len() * 2), 0);
    }
}

/// The id of the group named `name` in the group database; None if there is none.
pub fn group_named(name: &str) -> io::Result<Option<u32>> {
    let c_name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0 as libc::c_char; 64 << 10];
    // SAFETY: group is plain data; a zeroed one is valid to be overwritten.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; getgrnam_r writes into buf and grp.
    let r = unsafe { libc::getgrnam_r(c_name.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut result) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok((!result.is_null()).then_some(grp.gr_gid))
}

/// Mount tracefs at `target` with mount(2), not a `mount` found in `$PATH`.
pub fn mount_tracefs(target: &str) -> io::Result<()> {
    let target = CString::new(target).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fs = c"tracefs";
    // SAFETY: all strings are NUL-terminated and live for the call; no data argument.
    let r = unsafe { libc::mount(fs.as_ptr(), target.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

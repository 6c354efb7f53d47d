//! The one place wasmtap calls libc directly: clocks, credentials ([`creds`]), and
//! starting a `-c` command held at a gate until its pid is in the kernel's target set
//! (so no event is missed).
#![allow(unsafe_code)]

pub mod bpf;
pub mod creds;
pub mod fds;
pub mod ring;
pub mod seccomp;
pub mod shm;

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC nanoseconds, the clock `bpf_ktime_get_ns` uses.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// Best effort: run the calling thread under SCHED_FIFO at the lowest real-time
/// priority, so that a thread that mostly sleeps wakes on time on a loaded machine.
/// Needs CAP_SYS_NICE (root); returns false without it.
pub fn set_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Give large allocations back to the kernel when they are freed. glibc's default
/// raises its mmap threshold as large blocks are freed, after which 256 KiB chunks, big
/// plugin strings and discarded plugin state stay in its arenas, and a long run's RSS
/// grows with fragmentation. Call once, before other threads start.
pub fn tune_allocator() {
    // SAFETY: mallopt only sets allocator parameters; it has no memory-safety preconditions.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

/// Give the heap's free memory back to the system (glibc's `malloc_trim`), for a
/// long-lived process after it freed much (the daemon, when a session ends).
pub fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The kernel's page size (`sysconf(_SC_PAGESIZE)`), asked once.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf only reads a configuration value.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

/// CPU time the calling thread has used, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// An anonymous file in memory (`memfd_create`), close-on-exec, that may be sealed.
pub fn memfd(name: &str) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Seal a memfd for good: it can no longer shrink, grow or be written, so a map of it
/// cannot lose its pages (no SIGBUS) and its content cannot change under a reader.
pub fn seal(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl(F_ADD_SEALS) on a descriptor `file` owns; it takes an int and touches no memory.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's resident set size now and at its peak, in bytes (`VmRSS`, `VmHWM`).
/// `/proc/self/status` is opened on the first call and read again from its start on each
/// later one (the kernel renders it anew), so that a thread that may no longer open files
/// (the dispatch thread's seccomp filter) can still report it.
pub fn rss_bytes() -> (u64, u64) {
    use std::os::unix::fs::FileExt;
    static STATUS: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let mut status = String::new();
    if let Some(file) = STATUS.get_or_init(|| std::fs::File::open("/proc/self/status").ok()) {
        let mut buf = vec![0u8; 16 << 10];
        let mut len = 0;
        while len < buf.len() {
            match file.read_at(&mut buf[len..], len as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
        status = String::from_utf8_lossy(&buf[..len]).into_owned();
    }
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A child process forked and blocked before `execv`, waiting for `release`.
pub struct GatedChild {
    pid: u32,
    gate_write: libc::c_int,
}

impl GatedChild {
    /// Fork a child that will exec `argv` (resolved through `PATH`) once released, as
    /// `user` (its uid, gid and groups) if given. It never inherits ambient capabilities.
    pub fn spawn(argv: &[String], user: Option<&creds::User>) -> io::Result<GatedChild> {
        let program = argv.first().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
        let path = find_program(program)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("command `{program}` not found in PATH")))?;
        let c_path = CString::new(path.as_os_str().as_bytes())?;
        let c_args = argv.iter().map(|a| CString::new(a.as_bytes())).collect::<Result<Vec<_>, _>>()?;
        let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        c_argv.push(std::ptr::null());
        // Prepared before the fork: the child may not allocate.
        let switch = user.map(|u| (u.uid, u.gid, u.groups.iter().map(|&g| g as libc::gid_t).collect::<Vec<_>>()));
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: after fork the child only makes system calls (close, read, prctl, the
        // set*id calls, write, execv, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let err = io::Error::last_os_error();
            // SAFETY: closing descriptors this function owns.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return Err(err);
        }
        if pid == 0 {
            // SAFETY: child side, see above; every pointer is valid until execv or _exit.
            unsafe {
                libc::close(fds[1]);
                let mut byte = 0u8;
                let n = libc::read(fds[0], (&mut byte as *mut u8).cast(), 1);
                if n != 1 {
                    libc::_exit(127);
                }
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
                if let Some(ids) = &switch {
                    if !become_user(ids) {
                        let msg = b"wasmtap: cannot switch the command to its user\n";
                        libc::write(2, msg.as_ptr().cast(), msg.len());
                        libc::_exit(126);
                    }
                }
                libc::execv(c_path.as_ptr(), c_argv.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: parent side: close the read end it does not use.
        unsafe { libc::close(fds[0]) };
        Ok(GatedChild { pid: pid as u32, gate_write: fds[1] })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Let the child exec its command.
    pub fn release(&mut self) -> io::Result<()> {
        if self.gate_write < 0 {
            return Ok(());
        }
        let byte = 1u8;
        // SAFETY: writing one byte from a valid buffer to a descriptor we own.
        let n = unsafe { libc::write(self.gate_write, (&byte as *const u8).cast(), 1) };
        let res = if n == 1 { Ok(()) } else { Err(io::Error::last_os_error()) };
        // SAFETY: closing the descriptor we own, once.
        unsafe { libc::close(self.gate_write) };
        self.gate_write = -1;
        res
    }

    /// Wait without blocking; `Some(status)` once the child has exited (wait(2) status).
    pub fn try_wait(&mut self) -> io::Result<Option<i32>> {
        let mut status = 0;
        // SAFETY: `status` is a valid int to write the wait status into.
        let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG) };
        match r {
            0 => Ok(None),
            r if r > 0 => Ok(Some(status)),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Kill the child (used when wasmtap stops before the command ends).
    pub fn kill(&mut self) {
        // SAFETY: sending a signal to a pid we forked and have not reaped.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        if self.gate_write >= 0 {
            // SAFETY: closing the descriptor we own; the child then exits without exec.
            unsafe { libc::close(self.gate_write) };
        }
    }
}

/// In a forked child: take `ids` (uid, gid, groups) with raw system calls, which change
/// only the calling thread (the only one after fork). Groups first: after setresuid the
/// child may no longer change them.
///
/// # Safety
/// Call only in the child of a fork, before exec.
unsafe fn become_user(ids: &(u32, u32, Vec<libc::gid_t>)) -> bool {
    let (uid, gid, groups) = ids;
    // SAFETY: `groups` is a valid array of its length; the others take integers only.
    unsafe {
        libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) == 0
            && libc::syscall(libc::SYS_setresgid, *gid, *gid, *gid) == 0
            && libc::syscall(libc::SYS_setresuid, *uid, *uid, *uid) == 0
    }
}

/// End a child of this process: SIGTERM, then SIGKILL if it still runs after `grace`,
/// and reap it. False (and nothing sent) when `pid` is not this process's child, so a
/// pid reused after the child was reaped is never signalled.
pub fn end_child(pid: u32, grace: std::time::Duration) -> bool {
    if parent_of(pid) != Some(std::process::id()) {
        return false;
    }
    let pid = pid as libc::pid_t;
    // SAFETY: signalling a child of this process, checked just above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let started = std::time::Instant::now();
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid int to write the wait status into.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != 0 {
            return true;
        }
        if !killed && started.elapsed() >= grace {
            // SAFETY: as above; the child has not been reaped, so the pid is still it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        if started.elapsed() >= grace * 3 {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Send `signal` to `pid` if it is a child of this process (not one reaped and reused).
pub fn signal_child(pid: u32, signal: libc::c_int) -> bool {
    if parent_of(pid) != Some(std::process::id()) {
        return false;
    }
    // SAFETY: signalling a child of this process, checked just above.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// The parent pid of `pid` (`/proc/PID/stat` field 4, after the parenthesized comm).
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Write `msg` to stderr unbuffered, giving up after `timeout` if stderr cannot take it
/// (a pipe nobody reads), for a message that must not hang the process.
pub fn write_stderr_within(msg: &[u8], timeout: std::time::Duration) {
    let mut pfd = libc::pollfd { fd: 2, events: libc::POLLOUT, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is one valid pollfd, and the count passed is 1.
    let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
    if ready == 1 && pfd.revents & libc::POLLOUT != 0 {
        // SAFETY: writing from a valid buffer of `msg.len()` bytes to fd 2.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// End the process now with `code`, without running destructors or flushing buffers:
/// for when a thread is stuck and holds what an orderly exit would wait for.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions; it ends the process and never returns.
    unsafe { libc::_exit(code) }
}

fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsStr::new("/usr/bin:/bin").to_os_string());
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// A perf event with a BPF program attached through a BPF link carrying a cookie.
/// Dropping it detaches the program.
pub struct PerfLink {
    _perf: std::os::fd::OwnedFd,
    _link: std::os::fd::OwnedFd,
}

/// `perf_event_open` for every process, on CPU 0 (tracepoints and uprobes fire on any
/// CPU for BPF), with the given `type`, `config`, `config1` and `config2`.
fn perf_open(kind: u32, config: u64, config1: u64, config2: u64) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // struct perf_event_attr (PERF_ATTR_SIZE_VER7, 128 bytes), as u64 words.
    let mut attr = [0u64; 16];
    attr[0] = kind as u64 | (128u64 << 32); // type, size
    attr[1] = config;
    attr[2] = 1; // sample_period
    attr[7] = config1;
    attr[8] = config2;
    // SAFETY: attr is a zero-initialized perf_event_attr of the declared size; any
    // pointer in config1 is kept alive by the caller for the call. perf_event_open reads
    // the attr and returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1 as libc::pid_t,
            0,
            -1,
            8 /* PERF_FLAG_FD_CLOEXEC */ as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh file descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attach BPF program `prog_fd` to a perf event through a BPF link with `cookie`
/// (what `bpf_get_attach_cookie` returns in the program).
fn link_perf(prog_fd: std::os::fd::BorrowedFd<'_>, perf: std::os::fd::OwnedFd, cookie: u64) -> io::Result<PerfLink> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // union bpf_attr, link_create: prog_fd, target_fd, attach_type (BPF_PERF_EVENT = 41),
    // flags, then perf_event.bpf_cookie.
    let mut attr = [0u32; 16];
    attr[0] = prog_fd.as_raw_fd() as u32;
    attr[1] = perf.as_raw_fd() as u32;
    attr[2] = 41;
    attr[4] = cookie as u32;
    attr[5] = (cookie >> 32) as u32;
    // SAFETY: attr is a zero-initialized bpf_attr prefix of the size passed; the kernel
    // reads it and returns a new link fd or -1.
    let link = unsafe {
        libc::syscall(libc::SYS_bpf, 28 /* BPF_LINK_CREATE */, attr.as_ptr(), std::mem::size_of_val(&attr))
    };
    if link < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let link = unsafe { OwnedFd::from_raw_fd(link as i32) };
    Ok(PerfLink { _perf: perf, _link: link })
}

/// Freeze BPF map `map`: from now on no process can write it with bpf(2), whatever fd it
/// holds (BPF_MAP_FREEZE); the kernel's programs still can. Linux 5.2.
pub fn freeze_map(map: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // union bpf_attr: map_fd first.
    let attr = [map.as_raw_fd() as u32, 0, 0, 0];
    // SAFETY: attr is a zero-initialized bpf_attr prefix of the size passed; the kernel
    // only reads it.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, 22 /* BPF_MAP_FREEZE */, attr.as_ptr(), std::mem::size_of_val(&attr))
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attach `prog_fd` to the tracepoint with tracefs id `id`, with cookie `id`.
pub fn attach_tracepoint(id: u32, prog_fd: std::os::fd::BorrowedFd<'_>, cookie: u64) -> io::Result<PerfLink> {
    let perf = perf_open(2 /* PERF_TYPE_TRACEPOINT */, id as u64, 0, 0)?;
    link_perf(prog_fd, perf, cookie)
}

/// Open a uprobe (or uretprobe) on `path` at file offset `offset` for every process,
/// with the kernel maintaining the USDT semaphore at `ref_ctr_offset` (0: none), and
/// attach `prog_fd` with `cookie`. aya 0.14 cannot pass `ref_ctr_offset`, hence this.
pub fn attach_uprobe(
    path: &Path,
    offset: u64,
    ref_ctr_offset: u64,
    retprobe: bool,
    prog_fd: std::os::fd::BorrowedFd<'_>,
    cookie: u64,
) -> io::Result<PerfLink> {
    let pmu_type: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")?
        .trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad uprobe PMU type"))?;
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // config: ref_ctr_offset in bits 32-63, retprobe in bit 0 (the PMU's format files).
    let config = (ref_ctr_offset << 32) | u64::from(retprobe);
    let perf = perf_open(pmu_type, config, path.as_ptr() as u64, offset)?;
    link_perf(prog_fd, perf, cookie)
}

/// Start `program` with `args` as a tenant's executor: as `(uid, gid)` with no
/// supplementary group (so with no capability), `no_new_privs` set, killed when this
/// process dies, and `fd` open across the exec as number `target` (every other
/// descriptor of this process's own is close-on-exec).
pub fn spawn_executor(
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    (uid, gid): (u32, u32),
    cache: &std::ffi::OsStr,
    fd: std::os::fd::OwnedFd,
    target: std::os::fd::RawFd,
) -> io::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = std::process::Command::new(program);
    // std drops the supplementary groups when root switches uid (setgroups(0)), then
    // sets the gid and the uid, which clears every capability; the closure runs after.
    cmd.args(args).uid(uid).gid(gid).env("WASMTAP_CACHE_DIR", cache);
    let from = fd.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe system calls (dup2, prctl, getppid) on values copied before the
    // fork; `fd` stays open in the closure, which owns it, and `target` lies above it.
    unsafe {
        cmd.pre_exec(move || {
            let _open = &fd;
            if libc::dup2(from, target) < 0 || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the signal was asked for: no one would send it.
            if libc::getppid() != parent {
                return Err(io::Error::other("the collectors' process is gone"));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Make this process undumpable: its user may not ptrace it or read its memory (a
/// tenant's executor holds descriptors the collectors' process handed it).
pub fn set_undumpable() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes integers and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Seconds east of UTC of this machine's local time now (`TZ`, `/etc/localtime`); 0 if
/// it cannot be told.
pub fn local_utc_offset() -> i64 {
    // SAFETY: time(NULL) takes no pointer; localtime_r writes into a zeroed `tm` owned here.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

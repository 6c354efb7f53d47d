//! The one place wasmtap calls libc directly: clocks, and starting a `-c` command held
//! at a gate until its pid is in the kernel's target set (so no event is missed).
#![allow(unsafe_code)]

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
    /// Fork a child that will exec `argv` (resolved through `PATH`) once released.
    pub fn spawn(argv: &[String]) -> io::Result<GatedChild> {
        let program = argv.first().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
        let path = resolve_program(program)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("command `{program}` not found in PATH")))?;
        let c_path = CString::new(path.as_os_str().as_bytes())?;
        let c_args = argv.iter().map(|a| CString::new(a.as_bytes())).collect::<Result<Vec<_>, _>>()?;
        let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        c_argv.push(std::ptr::null());
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: after fork the child only calls async-signal-safe functions (close, read,
        // execv, _exit) on memory prepared before the fork.
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
                if n == 1 {
                    libc::execv(c_path.as_ptr(), c_argv.as_ptr());
                }
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

fn resolve_program(program: &str) -> Option<PathBuf> {
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

//! The filter on a thread of the test process: what it refuses, what it still allows
//! (among it wasmtime instantiating, growing memory and trapping), and that no other
//! thread is touched. No privilege needed: a filter under `no_new_privs` is any thread's
//! to install.

use std::ffi::CString;
use std::sync::mpsc::channel;

use super::*;

/// The errno of a raw system call's result, or None if it succeeded.
fn errno(r: libc::c_long) -> Option<i32> {
    (r == -1).then(|| io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// `Seccomp:` and `Seccomp_filters:` of thread `tid` of this process.
fn seccomp_status(tid: u32) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let f = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_string();
    (f("Seccomp:"), f("Seccomp_filters:"))
}

/// A core module with one page of memory, `grow` (adds `n` pages, returns the old size)
/// and `peek` (loads the i32 at an address: out of bounds it traps).
fn wasm_module() -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, MemArg, MemorySection,
        MemoryType, Module, TypeSection, ValType,
    };
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I32]);
    let mut funcs = FunctionSection::new();
    funcs.function(0);
    funcs.function(0);
    let mut mem = MemorySection::new();
    mem.memory(MemoryType { minimum: 1, maximum: None, memory64: false, shared: false, page_size_log2: None });
    let mut exports = ExportSection::new();
    exports.export("grow", ExportKind::Func, 0);
    exports.export("peek", ExportKind::Func, 1);
    let mut code = CodeSection::new();
    let mut grow = Function::new([]);
    grow.instruction(&Instruction::LocalGet(0)).instruction(&Instruction::MemoryGrow(0)).instruction(&Instruction::End);
    code.function(&grow);
    let mut peek = Function::new([]);
    let arg = MemArg { offset: 0, align: 2, memory_index: 0 };
    peek.instruction(&Instruction::LocalGet(0)).instruction(&Instruction::I32Load(arg)).instruction(&Instruction::End);
    code.function(&peek);
    let mut m = Module::new();
    m.section(&types).section(&funcs).section(&mem).section(&exports).section(&code);
    m.finish()
}

/// What the confined thread saw, call by call: (what, errno or None).
type Seen = Vec<(&'static str, Option<i32>)>;

#[test]
fn the_dispatch_filter_refuses_on_its_thread_only() {
    // SAFETY: getpid and getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::new(&engine, wasm_module()).unwrap();
    // Opened before the filter, read again after it.
    assert!(crate::sys::rss_bytes().0 > 0);
    let (tid_tx, tid_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let confined = std::thread::spawn(move || -> (Seen, Seen, Option<i32>) {
        // The process itself stands in for the `-c` command, the one process it may signal.
        confine_this_thread(Some(pid as u32)).unwrap();
        let tid = gettid();
        tid_tx.send(tid).unwrap();
        let nowhere = CString::new("/nonexistent/wasmtap-no-such-program").unwrap();
        let argv = [nowhere.as_ptr(), std::ptr::null()];
        let status = CString::new("/proc/self/status").unwrap();
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: every call below is given valid pointers or none; those that would act
        // (exec, fork, mount) are refused or given arguments that make them fail.
        let denied: Seen = unsafe {
            vec![
                ("socket", errno(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) as _)),
                ("socketpair", errno(libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) as _)),
                ("openat", errno(libc::openat(libc::AT_FDCWD, status.as_ptr(), libc::O_RDONLY) as _)),
                ("std::fs::File::open", std::fs::File::open("/proc/self/status").err().and_then(|e| e.raw_os_error())),
                ("execve", errno(libc::execve(nowhere.as_ptr(), argv.as_ptr(), argv[1..].as_ptr()) as _)),
                (
                    "execveat",
                    errno(libc::syscall(
                        libc::SYS_execveat,
                        libc::AT_FDCWD,
                        nowhere.as_ptr(),
                        argv.as_ptr(),
                        argv[1..].as_ptr(),
                        0,
                    )),
                ),
                ("fork", {
                    let r = libc::fork();
                    if r == 0 {
                        libc::_exit(0);
                    }
                    errno(r as _)
                }),
                (
                    "std::process::Command",
                    std::process::Command::new("/bin/true").status().err().and_then(|e| e.raw_os_error()),
                ),
                ("kill another process", errno(libc::kill(ppid, 0) as _)),
                ("tgkill another process", errno(libc::syscall(libc::SYS_tgkill, ppid, ppid, 0))),
                ("ptrace", errno(libc::ptrace(libc::PTRACE_PEEKUSER, 0x7fff_fff0, 0, 0))),
                ("memfd_create", errno(libc::memfd_create(status.as_ptr(), 0) as _)),
                ("unlinkat", errno(libc::unlinkat(libc::AT_FDCWD, nowhere.as_ptr(), 0) as _)),
                (
                    "mount",
                    errno(libc::mount(std::ptr::null(), std::ptr::null(), std::ptr::null(), 0, std::ptr::null()) as _),
                ),
                ("unshare", errno(libc::unshare(0) as _)),
                // The raw call: glibc's setuid has every thread of the process make it.
                ("setuid", errno(libc::syscall(libc::SYS_setuid, libc::getuid()))),
                ("perf_event_open", errno(libc::syscall(libc::SYS_perf_event_open, 0, 0, -1, -1, 0))),
                ("bpf BPF_MAP_CREATE", errno(libc::syscall(libc::SYS_bpf, 0, 0, 0))),
                ("bpf BPF_MAP_UPDATE_ELEM", errno(libc::syscall(libc::SYS_bpf, 2, 0, 0))),
                ("bpf BPF_PROG_LOAD", errno(libc::syscall(libc::SYS_bpf, 5, 0, 0))),
                ("bpf BPF_LINK_CREATE", errno(libc::syscall(libc::SYS_bpf, 28, 0, 0))),
                ("io_uring_setup", errno(libc::syscall(libc::SYS_io_uring_setup, 1, 0))),
                ("keyctl", errno(libc::syscall(libc::SYS_keyctl, 0, 0, 0))),
                #[cfg(target_arch = "x86_64")]
                ("x32 getpid", errno(libc::syscall(X32_SYSCALL_BIT as libc::c_long | 39))),
                ("clone3", errno(libc::syscall(libc::SYS_clone3, 0, 0))),
            ]
        };
        let inherited;
        // SAFETY: plain system calls on valid pointers: `fds` is a live array of two, the
        // buffers outlive the calls, and every fd passed was opened here.
        let allowed: Seen = unsafe {
            let mut seen: Seen = Vec::new();
            seen.push(("pipe2", errno(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) as _)));
            seen.push(("write to a pipe", errno(libc::write(fds[1], b"x".as_ptr().cast(), 1) as _)));
            let mut byte = 0u8;
            seen.push(("read from a pipe", errno(libc::read(fds[0], (&mut byte as *mut u8).cast(), 1) as _)));
            seen.push(("close", errno((libc::close(fds[0]) | libc::close(fds[1])) as _)));
            let map = libc::mmap(
                std::ptr::null_mut(),
                1 << 20,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            seen.push((
                "mmap",
                (map == libc::MAP_FAILED).then(|| io::Error::last_os_error().raw_os_error().unwrap_or(0)),
            ));
            seen.push(("mprotect", errno(libc::mprotect(map, 1 << 16, libc::PROT_READ | libc::PROT_WRITE) as _)));
            seen.push(("madvise", errno(libc::madvise(map, 1 << 16, libc::MADV_DONTNEED) as _)));
            seen.push(("munmap", errno(libc::munmap(map, 1 << 20) as _)));
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            seen.push((
                "clock_gettime thread CPU",
                errno(libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) as _),
            ));
            seen.push(("kill the command", errno(libc::kill(pid, 0) as _)));
            seen.push(("tgkill itself", errno(libc::syscall(libc::SYS_tgkill, pid, tid, 0))));
            let mut status = 0;
            seen.push(("waitpid", errno(libc::waitpid(-1, &mut status, libc::WNOHANG) as _)));
            seen.push(("rss_bytes", (crate::sys::rss_bytes().0 == 0).then_some(0)));
            // bpf: judged where the kernel itself lets the command through (CAP_BPF).
            if crate::sys::creds::effective_caps().unwrap_or(0) & (1 << crate::sys::creds::CAP_BPF) != 0 {
                for (what, cmd) in
                    [("bpf BPF_MAP_LOOKUP_ELEM", 1), ("bpf BPF_MAP_DELETE_ELEM", 3), ("bpf BPF_MAP_GET_NEXT_KEY", 4)]
                {
                    seen.push((what, errno(libc::syscall(libc::SYS_bpf, cmd, 0, 0))));
                }
            }
            // A thread may still be started (clone3 answers ENOSYS, glibc falls back to
            // clone with CLONE_THREAD), and it inherits the filter.
            let child =
                std::thread::Builder::new().spawn(|| errno(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) as _));
            seen.push(("std::thread::spawn", child.as_ref().err().and_then(|e| e.raw_os_error())));
            inherited = child.ok().and_then(|c| c.join().ok()).flatten();
            seen
        };
        // wasmtime: instantiate, grow memory, trap out of bounds, all on this thread.
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let grow = instance.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();
        assert_eq!(grow.call(&mut store, 100).unwrap(), 1, "grown from one page");
        let peek = instance.get_typed_func::<i32, i32>(&mut store, "peek").unwrap();
        assert_eq!(peek.call(&mut store, 4096).unwrap(), 0);
        let trap = peek.call(&mut store, -16).unwrap_err();
        assert_eq!(trap.downcast_ref::<wasmtime::Trap>(), Some(&wasmtime::Trap::MemoryOutOfBounds), "{trap:?}");
        go_rx.recv().unwrap();
        (denied, allowed, inherited)
    });
    let tid = tid_rx.recv().unwrap();
    assert_eq!(seccomp_status(tid), ("2".to_string(), "2".to_string()), "filter mode, two filters");
    // The thread running this test is not confined.
    assert_eq!(seccomp_status(gettid()).0, "0");
    // SAFETY: socket with integer arguments; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "{}", io::Error::last_os_error());
    // SAFETY: closing the descriptor just opened.
    unsafe { libc::close(fd) };
    go_tx.send(()).unwrap();
    let (denied, allowed, inherited) = confined.join().unwrap();
    for (what, e) in &denied {
        let want = if *what == "clone3" { libc::ENOSYS } else { libc::EPERM };
        assert_eq!(*e, Some(want), "{what}: {denied:?}");
    }
    // Allowed calls may fail for their own reasons (waitpid without children, bpf on no
    // map), but not because the filter refused them.
    for (what, e) in &allowed {
        let failed_alone = what.starts_with("bpf") || *what == "waitpid";
        assert!(e.is_none() || failed_alone && *e != Some(libc::EPERM), "{what}: {allowed:?}");
    }
    assert_eq!(inherited, Some(libc::EPERM), "a thread the confined thread starts is confined too");
}
#[test]
fn bpf_commands_outside_the_allowed_ones_are_covered_by_the_rules() {
    // The ranges between allowed commands: 0, 2, 5-14, 16-20, 22-23, 26, 28 and up.
    let rules = bpf_rules().unwrap();
    assert_eq!(rules.len(), 7, "{rules:?}");
}

#[test]
fn the_second_filter_jumps_where_its_comments_say() {
    let prog = clone3_and_x32();
    let ret = |i: usize| (prog[i].code, prog[i].k);
    // The arch mismatch lands on ALLOW, x32 on EPERM, clone3 on ENOSYS.
    assert_eq!(ret(1 + 1 + prog[1].jf as usize), (0x06, libc::SECCOMP_RET_ALLOW));
    assert_eq!(ret(3 + 1 + prog[3].jt as usize), (0x06, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    assert_eq!(ret(4 + 1 + prog[4].jt as usize), (0x06, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    assert_eq!(ret(4 + 1 + prog[4].jf as usize), (0x06, libc::SECCOMP_RET_ALLOW));
}

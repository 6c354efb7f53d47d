//! The `syscalls` tapset: what every syscall-minded plugin needs to speak like strace,
//! written once. Syscall names and numbers, each syscall's arguments as the kernel's
//! tracepoints name them (and how to print them), errno names and messages, open flags,
//! signals and wait statuses. x86_64 numbering.
//!
//! ```
//! use wasmtap_syscalls as sc;
//! assert_eq!(sc::open_flags(0o1101), "O_WRONLY|O_CREAT|O_TRUNC");
//! assert_eq!(sc::format_ret(-2), "-2 ENOENT");
//! assert_eq!(sc::wait_status(9), "killed by SIGKILL");
//! assert_eq!(sc::format_args(257, &[(-100i64) as u64, 0x7ffc0000, 0o2000000, 0, 0, 0]),
//!            "dfd=AT_FDCWD, filename=0x7ffc0000, flags=O_RDONLY|O_CLOEXEC, mode=0");
//! ```

mod args_table;
#[cfg(target_arch = "wasm32")]
mod component;
mod errno_table;

/// Name of syscall `nr` ("openat"), None if unknown.
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    wasmtap_abi::syscall_name(nr)
}

/// Number of the syscall called `name`.
pub fn syscall_nr(name: &str) -> Option<i64> {
    wasmtap_abi::syscall_number(name).map(i64::from)
}

pub use wasmtap_abi::linux::{nr, o};

/// What an argument is, for decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A file descriptor.
    Fd,
    /// A directory fd of the `*at` family (AT_FDCWD).
    DirFd,
    /// A path in user memory.
    Path,
    /// Another string in user memory.
    Str,
    /// `O_*` flags of open, openat, creat.
    OpenFlags,
    /// A file mode.
    Mode,
    /// A signal number.
    Signal,
    /// A process id.
    Pid,
    /// A byte count.
    Size,
    /// A signed integer.
    Int,
    /// An unsigned integer.
    Uint,
    /// A pointer.
    Ptr,
    /// Other flags, in hex.
    Flags,
}

/// One argument of a syscall, as the kernel's tracepoint format names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arg {
    /// Its name (`filename`).
    pub name: &'static str,
    /// Its C type (`const char *`).
    pub ty: &'static str,
    /// How to print it.
    pub kind: ArgKind,
}

/// Tracepoint names that are not the syscall table's.
const RENAMED: &[(&str, &str)] = &[
    ("newstat", "stat"),
    ("newfstat", "fstat"),
    ("newlstat", "lstat"),
    ("newuname", "uname"),
    ("sendfile64", "sendfile"),
    ("umount", "umount2"),
];

/// The arguments of syscall `nr` in order (`openat` → dfd, filename, flags, mode), None if
/// the kernel has no tracepoint for it.
pub fn syscall_args(nr: i64) -> Option<&'static [Arg]> {
    let table = args_by_nr();
    table.get(usize::try_from(nr).ok()?).and_then(|a| a.as_deref())
}

fn args_by_nr() -> &'static Vec<Option<Box<[Arg]>>> {
    use std::sync::OnceLock;
    static TABLE: OnceLock<Vec<Option<Box<[Arg]>>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table: Vec<Option<Box<[Arg]>>> = Vec::new();
        for (tp, args) in args_table::ARGS {
            let name = RENAMED.iter().find(|(t, _)| t == tp).map_or(*tp, |(_, n)| *n);
            let Some(nr) = syscall_nr(name) else { continue };
            let nr = nr as usize;
            if table.len() <= nr {
                table.resize(nr + 1, None);
            }
            let open_like = matches!(*tp, "open" | "openat" | "creat");
            table[nr] =
                Some(args.iter().map(|&(name, ty)| Arg { name, ty, kind: kind_of(name, ty, open_like) }).collect());
        }
        table
    })
}

/// The kind of an argument, from its name and C type.
fn kind_of(name: &str, ty: &str, open_like: bool) -> ArgKind {
    let pointer = ty.contains('*');
    let chars = ty.contains("char") && pointer && !ty.contains("* *") && !ty.contains("*const *");
    match name {
        "dfd" | "olddfd" | "newdfd" | "dirfd" => ArgKind::DirFd,
        "flags" if open_like => ArgKind::OpenFlags,
        "mode" if ty == "umode_t" => ArgKind::Mode,
        "sig" if ty == "int" => ArgKind::Signal,
        "pid" | "upid" | "tgid" | "tid" if ty == "pid_t" => ArgKind::Pid,
        "filename" | "pathname" | "path" | "oldname" | "newname" | "oldpath" | "newpath" | "dir_name"
        | "specialfile"
            if chars =>
        {
            ArgKind::Path
        }
        _ if chars => ArgKind::Str,
        _ if pointer => ArgKind::Ptr,
        "fd" | "oldfd" | "newfd" | "fd_in" | "fd_out" | "epfd" => ArgKind::Fd,
        n if n.ends_with("fd") && ty.contains("int") => ArgKind::Fd,
        "count" | "len" | "size" | "nbytes" => ArgKind::Size,
        _ if ty == "size_t" => ArgKind::Size,
        n if n.contains("flags") => ArgKind::Flags,
        "addr" | "start" | "brk" | "newsp" | "tls" | "new_addr" | "old_addr" | "mmap_addr" => ArgKind::Ptr,
        _ if ty.starts_with("unsigned") || ty.starts_with("u") || ty == "size_t" => ArgKind::Uint,
        _ => ArgKind::Int,
    }
}

/// `value` of argument `i` of syscall `nr` as strace would print what it can without
/// reading user memory: fds and pids as signed decimals, AT_FDCWD, open flags decoded,
/// modes in octal, signals by name, sizes in decimal, pointers in hex (NULL for 0).
pub fn format_arg(nr: i64, i: usize, value: u64) -> String {
    let arg = syscall_args(nr).and_then(|a| a.get(i));
    let kind = arg.map_or(ArgKind::Uint, |a| a.kind);
    // 32-bit C types are cut to 32 bits (the upper half of the register is not theirs).
    let narrow =
        arg.is_some_and(|a| matches!(a.ty, "int" | "unsigned int" | "u32" | "pid_t" | "uid_t" | "gid_t" | "umode_t"));
    let value = if narrow { value & 0xffff_ffff } else { value };
    match kind {
        ArgKind::Fd | ArgKind::Pid => (value as i32).to_string(),
        ArgKind::Int if narrow => (value as i32).to_string(),
        ArgKind::Int => (value as i64).to_string(),
        ArgKind::DirFd => format_dirfd(i64::from(value as i32)),
        ArgKind::OpenFlags => open_flags(value),
        ArgKind::Mode => format_mode(value),
        ArgKind::Signal => signal_name(value as i32).unwrap_or_else(|| (value as i32).to_string()),
        ArgKind::Size | ArgKind::Uint => value.to_string(),
        ArgKind::Path | ArgKind::Str | ArgKind::Ptr if value == 0 => "NULL".into(),
        ArgKind::Path | ArgKind::Str | ArgKind::Ptr | ArgKind::Flags => format!("{value:#x}"),
    }
}

/// `name=value` for every argument: "dfd=AT_FDCWD, filename=0x7ffc…, flags=O_RDONLY, mode=0".
/// A syscall without a tracepoint prints its six raw arguments in hex.
pub fn format_args(nr: i64, args: &[u64; 6]) -> String {
    match syscall_args(nr) {
        Some(list) => list
            .iter()
            .zip(args)
            .enumerate()
            .map(|(i, (a, v))| format!("{}={}", a.name, format_arg(nr, i, *v)))
            .collect::<Vec<_>>()
            .join(", "),
        None => args.iter().map(|v| format!("{v:#x}")).collect::<Vec<_>>().join(", "),
    }
}

/// Name of errno `e` ("ENOENT"); accepts `e` or `-e`. None for 0 and unknown numbers.
pub fn errno_name(e: i64) -> Option<&'static str> {
    let e = e.checked_abs()?;
    errno_table::ERRNOS.iter().find(|(n, _, _)| *n == e).map(|(_, name, _)| *name)
}

/// Number of the errno called `name` (the aliases EWOULDBLOCK, EDEADLOCK, ENOTSUP too).
pub fn errno_nr(name: &str) -> Option<i64> {
    let name = match name {
        "EWOULDBLOCK" => "EAGAIN",
        "EDEADLOCK" => "EDEADLK",
        "ENOTSUP" => "EOPNOTSUPP",
        n => n,
    };
    errno_table::ERRNOS.iter().find(|(_, n, _)| *n == name).map(|(nr, _, _)| *nr)
}

/// The C library's message for errno `e` (strerror: "No such file or directory"); ±e.
pub fn errno_message(e: i64) -> Option<&'static str> {
    let e = e.checked_abs()?;
    errno_table::ERRNOS.iter().find(|(n, _, _)| *n == e).and_then(|(_, _, m)| *m)
}

/// A syscall's return value as a user reads it: "3", or "-2 ENOENT" for a failure (the
/// number alone when the errno is unknown). Failures are -4095..=-1, as the kernel's.
pub fn format_ret(ret: i64) -> String {
    match (ret, errno_name(ret)) {
        (-4095..=-1, Some(name)) => format!("{ret} {name}"),
        _ => ret.to_string(),
    }
}

/// The flags after the access mode, in the order they print. O_SYNC and O_TMPFILE come
/// before the flags whose bits they include (O_DSYNC, O_DIRECTORY). The C SDK's table is
/// written from this one (`wasmtap-c`).
pub const FLAG_NAMES: &[(u64, &str)] = &[
    (o::CREAT, "O_CREAT"),
    (o::EXCL, "O_EXCL"),
    (o::NOCTTY, "O_NOCTTY"),
    (o::TRUNC, "O_TRUNC"),
    (o::APPEND, "O_APPEND"),
    (o::NONBLOCK, "O_NONBLOCK"),
    (o::SYNC, "O_SYNC"),
    (o::DSYNC, "O_DSYNC"),
    (o::ASYNC, "O_ASYNC"),
    (o::DIRECT, "O_DIRECT"),
    (o::LARGEFILE, "O_LARGEFILE"),
    (o::TMPFILE, "O_TMPFILE"),
    (o::DIRECTORY, "O_DIRECTORY"),
    (o::NOFOLLOW, "O_NOFOLLOW"),
    (o::NOATIME, "O_NOATIME"),
    (o::CLOEXEC, "O_CLOEXEC"),
];

/// Open flags decoded: the access mode first (O_RDONLY, O_WRONLY, O_RDWR, or O_PATH),
/// then each flag set, then any unknown bits in hex: "O_WRONLY|O_CREAT|O_TRUNC".
pub fn open_flags(flags: u64) -> String {
    // One string, no parts: opensnoop decodes this for every open.
    let mut out = String::with_capacity(48);
    let mut rest = flags & !o::ACCMODE;
    if flags & o::PATH != 0 {
        out.push_str("O_PATH");
        rest &= !o::PATH;
    } else {
        out.push_str(match flags & o::ACCMODE {
            o::RDONLY => "O_RDONLY",
            o::WRONLY => "O_WRONLY",
            o::RDWR => "O_RDWR",
            _ => "O_ACCMODE",
        });
    }
    for &(bits, name) in FLAG_NAMES {
        if rest & bits == bits {
            out.push('|');
            out.push_str(name);
            rest &= !bits;
        }
    }
    if rest != 0 {
        use std::fmt::Write;
        let _ = write!(out, "|{rest:#x}");
    }
    out
}

/// Parse flag names back (`O_WRONLY|O_CREAT`, also `,`-separated, `O_` optional, any
/// case) into bits; an error names the token it does not know.
pub fn parse_open_flags(s: &str) -> Result<u64, String> {
    let mut bits = 0;
    for token in s.split(['|', ',']).map(str::trim).filter(|t| !t.is_empty()) {
        let upper = token.to_ascii_uppercase();
        let name = if upper.starts_with("O_") { upper } else { format!("O_{upper}") };
        bits |= match name.as_str() {
            "O_RDONLY" => o::RDONLY,
            "O_WRONLY" => o::WRONLY,
            "O_RDWR" => o::RDWR,
            "O_PATH" => o::PATH,
            n => match FLAG_NAMES.iter().find(|(_, f)| *f == n) {
                Some((b, _)) => *b,
                None => return Err(format!("`{token}` is not an open flag (O_CREAT, O_APPEND, O_TRUNC…)")),
            },
        };
    }
    Ok(bits)
}

/// True if `flags` may create a file (O_CREAT or O_TMPFILE).
pub fn creates(flags: u64) -> bool {
    flags & o::CREAT != 0 || flags & o::TMPFILE == o::TMPFILE
}

/// A file mode in octal, as strace prints it: "0644"; "0" for 0.
pub fn format_mode(mode: u64) -> String {
    if mode == 0 {
        "0".into()
    } else {
        format!("0{mode:o}")
    }
}

/// The dir-fd argument: "AT_FDCWD" for -100, else the number.
pub fn format_dirfd(fd: i64) -> String {
    if fd == -100 {
        "AT_FDCWD".into()
    } else {
        fd.to_string()
    }
}

const SIGNALS: [&str; 31] = [
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];
const SIGRTMIN: i32 = 34;
const SIGRTMAX: i32 = 64;

/// Name of signal `sig`: "SIGKILL"; real-time signals as "SIGRTMIN+3"; None if unknown.
pub fn signal_name(sig: i32) -> Option<String> {
    match sig {
        1..=31 => Some(SIGNALS[sig as usize - 1].to_string()),
        SIGRTMIN => Some("SIGRTMIN".into()),
        35..=SIGRTMAX => Some(format!("SIGRTMIN+{}", sig - SIGRTMIN)),
        _ => None,
    }
}

/// Number of the signal called `name` ("SIGKILL", "kill", "SIGRTMIN+2"; any case).
pub fn signal_nr(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    if let Some(i) = SIGNALS.iter().position(|s| *s == full) {
        return Some(i as i32 + 1);
    }
    match full.as_str() {
        "SIGIOT" => Some(6),
        "SIGPOLL" => Some(29),
        "SIGRTMIN" => Some(SIGRTMIN),
        "SIGRTMAX" => Some(SIGRTMAX),
        s => {
            let n: i32 = s.strip_prefix("SIGRTMIN+")?.parse().ok()?;
            (0..=SIGRTMAX - SIGRTMIN).contains(&n).then_some(SIGRTMIN + n)
        }
    }
}

/// A wait(2) status decoded: "exit 0", "exit 3", "killed by SIGKILL", "killed by SIGSEGV
/// (core dumped)", "stopped by SIGSTOP", "continued".
pub fn wait_status(status: i32) -> String {
    let sig = status & 0x7f;
    let name = |s: i32| signal_name(s).unwrap_or_else(|| format!("signal {s}"));
    if status == 0xffff {
        "continued".into()
    } else if sig == 0 {
        format!("exit {}", (status >> 8) & 0xff)
    } else if sig == 0x7f {
        format!("stopped by {}", name((status >> 8) & 0xff))
    } else if status & 0x80 != 0 {
        format!("killed by {} (core dumped)", name(sig))
    } else {
        format!("killed by {}", name(sig))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_names_and_numbers() {
        assert_eq!(syscall_name(nr::OPENAT), Some("openat"));
        assert_eq!(syscall_nr("wait4"), Some(nr::WAIT4));
        for (n, name) in [(nr::WRITE, "write"), (nr::CLONE3, "clone3"), (nr::OPENAT2, "openat2"), (nr::CREAT, "creat")]
        {
            assert_eq!(syscall_name(n), Some(name));
        }
        assert_eq!(syscall_name(100_000), None);
    }

    #[test]
    fn arguments_come_from_the_tracepoint_formats() {
        let names = |n| syscall_args(n).unwrap().iter().map(|a| a.name).collect::<Vec<_>>();
        assert_eq!(names(nr::OPENAT), ["dfd", "filename", "flags", "mode"]);
        assert_eq!(names(nr::WRITE), ["fd", "buf", "count"]);
        let kinds = |n| syscall_args(n).unwrap().iter().map(|a| a.kind).collect::<Vec<_>>();
        assert_eq!(kinds(nr::OPENAT), [ArgKind::DirFd, ArgKind::Path, ArgKind::OpenFlags, ArgKind::Mode]);
        assert_eq!(kinds(nr::WRITE), [ArgKind::Fd, ArgKind::Str, ArgKind::Size]);
        assert_eq!(kinds(nr::KILL), [ArgKind::Pid, ArgKind::Signal]);
        // Renamed tracepoints: sys_enter_newfstat is fstat's.
        assert_eq!(names(syscall_nr("fstat").unwrap()), ["fd", "statbuf"]);
        // Many syscalls are covered.
        assert!((0..470).filter(|n| syscall_args(*n).is_some()).count() > 300);
    }

    #[test]
    fn arguments_print_like_strace() {
        let args = [(-100i64) as u64, 0x7ffc_1234, 0o1101, 0o644, 0, 0];
        assert_eq!(
            format_args(nr::OPENAT, &args),
            "dfd=AT_FDCWD, filename=0x7ffc1234, flags=O_WRONLY|O_CREAT|O_TRUNC, mode=0644"
        );
        assert_eq!(format_args(nr::KILL, &[42, 9, 0, 0, 0, 0]), "pid=42, sig=SIGKILL");
        assert_eq!(format_args(nr::WRITE, &[(-1i64) as u64, 0, 5, 0, 0, 0]), "fd=-1, buf=NULL, count=5");
        assert_eq!(format_arg(nr::OPENAT, 9, 7), "7");
        // 64-bit types keep their width; 32-bit ones are cut; addresses are hex.
        assert_eq!(format_arg(8, 1, (-5_000_000_000i64) as u64), "-5000000000", "lseek's off_t offset");
        assert_eq!(format_arg(nr::WRITE, 2, 1 << 33), (1u64 << 33).to_string());
        assert_eq!(format_arg(nr::OPENAT, 2, 0xffff_ffff_0000_0000 | 0o101), "O_WRONLY|O_CREAT");
        assert_eq!(format_arg(syscall_nr("munmap").unwrap(), 0, 0x7f00_0000_1000), "0x7f0000001000");
        // Tracepoints named after the kernel function, not the syscall.
        assert!(
            syscall_args(syscall_nr("sendfile").unwrap()).is_some()
                && syscall_args(syscall_nr("umount2").unwrap()).is_some()
        );
        assert_eq!(
            syscall_args(syscall_nr("rseq").unwrap()).unwrap()[3].kind,
            ArgKind::Uint,
            "rseq's sig is a signature"
        );
    }

    #[test]
    fn errnos_round_trip_and_carry_messages() {
        for (n, name, _) in errno_table::ERRNOS {
            assert_eq!(errno_name(*n), Some(*name));
            assert_eq!(errno_name(-n), Some(*name));
            assert_eq!(errno_nr(name), Some(*n));
        }
        assert_eq!(errno_table::ERRNOS.iter().filter(|(n, _, _)| *n <= 133).count(), 131); // 41 and 58 unused
        assert_eq!(errno_message(-2), Some("No such file or directory"));
        assert_eq!(errno_message(512), None);
        assert_eq!((errno_nr("EWOULDBLOCK"), errno_nr("ENOTSUP")), (Some(11), Some(95)));
        assert_eq!((errno_name(0), errno_name(41), errno_name(i64::MIN)), (None, None, None));
        assert_eq!(format_ret(-2), "-2 ENOENT");
        assert_eq!(format_ret(3), "3");
        assert_eq!(format_ret(-4000), "-4000");
    }

    #[test]
    fn open_flags_decode_in_a_fixed_order() {
        assert_eq!(open_flags(0), "O_RDONLY");
        assert_eq!(open_flags(0o101), "O_WRONLY|O_CREAT");
        assert_eq!(open_flags(0o1101), "O_WRONLY|O_CREAT|O_TRUNC");
        assert_eq!(open_flags(0o2101), "O_WRONLY|O_CREAT|O_APPEND");
        assert_eq!(open_flags(0o2000002), "O_RDWR|O_CLOEXEC");
        assert_eq!(open_flags(o::SYNC), "O_RDONLY|O_SYNC");
        assert_eq!(open_flags(o::DSYNC), "O_RDONLY|O_DSYNC");
        assert_eq!(open_flags(o::TMPFILE | o::RDWR), "O_RDWR|O_TMPFILE");
        assert_eq!(open_flags(o::DIRECTORY), "O_RDONLY|O_DIRECTORY");
        assert_eq!(open_flags(o::PATH | o::CLOEXEC), "O_PATH|O_CLOEXEC");
        assert_eq!(open_flags(0o3), "O_ACCMODE");
        assert_eq!(open_flags(0x4000_0000 | 1), "O_WRONLY|0x40000000");
    }

    #[test]
    fn open_flags_parse_back_with_errors_naming_the_token() {
        assert_eq!(parse_open_flags("O_WRONLY|O_CREAT"), Ok(0o101));
        assert_eq!(parse_open_flags("creat, append"), Ok(0o2100));
        assert_eq!(parse_open_flags(""), Ok(0));
        let err = parse_open_flags("O_CREAT|O_CRAET").unwrap_err();
        assert!(err.contains("`O_CRAET`"), "{err}");
        for bits in [0o1101, 0o2000002, o::SYNC, o::TMPFILE | o::RDWR, o::PATH] {
            assert_eq!(parse_open_flags(&open_flags(bits)), Ok(bits), "{}", open_flags(bits));
        }
        assert!(creates(0o101) && creates(o::TMPFILE) && !creates(o::DIRECTORY) && !creates(0o2));
    }

    #[test]
    fn modes_and_dirfds() {
        assert_eq!(
            (format_mode(0), format_mode(0o644), format_mode(0o4755)),
            ("0".into(), "0644".into(), "04755".into())
        );
        assert_eq!((format_dirfd(-100), format_dirfd(3)), ("AT_FDCWD".into(), "3".into()));
    }

    #[test]
    fn signals_round_trip() {
        for sig in 1..=64 {
            if sig == 32 || sig == 33 {
                assert_eq!(signal_name(sig), None);
                continue;
            }
            let name = signal_name(sig).unwrap();
            assert_eq!(signal_nr(&name), Some(sig), "{name}");
        }
        assert_eq!(signal_name(9).as_deref(), Some("SIGKILL"));
        assert_eq!(signal_name(36).as_deref(), Some("SIGRTMIN+2"));
        assert_eq!((signal_nr("kill"), signal_nr("sigterm"), signal_nr("SIGNOPE")), (Some(9), Some(15), None));
    }

    #[test]
    fn wait_statuses_decode() {
        assert_eq!(wait_status(0), "exit 0");
        assert_eq!(wait_status(3 << 8), "exit 3");
        assert_eq!(wait_status(9), "killed by SIGKILL");
        assert_eq!(wait_status(11 | 0x80), "killed by SIGSEGV (core dumped)");
        assert_eq!(wait_status((19 << 8) | 0x7f), "stopped by SIGSTOP");
        assert_eq!(wait_status(0xffff), "continued");
    }
}

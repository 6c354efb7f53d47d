//! Typed, zero-copy views of the records in a batch.
//!
//! An [`Event`] borrows the batch the host handed to `on-batch`; nothing is copied
//! until a plugin asks for an owned value (a `String`, a [`Comm`], a [`Stack`]). Every
//! accessor reads through `wasmtap_abi`'s bounds-checked loads, so a short or corrupt
//! record yields zeros or `None`, never a panic.

use std::borrow::Cow;
use std::fmt;
use std::rc::Rc;

use wasmtap_abi::{exec, exit, fork, open, sample, sys_enter, sys_exit, user, Frames, Kind, Record, COMM_LEN};

use crate::stack::Stack;
use crate::tracepoint::{schema, Schema, Tracepoint};

/// One kernel event, by kind. Fields every kind shares are methods on `Event` itself.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// `tracepoint:raw_syscalls:sys_enter`, `syscall:NAME:entry`.
    SysEnter(SysEnter<'a>),
    /// `tracepoint:raw_syscalls:sys_exit`, `syscall:NAME:exit`.
    SysExit(SysExit<'a>),
    /// `proc:exec`: a completed execve/execveat.
    Exec(Exec<'a>),
    /// `proc:fork`: a fork/clone; the common fields describe the parent.
    Fork(Fork<'a>),
    /// `proc:exit`: a task exit.
    Exit(Exit<'a>),
    /// Any other tracepoint, `tracepoint:CAT:NAME`, with the kernel's raw entry.
    Tracepoint(Tracepoint<'a>),
    /// `uprobe:`, `uretprobe:` or `usdt:`.
    User(UserProbe<'a>),
    /// `profile:hz:N` and `software:*`: a perf software event.
    Sample(Sample<'a>),
    /// `file:open`: a completed open, openat, openat2 or creat, with its path.
    Open(Open<'a>),
}

impl<'a> Event<'a> {
    /// The typed view of `rec`; `None` for a kind this SDK does not know.
    #[inline]
    pub fn new(rec: Record<'a>) -> Option<Self> {
        Some(match rec.kind()? {
            Kind::SysEnter => Event::SysEnter(SysEnter(rec)),
            Kind::SysExit => Event::SysExit(SysExit(rec)),
            Kind::Exec => Event::Exec(Exec(rec)),
            Kind::Fork => Event::Fork(Fork(rec)),
            Kind::Exit => Event::Exit(Exit(rec)),
            Kind::Tracepoint => Event::Tracepoint(Tracepoint(rec)),
            Kind::User => Event::User(UserProbe(rec)),
            Kind::Sample => Event::Sample(Sample(rec)),
            Kind::Open => Event::Open(Open(rec)),
        })
    }

    /// The raw record, for fields this view does not cover.
    #[inline]
    pub fn record(&self) -> Record<'a> {
        match *self {
            Event::SysEnter(SysEnter(r))
            | Event::SysExit(SysExit(r))
            | Event::Exec(Exec(r))
            | Event::Fork(Fork(r))
            | Event::Exit(Exit(r))
            | Event::Tracepoint(Tracepoint(r))
            | Event::User(UserProbe(r))
            | Event::Sample(Sample(r))
            | Event::Open(Open(r)) => r,
        }
    }

    /// The record kind.
    #[inline]
    pub fn kind(&self) -> Kind {
        match self {
            Event::SysEnter(_) => Kind::SysEnter,
            Event::SysExit(_) => Kind::SysExit,
            Event::Exec(_) => Kind::Exec,
            Event::Fork(_) => Kind::Fork,
            Event::Exit(_) => Kind::Exit,
            Event::Tracepoint(_) => Kind::Tracepoint,
            Event::User(_) => Kind::User,
            Event::Sample(_) => Kind::Sample,
            Event::Open(_) => Kind::Open,
        }
    }

    /// Index into the plan's `subscriptions` of the probe that matched.
    #[inline]
    pub fn sub(&self) -> u16 {
        self.record().sub()
    }

    /// The layout of this event's subscription (tracepoint fields, probe argument
    /// names), fetched from the host once per subscription.
    pub fn schema(&self) -> Option<Rc<Schema>> {
        schema(u32::from(self.sub()))
    }

    /// The kernel and user stacks recorded with the event (innermost frame first), if
    /// its subscription asked for them ([`Subscription::stacks`](crate::Subscription::stacks)).
    /// A stack the kernel could not walk is empty.
    pub fn stacks(&self) -> Option<(Frames<'a>, Frames<'a>)> {
        self.record().stacks()
    }

    /// The stacks as an owned, hashable aggregation key ([`Stack`]). Its pid is this
    /// event's if there are user frames (they need it to be symbolized) and 0 otherwise,
    /// so one kernel stack is one key whichever process hit it, like bpftrace's
    /// `@[kstack]`.
    pub fn stack(&self) -> Option<Stack> {
        let (kernel, user) = self.stacks()?;
        let pid = if user.is_empty() { 0 } else { self.pid() };
        Some(Stack::from_frames(pid, kernel, user))
    }

    /// CLOCK_MONOTONIC nanoseconds (the clock of `services.monotonic-ns`).
    #[inline]
    pub fn ts_ns(&self) -> u64 {
        self.record().ts_ns()
    }

    /// Process id (the kernel's tgid).
    #[inline]
    pub fn pid(&self) -> u32 {
        self.record().pid()
    }

    /// Thread id (the kernel's pid).
    #[inline]
    pub fn tid(&self) -> u32 {
        self.record().tid()
    }

    /// Real user id.
    #[inline]
    pub fn uid(&self) -> u32 {
        self.record().uid()
    }

    /// Real group id.
    #[inline]
    pub fn gid(&self) -> u32 {
        self.record().gid()
    }

    /// cgroup v2 id.
    #[inline]
    pub fn cgroup_id(&self) -> u64 {
        self.record().cgroup_id()
    }

    /// Command name bytes, without NUL padding (at most 15 bytes).
    pub fn comm_bytes(&self) -> &'a [u8] {
        self.record().comm()
    }

    /// Command name as text; invalid UTF-8 becomes U+FFFD. Borrows unless it must repair.
    pub fn comm(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.comm_bytes())
    }

    /// Command name as a small `Copy` value, cheap to use as an aggregation key.
    pub fn comm_key(&self) -> Comm {
        Comm::new(self.comm_bytes())
    }

    /// The command name contains `needle` (the `name=` filter of the vetted plugins);
    /// the empty needle is in every name.
    pub fn comm_contains(&self, needle: &[u8]) -> bool {
        needle.is_empty() || self.comm_bytes().windows(needle.len()).any(|w| w == needle)
    }
}

/// A syscall entry.
#[derive(Clone, Copy, Debug)]
pub struct SysEnter<'a>(Record<'a>);

impl SysEnter<'_> {
    /// Syscall number (x86_64).
    pub fn id(&self) -> i64 {
        self.0.i64_at(sys_enter::ID).unwrap_or(-1)
    }

    /// The syscall, with its name.
    pub fn syscall(&self) -> Syscall {
        Syscall(self.id())
    }

    /// The syscall's name (`openat`), if the number is in use.
    pub fn name(&self) -> Option<&'static str> {
        self.syscall().name()
    }

    /// Argument `i` (0 to 5) as the raw register value; 0 past the sixth.
    pub fn arg(&self, i: usize) -> u64 {
        if i >= 6 {
            return 0;
        }
        self.0.u64_at(sys_enter::ARGS + 8 * i).unwrap_or(0)
    }

    /// All six arguments.
    pub fn args(&self) -> [u64; 6] {
        std::array::from_fn(|i| self.arg(i))
    }
}

/// A syscall exit.
#[derive(Clone, Copy, Debug)]
pub struct SysExit<'a>(Record<'a>);

impl SysExit<'_> {
    /// Syscall number (x86_64).
    pub fn id(&self) -> i64 {
        self.0.i64_at(sys_exit::ID).unwrap_or(-1)
    }

    /// The syscall, with its name.
    pub fn syscall(&self) -> Syscall {
        Syscall(self.id())
    }

    /// The syscall's name (`openat`), if the number is in use.
    pub fn name(&self) -> Option<&'static str> {
        self.syscall().name()
    }

    /// Return value; `-errno` on failure.
    pub fn ret(&self) -> i64 {
        self.0.i64_at(sys_exit::RET).unwrap_or(0)
    }
}

/// A completed exec. The common fields (comm, pid) describe the task after the exec.
#[derive(Clone, Copy, Debug)]
pub struct Exec<'a>(Record<'a>);

impl<'a> Exec<'a> {
    /// Parent process id.
    pub fn ppid(&self) -> u32 {
        self.0.u32_at(exec::PPID).unwrap_or(0)
    }

    /// execve's return value: 0, or `-errno` if the exec failed.
    pub fn ret(&self) -> i32 {
        self.0.i32_at(exec::RET).unwrap_or(0)
    }

    /// Number of arguments kept (at most 32).
    pub fn argc(&self) -> u32 {
        self.0.u32_at(exec::ARGC).unwrap_or(0)
    }

    /// The collector cut argv: too many arguments, or too many bytes.
    pub fn truncated(&self) -> bool {
        self.0.flags() & exec::FLAG_TRUNCATED != 0
    }

    /// The kept arguments, `argv[0]` first, as raw bytes without their NULs.
    pub fn args(&self) -> Args<'a> {
        let len = self.0.u32_at(exec::ARGS_LEN).unwrap_or(0) as usize;
        let avail = self.0.bytes().len().saturating_sub(exec::ARGS);
        let mut bytes = self.0.slice(exec::ARGS, len.min(avail)).unwrap_or(&[]);
        if let [rest @ .., 0] = bytes {
            bytes = rest;
        }
        let left = if len == 0 { 0 } else { self.argc() };
        Args { bytes, left }
    }

    /// The kept arguments joined by single spaces; invalid UTF-8 becomes U+FFFD.
    pub fn args_joined(&self) -> String {
        let mut s = String::new();
        for (i, arg) in self.args().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&String::from_utf8_lossy(arg));
        }
        s
    }
}

/// Iterator over an exec's arguments; see [`Exec::args`].
#[derive(Clone, Debug)]
pub struct Args<'a> {
    bytes: &'a [u8],
    left: u32,
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (arg, rest) = match self.bytes.iter().position(|&b| b == 0) {
            Some(nul) => (&self.bytes[..nul], &self.bytes[nul + 1..]),
            None => {
                // The last argument; nothing can follow it.
                self.left = 0;
                (self.bytes, &[][..])
            }
        };
        self.bytes = rest;
        Some(arg)
    }
}

/// A fork or clone; the common fields describe the parent.
#[derive(Clone, Copy, Debug)]
pub struct Fork<'a>(Record<'a>);

impl Fork<'_> {
    /// The child's process id (tgid); equals the parent's for a new thread.
    pub fn child_pid(&self) -> u32 {
        self.0.u32_at(fork::CHILD_PID).unwrap_or(0)
    }

    /// The child's thread id.
    pub fn child_tid(&self) -> u32 {
        self.0.u32_at(fork::CHILD_TID).unwrap_or(0)
    }

    /// The child is a thread of the parent process (`CLONE_THREAD`).
    pub fn is_thread(&self) -> bool {
        self.0.flags() & fork::FLAG_THREAD != 0
    }
}

/// A task exit.
#[derive(Clone, Copy, Debug)]
pub struct Exit<'a>(Record<'a>);

impl Exit<'_> {
    /// The raw wait(2) status, `code << 8 | signal` (the kernel's `task->exit_code`).
    pub fn exit_code(&self) -> i32 {
        self.0.i32_at(exit::EXIT_CODE).unwrap_or(0)
    }

    /// The exit code given to exit(2) (`WEXITSTATUS`); 0 if a signal killed the task.
    pub fn code(&self) -> i32 {
        (self.exit_code() >> 8) & 0xff
    }

    /// The signal that killed the task (`WTERMSIG`); 0 if it exited normally.
    pub fn signal(&self) -> i32 {
        self.exit_code() & 0x7f
    }

    /// The task dumped core (`WCOREDUMP`).
    pub fn core_dumped(&self) -> bool {
        self.exit_code() & 0x80 != 0
    }

    /// Parent process id.
    pub fn ppid(&self) -> u32 {
        self.0.u32_at(exit::PPID).unwrap_or(0)
    }

    /// When the task started, CLOCK_MONOTONIC nanoseconds: `ts_ns - start_ns` is its age.
    pub fn start_ns(&self) -> u64 {
        self.0.u64_at(exit::START_NS).unwrap_or(0)
    }

    /// This was the last thread of its process: the process is gone.
    pub fn group_dead(&self) -> bool {
        self.0.flags() & exit::FLAG_GROUP_DEAD != 0
    }

    /// CPU time of the process so far (its threads already reaped plus this one), the
    /// scheduler's exact runtime in nanoseconds; `None` in recordings made before it
    /// was collected. At the last thread's exit it is the whole process's.
    pub fn cpu_ns(&self) -> Option<u64> {
        self.0.u64_at(exit::CPU_NS)
    }

    /// The user and system parts of the same, as the kernel samples them at each tick
    /// (the `utime`/`stime` of `/proc/PID/stat`, in nanoseconds).
    pub fn user_sys_ns(&self) -> Option<(u64, u64)> {
        Some((self.0.u64_at(exit::USER_NS)?, self.0.u64_at(exit::SYS_NS)?))
    }
}

/// `AT_FDCWD`: the dir fd meaning "the current directory".
pub const AT_FDCWD: i32 = -100;

/// A completed open, openat, openat2 or creat (`file:open`), emitted at its return.
#[derive(Clone, Copy, Debug)]
pub struct Open<'a>(Record<'a>);

impl<'a> Open<'a> {
    /// The syscall: open (2), creat (85), openat (257) or openat2 (437) on x86_64.
    pub fn syscall(&self) -> Syscall {
        Syscall(i64::from(self.0.i32_at(open::NR).unwrap_or(-1)))
    }

    /// The dir fd the path is relative to; [`AT_FDCWD`] for open and creat.
    pub fn dfd(&self) -> i32 {
        self.0.i32_at(open::DFD).unwrap_or(AT_FDCWD)
    }

    /// The open flags (`O_*`; openat2: `how.flags`; creat: `O_WRONLY|O_CREAT|O_TRUNC`).
    pub fn flags(&self) -> u64 {
        self.0.u64_at(open::FLAGS).unwrap_or(0)
    }

    /// The mode a created file gets (before the umask).
    pub fn mode(&self) -> u64 {
        self.0.u64_at(open::MODE).unwrap_or(0)
    }

    /// The new fd, or `-errno` if the open failed.
    pub fn ret(&self) -> i64 {
        self.0.i64_at(open::RET).unwrap_or(0)
    }

    /// Nanoseconds from the syscall's entry to its return.
    pub fn latency_ns(&self) -> u64 {
        self.0.u64_at(open::LATENCY_NS).unwrap_or(0)
    }

    fn data(&self, from: usize, len: usize) -> &'a [u8] {
        let avail = self.0.bytes().len().saturating_sub(open::DATA);
        let from = from.min(avail);
        self.0.slice(open::DATA + from, len.min(avail - from)).unwrap_or(&[])
    }

    fn path_len(&self) -> usize {
        usize::from(self.0.u16_at(open::PATH_LEN).unwrap_or(0))
    }

    /// The path as the program passed it, without its NUL; empty if the kernel could
    /// not read it (a bad pointer: the open then failed with EFAULT).
    pub fn path_bytes(&self) -> &'a [u8] {
        let mut p = self.data(0, self.path_len());
        if let [rest @ .., 0] = p {
            p = rest;
        }
        p
    }

    /// The path as passed; invalid UTF-8 becomes U+FFFD.
    pub fn path(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.path_bytes())
    }

    /// The path was longer than the 512 bytes kept.
    pub fn path_truncated(&self) -> bool {
        self.0.flags() & open::FLAG_PATH_TRUNCATED != 0
    }

    /// For a relative path, the names of the directory it is relative to (the cwd, or
    /// the dir fd's directory), innermost first, up to the process's root. Empty for an
    /// absolute path, or when the directory was not walked.
    pub fn base_names(&self) -> impl Iterator<Item = &'a [u8]> {
        let len = usize::from(self.0.u16_at(open::BASE_LEN).unwrap_or(0));
        let depth = usize::from(self.0.u16_at(open::BASE_DEPTH).unwrap_or(0));
        let bytes = self.data(self.path_len(), len);
        bytes.split(|&b| b == 0).take(depth)
    }

    /// The directory walk stopped before the root (deeper than 24 names, or too long):
    /// [`Open::full_path`] then starts with `…/`.
    pub fn base_truncated(&self) -> bool {
        self.0.flags() & open::FLAG_BASE_TRUNCATED != 0
    }

    /// The path made absolute, as DTrace's `fi_pathname` and libbpf-tools opensnoop's
    /// `--full-path` show it: a relative path is joined to its directory (leading `./`
    /// dropped). An absolute path, or one whose directory was not walked, is as passed.
    pub fn full_path(&self) -> String {
        let path = self.path();
        if path.starts_with('/') || path.is_empty() {
            return path.into_owned();
        }
        if self.0.flags() & open::FLAG_BASE_WALKED == 0 {
            return path.into_owned();
        }
        let names: Vec<&[u8]> = self.base_names().collect();
        let mut full = String::new();
        if self.base_truncated() {
            full.push('…');
        }
        for name in names.iter().rev() {
            full.push('/');
            full.push_str(&String::from_utf8_lossy(name));
        }
        let mut rel: &str = &path;
        while let Some(rest) = rel.strip_prefix("./") {
            rel = rest.trim_start_matches('/');
        }
        if rel != "." {
            full.push('/');
            full.push_str(rel);
        } else if full.is_empty() {
            full.push('/');
        }
        full
    }
}

/// A uprobe, uretprobe or USDT probe firing.
#[derive(Clone, Copy, Debug)]
pub struct UserProbe<'a>(Record<'a>);

impl<'a> UserProbe<'a> {
    /// The host's index of the attached probe; [`Event::sub`] is what tells the plan's
    /// subscriptions apart.
    pub fn probe(&self) -> u32 {
        self.0.u32_at(user::PROBE).unwrap_or(0)
    }

    /// The probed instruction's address in the process.
    pub fn ip(&self) -> u64 {
        self.0.u64_at(user::IP).unwrap_or(0)
    }

    /// Number of valid arguments (at most 12).
    pub fn nargs(&self) -> usize {
        (self.0.u32_at(user::NARGS).unwrap_or(0) as usize).min(user::ARGS_MAX)
    }

    /// Argument `i` as a raw 64-bit value: uprobes, the SysV integer argument registers
    /// (`arg0`..`arg5`); USDT, the probe's evaluated arguments. 0 past [`nargs`](Self::nargs).
    pub fn arg(&self, i: usize) -> u64 {
        if i >= self.nargs() {
            return 0;
        }
        self.0.u64_at(user::ARGS + 8 * i).unwrap_or(0)
    }

    /// The argument the probe's schema calls `name` (a USDT argument name, or `arg0`..).
    pub fn arg_named(&self, name: &str) -> Option<u64> {
        let i = schema(u32::from(self.0.sub()))?.arg_index(name)?;
        (i < self.nargs()).then(|| self.arg(i))
    }

    /// This is a return probe (`uretprobe:`).
    pub fn is_return(&self) -> bool {
        self.0.flags() & user::FLAG_RETURN != 0
    }

    /// A return probe's return value (the raw `rax`); `None` for an entry probe.
    pub fn retval(&self) -> Option<u64> {
        self.is_return().then(|| self.0.u64_at(user::ARGS).unwrap_or(0))
    }

    /// The string that argument `i` points to in the traced process (`retval` is 0), as
    /// the kernel read it when the probe fired: for subscriptions whose plugin asked for
    /// it with [`user_strings`](crate::user_strings). `None` if the record carries no
    /// string of it; `Some(None)` if the kernel could not read it.
    pub fn user_string(&self, i: usize) -> Option<Option<&'a [u8]>> {
        self.0.string(u16::try_from(i).ok()?)
    }
}

/// A perf software event: a `profile:hz:N` sample or a `software:NAME:N` event.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a>(Record<'a>);

impl Sample<'_> {
    /// The perf software event, `PERF_COUNT_SW_*` (0 cpu-clock, 2 page faults, 5 minor
    /// faults, 6 major faults, ...).
    pub fn event(&self) -> u32 {
        self.0.u32_at(sample::EVENT).unwrap_or(0)
    }

    /// The CPU it happened on.
    pub fn cpu(&self) -> u32 {
        self.0.u32_at(sample::CPU).unwrap_or(0)
    }

    /// Page faults: the faulting address; 0 for other events.
    pub fn addr(&self) -> u64 {
        self.0.u64_at(sample::ADDR).unwrap_or(0)
    }

    /// The interrupted instruction.
    pub fn ip(&self) -> u64 {
        self.0.u64_at(sample::IP).unwrap_or(0)
    }
}

/// Where a record's own bytes end: before its stack trailer, if it has one.
pub(crate) fn body_end(rec: &Record<'_>) -> usize {
    let len = rec.bytes().len();
    match rec.stacks() {
        Some((kernel, user)) => len.saturating_sub(8 + 8 * (kernel.len() + user.len())),
        None => len,
    }
}

/// A syscall number that displays as its name (`openat`), or as the number if unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Syscall(pub i64);

impl Syscall {
    /// A parameter such as `"openat, read"` as the syscall names a
    /// [`Filter`](crate::Filter)'s `syscalls` takes, checked against the x86_64 table;
    /// decimal numbers become their names, empty parts are skipped. The error names the
    /// first unknown syscall.
    ///
    /// ```
    /// use wasmtap_sdk::Syscall;
    /// assert_eq!(Syscall::parse_list("read, 1,,openat"), Ok(vec!["read".into(), "write".into(), "openat".into()]));
    /// assert!(Syscall::parse_list("read,opne").unwrap_err().contains("'opne'"));
    /// ```
    pub fn parse_list(list: &str) -> Result<Vec<String>, String> {
        let names = list.split(',').map(str::trim).filter(|s| !s.is_empty());
        names
            .map(|name| {
                let known = match name.parse::<i64>() {
                    Ok(nr) => wasmtap_abi::syscall_name(nr),
                    Err(_) => Syscall::from_name(name).map(|_| name),
                };
                known.map(str::to_string).ok_or_else(|| format!("no x86_64 syscall named '{name}'"))
            })
            .collect()
    }

    /// A kernel aggregation's entry keyed first by syscall number
    /// ([`AggSource::Syscall`](crate::AggSource::Syscall)), keyed by the syscall's name
    /// instead (the number as text if the table has no name for it).
    pub fn named_entry(mut entry: crate::AggEntry) -> crate::AggEntry {
        if let Some(crate::Value::Int(nr)) = entry.key.first() {
            entry.key[0] = crate::Value::Text(Syscall(*nr).to_string());
        }
        entry
    }

    /// The syscall called `name` (x86_64 table), if any.
    pub fn from_name(name: &str) -> Option<Syscall> {
        wasmtap_abi::syscall_number(name).map(|nr| Syscall(i64::from(nr)))
    }

    /// The number.
    pub fn nr(self) -> i64 {
        self.0
    }

    /// The name, if the number is in use.
    pub fn name(self) -> Option<&'static str> {
        wasmtap_abi::syscall_name(self.0)
    }
}

impl fmt::Display for Syscall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

/// A task command name held by value: `Copy`, hashable, no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Comm {
    bytes: [u8; COMM_LEN],
}

impl Comm {
    /// The name in `bytes`, cut at the first NUL and at 15 bytes like the kernel does.
    pub fn new(bytes: &[u8]) -> Comm {
        let mut out = [0; COMM_LEN];
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len()).min(COMM_LEN - 1);
        out[..end].copy_from_slice(&bytes[..end]);
        Comm { bytes: out }
    }

    /// The name's bytes, without NUL padding.
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.bytes.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
        &self.bytes[..end]
    }

    /// The name as text; invalid UTF-8 becomes U+FFFD.
    pub fn to_str_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.as_bytes())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_str_lossy())
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Comm({:?})", self.to_str_lossy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records::{self as t, put};
    use wasmtap_abi::{header, Records};

    fn only(batch: &[u8]) -> Event<'_> {
        let mut recs = Records::new(batch);
        let ev = Event::new(recs.next().expect("one record")).expect("known kind");
        assert!(recs.next().is_none());
        ev
    }

    #[test]
    fn open_gives_path_flags_ret_and_the_absolute_path() {
        let b = t::open(42, 257, b"/etc/passwd", 0o2000000, 3, &[]);
        let Event::Open(o) = only(&b) else { panic!() };
        assert_eq!((o.syscall().name(), o.dfd(), o.flags(), o.ret()), (Some("openat"), AT_FDCWD, 0o2000000, 3));
        assert_eq!((o.path(), o.full_path(), o.latency_ns()), ("/etc/passwd".into(), "/etc/passwd".into(), 1500));
        assert!(!o.path_truncated() && o.base_names().next().is_none());

        let b = t::open(42, 2, b"./data/x.txt", 0o101, -13, &[b"build", b"src", b"home"]);
        let Event::Open(o) = only(&b) else { panic!() };
        let names: Vec<_> = o.base_names().collect();
        assert_eq!(names, [&b"build"[..], b"src", b"home"]);
        assert_eq!(
            (o.path(), o.full_path(), o.ret()),
            ("./data/x.txt".into(), "/home/src/build/data/x.txt".into(), -13)
        );

        // The cwd is the root: walked, no names.
        let b = t::open(1, 257, b"etc", 0, 3, &[]);
        let Event::Open(o) = only(&b) else { panic!() };
        assert_eq!(o.full_path(), "/etc");
        let b = t::open(1, 257, b".", 0, 3, &[b"tmp"]);
        let Event::Open(o) = only(&b) else { panic!() };
        assert_eq!(o.full_path(), "/tmp");

        // Not walked (a bad dir fd): as passed. Too deep: marked.
        let mut b = t::open(1, 257, b"rel", 0, -9, &[]);
        t::set_flags(&mut b, 0);
        let Event::Open(o) = only(&b) else { panic!() };
        assert_eq!(o.full_path(), "rel");
        let mut b = t::open(1, 257, b"f", 0, 3, &[b"d", b"c"]);
        t::set_flags(&mut b, wasmtap_abi::open::FLAG_BASE_WALKED | wasmtap_abi::open::FLAG_BASE_TRUNCATED);
        let Event::Open(o) = only(&b) else { panic!() };
        assert_eq!(o.full_path(), "…/c/d/f");
    }

    #[test]
    fn exit_cpu_times_are_absent_in_old_records() {
        let b = t::exit_cpu(9, 0x100, 5, exit::FLAG_GROUP_DEAD, [7_000, 4_000, 2_000]);
        let Event::Exit(e) = only(&b) else { panic!() };
        assert_eq!((e.cpu_ns(), e.user_sys_ns(), e.code()), (Some(7_000), Some((4_000, 2_000)), 1));
        let mut old = t::exit(9, 9, 5, 0);
        old.truncate(exit::SIZE_WITHOUT_CPU);
        put(&mut old, header::SIZE, &(exit::SIZE_WITHOUT_CPU as u16).to_le_bytes());
        let Event::Exit(e) = only(&old) else { panic!() };
        assert_eq!((e.cpu_ns(), e.user_sys_ns(), e.signal()), (None, None, 9));
    }

    #[test]
    fn sys_enter_exposes_header_number_name_and_args() {
        let b = t::sys_enter(42, 257, [1, 2, 3, 4, 5, u64::MAX]);
        let ev = only(&b);
        assert_eq!((ev.pid(), ev.tid(), ev.uid(), ev.gid()), (42, 43, 1000, 100));
        assert_eq!((ev.ts_ns(), ev.cgroup_id(), ev.sub()), (123_456_789, 77, 0));
        assert_eq!(ev.comm(), "cat");
        assert_eq!(ev.comm_key().to_string(), "cat");
        assert!(ev.comm_contains(b"") && ev.comm_contains(b"at") && !ev.comm_contains(b"cats"));
        assert_eq!(ev.kind(), Kind::SysEnter);
        let Event::SysEnter(s) = ev else { panic!("{ev:?}") };
        assert_eq!(s.syscall().name(), Some("openat"));
        assert_eq!(s.name(), Some("openat"));
        assert_eq!(s.args(), [1, 2, 3, 4, 5, u64::MAX]);
        assert_eq!(s.arg(6), 0);
    }

    #[test]
    fn unknown_syscall_numbers_display_as_numbers() {
        assert_eq!(Syscall(0).to_string(), "read");
        assert_eq!(Syscall(100_000).to_string(), "100000");
        assert_eq!(Syscall(-1).to_string(), "-1");
        assert_eq!(Syscall::from_name("openat"), Some(Syscall(257)));
        assert_eq!(Syscall::from_name("opne"), None);
    }

    #[test]
    fn exec_args_split_on_nul_and_keep_empty_arguments() {
        let b = t::exec(7, 0, &[b"ls", b"-l", b"", b"/tmp"]);
        let Event::Exec(e) = only(&b) else { panic!() };
        let args: Vec<&[u8]> = e.args().collect();
        assert_eq!(args, [&b"ls"[..], b"-l", b"", b"/tmp"]);
        assert_eq!(e.args_joined(), "ls -l  /tmp");
        assert_eq!((e.ppid(), e.ret(), e.argc(), e.truncated()), (1, 0, 4, false));
    }

    #[test]
    fn exec_flags_and_failure() {
        let mut b = t::exec(7, -2, &[b"nosuch"]);
        t::set_flags(&mut b, exec::FLAG_TRUNCATED);
        let Event::Exec(e) = only(&b) else { panic!() };
        assert!(e.truncated());
        assert_eq!(e.ret(), -2);
        assert_eq!(e.args_joined(), "nosuch");
    }

    #[test]
    fn exec_with_lying_lengths_stays_inside_the_record() {
        let mut b = t::exec(7, 0, &[b"a", b"b"]);
        put(&mut b, exec::ARGC, &1000u32.to_le_bytes());
        put(&mut b, exec::ARGS_LEN, &u32::MAX.to_le_bytes());
        let Event::Exec(e) = only(&b) else { panic!() };
        // The padding after "b\0" reads as empty arguments; never past the record.
        assert!(e.args().count() <= b.len() - exec::ARGS);
        assert_eq!(e.args().next(), Some(&b"a"[..]));

        let mut b = t::exec(7, 0, &[b"a"]);
        put(&mut b, exec::ARGS_LEN, &0u32.to_le_bytes());
        let Event::Exec(e) = only(&b) else { panic!() };
        assert_eq!(e.args().count(), 0);
    }

    #[test]
    fn exec_args_without_a_final_nul_end_at_the_record() {
        // Collector cut the last argument mid-way: no terminating NUL.
        let mut b = t::exec(7, 0, &[b"abcdefg"]);
        put(&mut b, exec::ARGS_LEN, &7u32.to_le_bytes());
        let Event::Exec(e) = only(&b) else { panic!() };
        assert_eq!(e.args_joined(), "abcdefg");
    }

    #[test]
    fn fork_and_exit_fields() {
        let b = t::fork(10, 10, 11, fork::FLAG_THREAD);
        let Event::Fork(f) = only(&b) else { panic!() };
        assert_eq!((f.child_pid(), f.child_tid(), f.is_thread()), (10, 11, true));

        let b = t::exit(10, 3 << 8, 5, exit::FLAG_GROUP_DEAD);
        let Event::Exit(x) = only(&b) else { panic!() };
        assert_eq!((x.exit_code(), x.code(), x.signal(), x.core_dumped()), (0x300, 3, 0, false));
        assert_eq!((x.ppid(), x.start_ns(), x.group_dead()), (1, 5, true));

        let b = t::exit(10, 0x80 | 11, 5, 0);
        let Event::Exit(x) = only(&b) else { panic!() };
        assert_eq!((x.code(), x.signal(), x.core_dumped(), x.group_dead()), (0, 11, true, false));
    }

    #[test]
    fn comm_with_invalid_utf8_is_repaired_not_rejected() {
        let mut b = t::sys_enter(1, 0, [0; 6]);
        put(&mut b, header::COMM, b"a\xffb\0\0");
        let ev = only(&b);
        assert_eq!(ev.comm_bytes(), b"a\xffb");
        assert_eq!(ev.comm(), "a\u{fffd}b");
        assert_eq!(Comm::new(b"0123456789abcdefXYZ").as_bytes(), b"0123456789abcde");
    }

    #[test]
    fn user_probe_args_and_return_values() {
        let b = t::user(9, 0, 0x40_1000, &[1, 2, 3], 0);
        let ev = only(&b);
        assert_eq!(ev.kind(), Kind::User);
        let Event::User(u) = ev else { panic!() };
        assert_eq!((u.probe(), u.ip(), u.nargs(), u.is_return(), u.retval()), (3, 0x40_1000, 3, false, None));
        assert_eq!([u.arg(0), u.arg(2), u.arg(3), u.arg(usize::MAX)], [1, 3, 0, 0]);

        let b = t::user(9, 0, 0x40_1000, &[u64::MAX], user::FLAG_RETURN);
        let Event::User(u) = only(&b) else { panic!() };
        assert_eq!((u.is_return(), u.retval()), (true, Some(u64::MAX)));

        let mut b = t::user(9, 0, 0, &[5; 12], 0);
        put(&mut b, user::NARGS, &1000u32.to_le_bytes());
        let Event::User(u) = only(&b) else { panic!() };
        assert_eq!((u.nargs(), u.arg(11), u.arg(12)), (12, 5, 0));
    }

    #[test]
    fn user_probe_args_by_schema_name() {
        let schema = crate::ProbeSchema {
            probe: "usdt:/bin/app:app:query".into(),
            fields: vec![],
            args: vec!["id".into(), "len".into(), "missing".into()],
        };
        crate::testing::set_schema(2, schema);
        let b = t::user(9, 2, 0, &[10, 20], 0);
        let ev = only(&b);
        let Event::User(u) = ev else { panic!() };
        assert_eq!(ev.schema().unwrap().args().len(), 3);
        assert_eq!((u.arg_named("len"), u.arg_named("missing"), u.arg_named("nosuch")), (Some(20), None, None));
    }

    #[test]
    fn sample_fields() {
        let b = t::sample(5, 6, 1, 0xdead_0000, 0x7f00_1234);
        let ev = only(&b);
        let Event::Sample(s) = ev else { panic!() };
        assert_eq!((s.event(), s.cpu(), s.addr(), s.ip()), (6, 1, 0xdead_0000, 0x7f00_1234));
        assert_eq!((ev.kind(), ev.pid(), ev.comm()), (Kind::Sample, 5, "busy".into()));
        assert!(ev.stacks().is_none() && ev.stack().is_none());
    }

    #[test]
    fn stack_trailers_decode_for_every_kind_that_carries_one() {
        let kernel = [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020];
        let user_frames = [0x40_1000, 0x40_2000, 0x40_3000];
        for rec in [t::sample(5, 0, 0, 0, 0), t::user(5, 0, 0, &[1], 0), t::tracepoint(5, 0, 1, &[7; 12])] {
            let b = t::with_stacks(rec, &kernel, &user_frames);
            let ev = only(&b);
            let (k, u) = ev.stacks().expect("a trailer");
            assert_eq!(k.iter().collect::<Vec<_>>(), kernel, "{:?}", ev.kind());
            assert_eq!(u.iter().collect::<Vec<_>>(), user_frames);
            let stack = ev.stack().unwrap();
            assert_eq!((stack.pid(), stack.kernel(), stack.user()), (5, &kernel[..], &user_frames[..]));
        }
        // Kernel frames only: the key does not depend on the process.
        let b = t::with_stacks(t::sample(5, 0, 0, 0, 0), &kernel, &[]);
        assert_eq!(only(&b).stack().unwrap(), crate::Stack::new(0, &kernel, &[]));
        // The user-probe view is unchanged by the trailer.
        let b = t::with_stacks(t::user(5, 0, 0x1000, &[1, 2], 0), &kernel, &[]);
        let Event::User(u) = only(&b) else { panic!() };
        assert_eq!((u.ip(), u.nargs(), u.arg(1)), (0x1000, 2, 2));
    }

    #[test]
    fn corrupt_stack_trailers_read_as_no_stacks() {
        let good = t::with_stacks(t::sample(5, 0, 0, 0, 0), &[1, 2], &[3]);
        let counts_at = good.len() - 8;
        for (kernel, user) in [(200u16, 0u16), (0, 200), (100, 100), (u16::MAX, u16::MAX)] {
            let mut b = good.clone();
            put(&mut b, counts_at, &kernel.to_le_bytes());
            put(&mut b, counts_at + 2, &user.to_le_bytes());
            assert!(only(&b).stacks().is_none(), "counts {kernel}/{user}");
        }
        // The flag on a kind that never carries stacks means nothing.
        let mut b = t::fork(1, 2, 2, 0);
        t::set_flags(&mut b, wasmtap_abi::stack::FLAG);
        assert!(only(&b).stacks().is_none());
    }
}

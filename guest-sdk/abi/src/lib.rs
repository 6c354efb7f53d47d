//! The binary event layout that collectors write, the host forwards and plugins read.
//!
//! This crate mirrors `bpf/wasmtap.h` field for field (the host's build checks the two
//! agree). It has no dependencies and no `unsafe`: every read is a bounds-checked
//! little-endian load, so a corrupt batch gives `None`, never a panic.
//!
//! A batch is records back to back. Each record starts with a [`HEADER_SIZE`]-byte
//! header whose `size` field is the whole record's length (a multiple of 8):
//!
//! ```
//! use wasmtap_abi::{Records, Kind};
//! let batch: Vec<u8> = Vec::new();
//! for rec in Records::new(&batch) {
//!     if rec.kind() == Some(Kind::SysEnter) {
//!         let _nr = rec.i64_at(wasmtap_abi::sys_enter::ID);
//!     }
//! }
//! ```
//!
//! [`hist`] is the other contract the kernel shares: the buckets of the histograms
//! that collectors, the host and plugins compute.
#![no_std]

pub mod hist;
pub mod linux;
#[cfg(test)]
mod prop_tests;
mod syscalls;
pub use syscalls::SYSCALL_NAMES;

/// Version of this layout; bumped on any incompatible change.
pub const LAYOUT_VERSION: u32 = 2;
/// Bytes in the common header (`struct wt_header`).
pub const HEADER_SIZE: usize = 56;
/// Bytes of a task command name.
pub const COMM_LEN: usize = 16;

/// Record kinds (`enum wt_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Kind {
    /// A syscall entry: [`sys_enter`].
    SysEnter = 1,
    /// A syscall exit: [`sys_exit`].
    SysExit = 2,
    /// A completed execve/execveat: [`exec`].
    Exec = 3,
    /// A fork/clone: [`fork`].
    Fork = 4,
    /// A task exit: [`exit`].
    Exit = 5,
    /// Any tracepoint, with the kernel's raw entry: [`tracepoint`].
    Tracepoint = 6,
    /// A uprobe, uretprobe or USDT probe: [`user`].
    User = 7,
    /// A perf software event (cpu-clock sampling, page faults): [`sample`].
    Sample = 8,
    /// A completed open, openat, openat2 or creat, with its path: [`open`].
    Open = 10,
}

impl Kind {
    /// Every kind, in numeric order.
    pub const ALL: [Kind; 9] = [
        Kind::SysEnter,
        Kind::SysExit,
        Kind::Exec,
        Kind::Fork,
        Kind::Exit,
        Kind::Tracepoint,
        Kind::User,
        Kind::Sample,
        Kind::Open,
    ];

    /// The kind with this number, if any.
    #[inline]
    pub fn from_u16(v: u16) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u16 == v)
    }

    /// The smallest valid record of this kind.
    pub fn min_size(self) -> usize {
        match self {
            Kind::SysEnter => sys_enter::SIZE,
            Kind::SysExit => sys_exit::SIZE,
            Kind::Exec => exec::ARGS,
            Kind::Fork => fork::SIZE,
            Kind::Exit => exit::SIZE_WITHOUT_CPU,
            Kind::Tracepoint => tracepoint::DATA,
            Kind::User => user::SIZE,
            Kind::Sample => sample::SIZE,
            Kind::Open => open::DATA,
        }
    }

    /// Kinds whose records may end with a stack trailer ([`stack`]).
    pub fn has_stacks(self) -> bool {
        matches!(self, Kind::Tracepoint | Kind::User | Kind::Sample)
    }

    /// The largest valid record of this kind.
    pub fn max_size(self) -> usize {
        match self {
            Kind::Exec => exec::MAX_SIZE,
            Kind::Exit => exit::SIZE,
            Kind::Open => open::MAX_SIZE,
            Kind::Tracepoint => tracepoint::DATA + tracepoint::DATA_MAX + strings::MAX_BYTES + stack::MAX_BYTES,
            Kind::User => user::SIZE + strings::MAX_BYTES + stack::MAX_BYTES,
            Kind::Sample => self.min_size() + stack::MAX_BYTES,
            k => k.min_size(),
        }
    }
}

/// Offsets in the common header.
pub mod header {
    /// `u16` record kind.
    pub const KIND: usize = 0;
    /// `u16` record size in bytes.
    pub const SIZE: usize = 2;
    /// `u16` index of the subscription (in the plugin's plan) that matched.
    pub const SUB: usize = 4;
    /// `u16` kind-specific flags.
    pub const FLAGS: usize = 6;
    /// `u64` CLOCK_MONOTONIC nanoseconds.
    pub const TS_NS: usize = 8;
    /// `u32` process id (tgid).
    pub const PID: usize = 16;
    /// `u32` thread id.
    pub const TID: usize = 20;
    /// `u32` real uid.
    pub const UID: usize = 24;
    /// `u32` real gid.
    pub const GID: usize = 28;
    /// `u64` cgroup v2 id.
    pub const CGROUP_ID: usize = 32;
    /// `[u8; 16]` command name, NUL-padded.
    pub const COMM: usize = 40;
}

/// `struct wt_sys_enter`.
pub mod sys_enter {
    /// `i64` syscall number.
    pub const ID: usize = 56;
    /// `[u64; 6]` arguments.
    pub const ARGS: usize = 64;
    /// Record size.
    pub const SIZE: usize = 112;
}

/// `struct wt_sys_exit`.
pub mod sys_exit {
    /// `i64` syscall number.
    pub const ID: usize = 56;
    /// `i64` return value (negative errno on failure).
    pub const RET: usize = 64;
    /// Record size.
    pub const SIZE: usize = 72;
}

/// `struct wt_exec` (variable size).
pub mod exec {
    /// `u32` parent process id.
    pub const PPID: usize = 56;
    /// `i32` execve return value.
    pub const RET: usize = 60;
    /// `u32` number of arguments kept.
    pub const ARGC: usize = 64;
    /// `u32` bytes of `args` used.
    pub const ARGS_LEN: usize = 68;
    /// NUL-separated argv.
    pub const ARGS: usize = 72;
    /// Capacity of `args`.
    pub const ARGS_MAX: usize = 2048;
    /// Largest record.
    pub const MAX_SIZE: usize = ARGS + ARGS_MAX;
    /// Header flag: argv was truncated.
    pub const FLAG_TRUNCATED: u16 = 1;
}

/// `struct wt_fork`; the header describes the parent.
pub mod fork {
    /// `u32` child process id.
    pub const CHILD_PID: usize = 56;
    /// `u32` child thread id.
    pub const CHILD_TID: usize = 60;
    /// Record size.
    pub const SIZE: usize = 64;
    /// Header flag: the child is a thread of the parent.
    pub const FLAG_THREAD: u16 = 1;
}

/// `struct wt_exit`.
pub mod exit {
    /// `i32` wait(2) status: `code << 8 | signal`.
    pub const EXIT_CODE: usize = 56;
    /// `u32` parent process id.
    pub const PPID: usize = 60;
    /// `u64` task start time, CLOCK_MONOTONIC nanoseconds.
    pub const START_NS: usize = 64;
    /// `u64` CPU time of the process so far (its threads already reaped plus this one),
    /// the scheduler's exact runtime in nanoseconds.
    pub const CPU_NS: usize = 72;
    /// `u64` the user part of the same, tick-sampled.
    pub const USER_NS: usize = 80;
    /// `u64` the system part of the same, tick-sampled.
    pub const SYS_NS: usize = 88;
    /// Record size.
    pub const SIZE: usize = 96;
    /// Size of the records of recordings made before the CPU times were added.
    pub const SIZE_WITHOUT_CPU: usize = 72;
    /// Header flag: the last thread of the process exited.
    pub const FLAG_GROUP_DEAD: u16 = 1;
}

/// `struct wt_open` (variable size): one completed open, emitted at the syscall's exit.
///
/// `data` holds the path as passed, NUL-terminated ([`PATH_LEN`] bytes with the NUL;
/// 0 when it could not be read), then, for a relative path, [`BASE_LEN`] bytes: the
/// directory it is relative to (the cwd or the dir fd's) as [`BASE_DEPTH`] names from
/// the innermost up to the process's root, each NUL-terminated.
pub mod open {
    /// `i32` the syscall: open, openat, openat2 or creat.
    pub const NR: usize = 56;
    /// `i32` the dir fd; AT_FDCWD (-100) for open and creat.
    pub const DFD: usize = 60;
    /// `u64` open flags (openat2: `how.flags`; creat: `O_CREAT|O_WRONLY|O_TRUNC`).
    pub const FLAGS: usize = 64;
    /// `u64` creation mode.
    pub const MODE: usize = 72;
    /// `i64` the new fd, or -errno.
    pub const RET: usize = 80;
    /// `u64` nanoseconds from the syscall's entry to its exit.
    pub const LATENCY_NS: usize = 88;
    /// `u16` bytes of the path, with its NUL.
    pub const PATH_LEN: usize = 96;
    /// `u16` bytes of the directory names.
    pub const BASE_LEN: usize = 98;
    /// `u16` directory names.
    pub const BASE_DEPTH: usize = 100;
    /// Path, then directory names.
    pub const DATA: usize = 104;
    /// Bytes of path kept.
    pub const PATH_MAX: usize = 512;
    /// Capacity of `data`.
    pub const DATA_MAX: usize = 1280;
    /// Largest record.
    pub const MAX_SIZE: usize = DATA + DATA_MAX;
    /// Header flag: the path was cut at [`PATH_MAX`].
    pub const FLAG_PATH_TRUNCATED: u16 = 1;
    /// Header flag: the directory is deeper than the names kept.
    pub const FLAG_BASE_TRUNCATED: u16 = 2;
    /// Header flag: the directory was walked (not for an absolute path or a bad dir fd).
    pub const FLAG_BASE_WALKED: u16 = 4;
}

/// `struct wt_tracepoint` (variable size): any tracepoint, as the kernel wrote it.
///
/// `data` is the raw trace entry; its fields sit at the offsets the tracefs format file
/// gives (the host hands plugins that schema, `host.schema`).
pub mod tracepoint {
    /// `u32` tracefs event id.
    pub const EVENT_ID: usize = 56;
    /// `u32` bytes of the entry kept in `data`.
    pub const DATA_LEN: usize = 60;
    /// The entry.
    pub const DATA: usize = 64;
    /// Largest entry kept.
    pub const DATA_MAX: usize = 4032;
    /// Header flag: the entry was cut at [`DATA_MAX`].
    pub const FLAG_TRUNCATED: u16 = 1;
}

/// `struct wt_user`: a uprobe, uretprobe or USDT probe firing.
pub mod user {
    /// `u32` the host's index of the probe (for the plugin, `sub` is what matters).
    pub const PROBE: usize = 56;
    /// `u32` valid entries of `args`.
    pub const NARGS: usize = 60;
    /// `u64` the probed instruction's address in the process.
    pub const IP: usize = 64;
    /// `[u64; 12]` uprobe: the six integer argument registers (SysV ABI); uretprobe:
    /// `args[0]` is the return value; USDT: the probe's arguments, evaluated.
    pub const ARGS: usize = 72;
    /// Entries of `args`.
    pub const ARGS_MAX: usize = 12;
    /// Record size without a stack.
    pub const SIZE: usize = 168;
    /// Header flag: a return probe.
    pub const FLAG_RETURN: u16 = 1;
}

/// `struct wt_sample`: a perf software event (`profile:hz:N`, `software:*`).
pub mod sample {
    /// `u32` the perf software event (`PERF_COUNT_SW_*`).
    pub const EVENT: usize = 56;
    /// `u32` CPU.
    pub const CPU: usize = 60;
    /// `u64` page faults: the faulting address; otherwise 0.
    pub const ADDR: usize = 64;
    /// `u64` the interrupted instruction.
    pub const IP: usize = 72;
    /// Record size without a stack.
    pub const SIZE: usize = 80;
}

/// The stack trailer: records of [`Kind::has_stacks`] kinds with [`stack::FLAG`] set end
/// with kernel frames, then user frames (`u64` addresses, innermost first), then a `u16`
/// kernel count, a `u16` user count and 4 reserved bytes.
pub mod stack {
    /// Header flag: the record ends with a stack trailer.
    pub const FLAG: u16 = 0x8000;
    /// Frames per stack, at most.
    pub const MAX_FRAMES: usize = 127;
    /// The largest trailer.
    pub const MAX_BYTES: usize = 2 * MAX_FRAMES * 8 + 8;
}

/// Strings in the traced process's memory, read in the kernel as the probe fired
/// (bpftrace's `str()`): a tracepoint or user record with [`strings::FLAG`] set carries,
/// right after the kind's own bytes (a tracepoint's entry padded to 8, a user record's
/// 168 bytes) and before any stack trailer, a 24-byte block header — `u16` count, 2
/// reserved bytes, `u16` sources\[4\] (a tracepoint field's offset in the entry, a user
/// probe's index in `args`), `u16` lengths\[4\] (bytes before the NUL;
/// [`strings::UNREADABLE`] for one the kernel could not read), 4 reserved bytes — then
/// the strings in order, each NUL-terminated and padded to 8 (an unreadable one takes no
/// bytes). Read them with [`Record::string`].
pub mod strings {
    /// Header flag: the record carries strings.
    pub const FLAG: u16 = 0x4000;
    /// Strings per record, at most.
    pub const MAX: usize = 4;
    /// Bytes of one string kept, its NUL included.
    pub const BYTES: usize = 256;
    /// Bytes of the block's header.
    pub const HEADER: usize = 24;
    /// The length of a string the kernel could not read.
    pub const UNREADABLE: u16 = 0xffff;
    /// The largest block.
    pub const MAX_BYTES: usize = HEADER + MAX * BYTES;
}

/// Why a record is not acceptable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than a header.
    Short,
    /// Unknown kind number.
    UnknownKind(u16),
    /// The size field is out of range for the kind, not a multiple of 8, or past the end.
    BadSize { kind: u16, size: u16 },
}

/// Check the record at the start of `buf`; on success return its kind and size.
pub fn check_record(buf: &[u8]) -> Result<(Kind, usize), RecordError> {
    if buf.len() < HEADER_SIZE {
        return Err(RecordError::Short);
    }
    let kind_raw = u16::from_le_bytes([buf[0], buf[1]]);
    let size_raw = u16::from_le_bytes([buf[2], buf[3]]);
    let kind = Kind::from_u16(kind_raw).ok_or(RecordError::UnknownKind(kind_raw))?;
    let size = size_raw as usize;
    let bad = size < kind.min_size() || size > kind.max_size() || !size.is_multiple_of(8) || size > buf.len();
    if bad {
        return Err(RecordError::BadSize { kind: kind_raw, size: size_raw });
    }
    Ok((kind, size))
}

/// A view of one record.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    bytes: &'a [u8],
}

impl<'a> Record<'a> {
    /// View `bytes` (one whole record) as a record.
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Record { bytes }
    }
    /// The record's bytes.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// The record kind, if known.
    #[inline]
    pub fn kind(&self) -> Option<Kind> {
        self.u16_at(header::KIND).and_then(Kind::from_u16)
    }
    /// Subscription index.
    #[inline]
    pub fn sub(&self) -> u16 {
        self.u16_at(header::SUB).unwrap_or(0)
    }
    /// Header flags.
    #[inline]
    pub fn flags(&self) -> u16 {
        self.u16_at(header::FLAGS).unwrap_or(0)
    }
    /// CLOCK_MONOTONIC timestamp.
    #[inline]
    pub fn ts_ns(&self) -> u64 {
        self.u64_at(header::TS_NS).unwrap_or(0)
    }
    /// Process id (tgid).
    #[inline]
    pub fn pid(&self) -> u32 {
        self.u32_at(header::PID).unwrap_or(0)
    }
    /// Thread id.
    #[inline]
    pub fn tid(&self) -> u32 {
        self.u32_at(header::TID).unwrap_or(0)
    }
    /// Real uid.
    #[inline]
    pub fn uid(&self) -> u32 {
        self.u32_at(header::UID).unwrap_or(0)
    }
    /// Real gid.
    #[inline]
    pub fn gid(&self) -> u32 {
        self.u32_at(header::GID).unwrap_or(0)
    }
    /// cgroup v2 id.
    #[inline]
    pub fn cgroup_id(&self) -> u64 {
        self.u64_at(header::CGROUP_ID).unwrap_or(0)
    }
    /// Command name bytes, without the NUL padding.
    pub fn comm(&self) -> &'a [u8] {
        let raw = self.slice(header::COMM, COMM_LEN).unwrap_or(&[]);
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        &raw[..end]
    }
    /// The kernel and user stacks of the stack trailer, if the record has one.
    pub fn stacks(&self) -> Option<(Frames<'a>, Frames<'a>)> {
        let kind = self.kind()?;
        if self.flags() & stack::FLAG == 0 || !kind.has_stacks() {
            return None;
        }
        let end = self.bytes.len().checked_sub(8)?;
        let kernel = self.u16_at(end)? as usize;
        let user = self.u16_at(end + 2)? as usize;
        if kernel > stack::MAX_FRAMES || user > stack::MAX_FRAMES {
            return None;
        }
        let start = end.checked_sub((kernel + user) * 8)?;
        if start < kind.min_size() {
            return None;
        }
        let k = self.slice(start, kernel * 8)?;
        let u = self.slice(start + kernel * 8, user * 8)?;
        Some((Frames { bytes: k }, Frames { bytes: u }))
    }

    /// The string that `src` points to, as the kernel read it when the probe fired: for
    /// a tracepoint `src` is the pointer field's offset in the entry, for a user probe
    /// the argument's index in `args` (`retval` is 0). `None` if the record carries no
    /// string of `src`; `Some(None)` if the kernel could not read it (a bad pointer, a
    /// page not in memory); otherwise the bytes before its NUL (at most 255).
    pub fn string(&self, src: u16) -> Option<Option<&'a [u8]>> {
        if self.flags() & strings::FLAG == 0 {
            return None;
        }
        let at = match self.kind()? {
            Kind::Tracepoint => {
                let len = self.u32_at(tracepoint::DATA_LEN)? as usize;
                tracepoint::DATA.checked_add(len.min(tracepoint::DATA_MAX))?.next_multiple_of(8)
            }
            Kind::User => user::SIZE,
            _ => return None,
        };
        // The block ends where a stack trailer starts.
        let end = match self.stacks() {
            Some((k, u)) => self.bytes.len() - 8 - 8 * (k.len() + u.len()),
            None => self.bytes.len(),
        };
        let n = (self.u16_at(at)? as usize).min(strings::MAX);
        let mut pos = at.checked_add(strings::HEADER)?;
        for i in 0..n {
            let len = self.u16_at(at + 12 + 2 * i)?;
            let found = self.u16_at(at + 4 + 2 * i)? == src;
            if len == strings::UNREADABLE {
                if found {
                    return Some(None);
                }
                continue;
            }
            let len = len as usize;
            if len >= strings::BYTES || pos + len >= end {
                return None;
            }
            if found {
                return Some(Some(&self.bytes[pos..pos + len]));
            }
            pos += (len + 1).next_multiple_of(8);
        }
        None
    }

    /// Bytes `[off, off + len)` if inside the record.
    #[inline]
    pub fn slice(&self, off: usize, len: usize) -> Option<&'a [u8]> {
        self.bytes.get(off..off.checked_add(len)?)
    }
    /// Little-endian `u16` at `off`.
    #[inline]
    pub fn u16_at(&self, off: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.slice(off, 2)?.try_into().ok()?))
    }
    /// Little-endian `u32` at `off`.
    #[inline]
    pub fn u32_at(&self, off: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.slice(off, 4)?.try_into().ok()?))
    }
    /// Little-endian `i32` at `off`.
    #[inline]
    pub fn i32_at(&self, off: usize) -> Option<i32> {
        self.u32_at(off).map(|v| v as i32)
    }
    /// Little-endian `u64` at `off`.
    #[inline]
    pub fn u64_at(&self, off: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.slice(off, 8)?.try_into().ok()?))
    }
    /// Little-endian `i64` at `off`.
    #[inline]
    pub fn i64_at(&self, off: usize) -> Option<i64> {
        self.u64_at(off).map(|v| v as i64)
    }
}

/// Instruction addresses of one stack, innermost first.
#[derive(Clone, Copy, Debug, Default)]
pub struct Frames<'a> {
    bytes: &'a [u8],
}

impl<'a> Frames<'a> {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.bytes.len() < 8
    }

    /// The frame at `i`.
    pub fn get(&self, i: usize) -> Option<u64> {
        // Checked: a wrapped `i * 8` would read frame 0 for a huge `i`.
        let at = i.checked_mul(8)?;
        let b = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The addresses, innermost first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        self.bytes.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
    }
}

/// Iterator over the records of a batch; stops at the first malformed record.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    rest: &'a [u8],
}

impl<'a> Records<'a> {
    /// Iterate over `batch`.
    pub fn new(batch: &'a [u8]) -> Self {
        Records { rest: batch }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;
    fn next(&mut self) -> Option<Record<'a>> {
        let (_, size) = check_record(self.rest).ok()?;
        let (rec, rest) = self.rest.split_at(size);
        self.rest = rest;
        Some(Record::new(rec))
    }
}

/// The name of syscall `nr`, if the number is in use.
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    let name = *SYSCALL_NAMES.get(usize::try_from(nr).ok()?)?;
    (!name.is_empty()).then_some(name)
}

/// The number of the syscall called `name`.
pub fn syscall_number(name: &str) -> Option<u32> {
    SYSCALL_NAMES.iter().position(|n| !n.is_empty() && *n == name).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn rec(kind: Kind, size: usize) -> Vec<u8> {
        let mut b = std::vec![0u8; size];
        b[header::KIND..header::KIND + 2].copy_from_slice(&(kind as u16).to_le_bytes());
        b[header::SIZE..header::SIZE + 2].copy_from_slice(&(size as u16).to_le_bytes());
        b
    }

    fn batch() -> Vec<u8> {
        let mut b = rec(Kind::SysEnter, sys_enter::SIZE);
        b.extend(rec(Kind::Exec, exec::ARGS + 16));
        b.extend(rec(Kind::Fork, fork::SIZE));
        b.extend(rec(Kind::Exit, exit::SIZE));
        b.extend(rec(Kind::SysExit, sys_exit::SIZE));
        b
    }

    /// Read every field of every record, the way a plugin might.
    fn touch_all(batch: &[u8]) -> usize {
        let mut n = 0;
        for r in Records::new(batch) {
            let _ = (r.kind(), r.sub(), r.flags(), r.ts_ns(), r.pid(), r.tid(), r.uid());
            let _ = (r.gid(), r.cgroup_id(), r.comm());
            for off in (0..r.bytes().len() + 16).step_by(4) {
                let _ = (r.u16_at(off), r.u32_at(off), r.i32_at(off), r.u64_at(off), r.i64_at(off));
            }
            let _ = r.slice(usize::MAX, 2);
            n += 1;
        }
        n
    }

    #[test]
    fn a_well_formed_batch_yields_every_record() {
        let b = batch();
        let kinds: Vec<_> = Records::new(&b).map(|r| r.kind()).collect();
        assert_eq!(kinds, [Kind::SysEnter, Kind::Exec, Kind::Fork, Kind::Exit, Kind::SysExit].map(Some));
        assert_eq!(Records::new(&[]).count(), 0);
    }

    #[test]
    fn every_truncation_yields_the_whole_records_before_the_cut() {
        let b = batch();
        let ends: Vec<usize> = Records::new(&b)
            .scan(0, |at, r| {
                *at += r.bytes().len();
                Some(*at)
            })
            .collect();
        for cut in 0..=b.len() {
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(touch_all(&b[..cut]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn bad_sizes_and_kinds_stop_the_batch() {
        for (kind, size) in [
            (Kind::SysEnter as u16, sys_enter::SIZE as u16 - 8), // short for its kind
            (Kind::Fork as u16, fork::SIZE as u16 + 8),          // long for its kind
            (Kind::Exec as u16, exec::ARGS as u16 + 4),          // not a multiple of 8
            (Kind::Exec as u16, u16::MAX),                       // past the end
            (0, 64),                                             // no such kind
            (99, 64),
        ] {
            let mut b = batch();
            b[0..2].copy_from_slice(&kind.to_le_bytes());
            b[2..4].copy_from_slice(&size.to_le_bytes());
            assert_eq!(touch_all(&b), 0, "kind {kind} size {size}");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // A fixed LCG: the same "random" batches on every run.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as u8
        };
        let good = batch();
        for round in 0..2000 {
            let mut b = good.clone();
            // Corrupt a few bytes anywhere, then cut the tail.
            for _ in 0..1 + round % 4 {
                let i = usize::from(next()) * b.len() / 256;
                b[i] = next();
            }
            b.truncate(b.len() - usize::from(next()) % 64);
            touch_all(&b);
        }
    }

    #[test]
    fn frames_past_the_end_are_none_however_far() {
        let mut b = rec(Kind::Sample, sample::SIZE + 16);
        b[header::FLAGS..header::FLAGS + 2].copy_from_slice(&stack::FLAG.to_le_bytes());
        b[sample::SIZE..sample::SIZE + 8].copy_from_slice(&7u64.to_le_bytes());
        b[sample::SIZE + 8..sample::SIZE + 10].copy_from_slice(&1u16.to_le_bytes());
        let (kernel, _) = Record::new(&b).stacks().unwrap();
        assert_eq!((kernel.get(0), kernel.get(1)), (Some(7), None));
        // Found by fuzz/fuzz_targets/records.rs: `i * 8` overflowed (wrapping to frame 0).
        assert_eq!((kernel.get(usize::MAX / 8), kernel.get(1 << 61), kernel.get(usize::MAX)), (None, None, None));
    }

    #[test]
    fn syscall_table_round_trips() {
        assert_eq!(syscall_name(257), Some("openat"));
        assert_eq!(syscall_number("openat"), Some(257));
        assert_eq!(syscall_name(-1), None);
        assert_eq!(syscall_name(100_000), None);
        assert_eq!(syscall_number(""), None);
    }
}

//! Hand-built records in the `wasmtap-abi` layout, for plugins' unit tests.
//!
//! ```
//! use wasmtap_sdk::{test_records, Event, Record};
//! let bytes = test_records::open(42, 257, b"/etc/passwd", 0, 3, &[]);
//! let Some(Event::Open(open)) = Event::new(Record::new(&bytes)) else { panic!() };
//! assert_eq!(open.path(), "/etc/passwd");
//! ```
#![allow(missing_docs)]

use wasmtap_abi::{
    exec, exit, fork, header, open as op, sample, stack, sys_enter as se, tracepoint as tp, user, Kind, COMM_LEN,
};

/// A zeroed record of `kind` and `size` with the header filled in.
pub fn record(kind: Kind, size: usize, pid: u32, comm: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; size];
    put(&mut b, header::KIND, &(kind as u16).to_le_bytes());
    put(&mut b, header::SIZE, &(size as u16).to_le_bytes());
    put(&mut b, header::TS_NS, &123_456_789u64.to_le_bytes());
    put(&mut b, header::PID, &pid.to_le_bytes());
    put(&mut b, header::TID, &(pid + 1).to_le_bytes());
    put(&mut b, header::UID, &1000u32.to_le_bytes());
    put(&mut b, header::GID, &100u32.to_le_bytes());
    put(&mut b, header::CGROUP_ID, &77u64.to_le_bytes());
    put(&mut b, header::COMM, &comm[..comm.len().min(COMM_LEN)]);
    b
}

pub fn put(b: &mut [u8], off: usize, bytes: &[u8]) {
    b[off..off + bytes.len()].copy_from_slice(bytes);
}

pub fn set_flags(b: &mut [u8], flags: u16) {
    put(b, header::FLAGS, &flags.to_le_bytes());
}

pub fn sys_enter(pid: u32, id: i64, args: [u64; 6]) -> Vec<u8> {
    let mut b = record(Kind::SysEnter, se::SIZE, pid, b"cat");
    put(&mut b, se::ID, &id.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        put(&mut b, se::ARGS + 8 * i, &a.to_le_bytes());
    }
    b
}

/// An exec record whose argv is `args`, each NUL-terminated, like the collector.
pub fn exec(pid: u32, ret: i32, args: &[&[u8]]) -> Vec<u8> {
    let bytes: Vec<u8> = args.iter().flat_map(|a| a.iter().copied().chain([0])).collect();
    let size = (exec::ARGS + bytes.len()).next_multiple_of(8);
    let mut b = record(Kind::Exec, size, pid, b"ls");
    put(&mut b, exec::PPID, &1u32.to_le_bytes());
    put(&mut b, exec::RET, &ret.to_le_bytes());
    put(&mut b, exec::ARGC, &(args.len() as u32).to_le_bytes());
    put(&mut b, exec::ARGS_LEN, &(bytes.len() as u32).to_le_bytes());
    put(&mut b, exec::ARGS, &bytes);
    b
}

pub fn fork(pid: u32, child_pid: u32, child_tid: u32, flags: u16) -> Vec<u8> {
    let mut b = record(Kind::Fork, fork::SIZE, pid, b"bash");
    put(&mut b, fork::CHILD_PID, &child_pid.to_le_bytes());
    put(&mut b, fork::CHILD_TID, &child_tid.to_le_bytes());
    set_flags(&mut b, flags);
    b
}

pub fn exit(pid: u32, status: i32, start_ns: u64, flags: u16) -> Vec<u8> {
    let mut b = record(Kind::Exit, exit::SIZE, pid, b"sleep");
    put(&mut b, exit::EXIT_CODE, &status.to_le_bytes());
    put(&mut b, exit::PPID, &1u32.to_le_bytes());
    put(&mut b, exit::START_NS, &start_ns.to_le_bytes());
    set_flags(&mut b, flags);
    b
}

/// An exit record with CPU times: `cpu_ns` exact, `user_ns` + `sys_ns` sampled.
pub fn exit_cpu(pid: u32, status: i32, start_ns: u64, flags: u16, cpu: [u64; 3]) -> Vec<u8> {
    let mut b = exit(pid, status, start_ns, flags);
    put(&mut b, exit::CPU_NS, &cpu[0].to_le_bytes());
    put(&mut b, exit::USER_NS, &cpu[1].to_le_bytes());
    put(&mut b, exit::SYS_NS, &cpu[2].to_le_bytes());
    b
}

/// An open record (`file:open`) of syscall `nr` with dir fd AT_FDCWD and mode 0; `base`
/// is the directory of a relative path, innermost name first (walked when not empty or
/// when `path` is relative).
pub fn open(pid: u32, nr: i32, path: &[u8], flags: u64, ret: i64, base: &[&[u8]]) -> Vec<u8> {
    let mut data: Vec<u8> = path.iter().copied().chain([0]).collect();
    let path_len = data.len() as u16;
    let names: Vec<u8> = base.iter().flat_map(|n| n.iter().copied().chain([0])).collect();
    data.extend_from_slice(&names);
    let size = (op::DATA + data.len()).next_multiple_of(8);
    let mut b = record(Kind::Open, size, pid, b"cat");
    put(&mut b, op::NR, &nr.to_le_bytes());
    put(&mut b, op::DFD, &(-100i32).to_le_bytes());
    put(&mut b, op::FLAGS, &flags.to_le_bytes());
    put(&mut b, op::RET, &ret.to_le_bytes());
    put(&mut b, op::LATENCY_NS, &1500u64.to_le_bytes());
    put(&mut b, op::PATH_LEN, &path_len.to_le_bytes());
    put(&mut b, op::BASE_LEN, &(names.len() as u16).to_le_bytes());
    put(&mut b, op::BASE_DEPTH, &(base.len() as u16).to_le_bytes());
    put(&mut b, op::DATA, &data);
    if !path.starts_with(b"/") {
        set_flags(&mut b, op::FLAG_BASE_WALKED);
    }
    b
}

pub fn set_sub(b: &mut [u8], sub: u16) {
    put(b, header::SUB, &sub.to_le_bytes());
}

/// A tracepoint record of subscription `sub` carrying `data` as the entry, padded to 8.
pub fn tracepoint(pid: u32, sub: u16, event_id: u32, data: &[u8]) -> Vec<u8> {
    let size = (tp::DATA + data.len()).next_multiple_of(8);
    let mut b = record(Kind::Tracepoint, size, pid, b"kill");
    set_sub(&mut b, sub);
    put(&mut b, tp::EVENT_ID, &event_id.to_le_bytes());
    put(&mut b, tp::DATA_LEN, &(data.len() as u32).to_le_bytes());
    put(&mut b, tp::DATA, data);
    b
}

/// A uprobe record (a uretprobe with `user::FLAG_RETURN` in `flags`).
pub fn user(pid: u32, sub: u16, ip: u64, args: &[u64], flags: u16) -> Vec<u8> {
    let mut b = record(Kind::User, user::SIZE, pid, b"app");
    set_sub(&mut b, sub);
    put(&mut b, user::PROBE, &3u32.to_le_bytes());
    put(&mut b, user::NARGS, &(args.len() as u32).to_le_bytes());
    put(&mut b, user::IP, &ip.to_le_bytes());
    for (i, a) in args.iter().take(user::ARGS_MAX).enumerate() {
        put(&mut b, user::ARGS + 8 * i, &a.to_le_bytes());
    }
    set_flags(&mut b, flags);
    b
}

pub fn sample(pid: u32, event: u32, cpu: u32, addr: u64, ip: u64) -> Vec<u8> {
    let mut b = record(Kind::Sample, sample::SIZE, pid, b"busy");
    put(&mut b, sample::EVENT, &event.to_le_bytes());
    put(&mut b, sample::CPU, &cpu.to_le_bytes());
    put(&mut b, sample::ADDR, &addr.to_le_bytes());
    put(&mut b, sample::IP, &ip.to_le_bytes());
    b
}

/// `rec` (a tracepoint or user record, before any stack trailer) with a strings block
/// appended, its flag set and its size grown, the way the collectors write it: each
/// string's source (a field's offset, an argument's index) and bytes, `None` for one
/// the kernel could not read.
pub fn with_strings(mut rec: Vec<u8>, strings: &[(u16, Option<&[u8]>)]) -> Vec<u8> {
    use wasmtap_abi::strings as st;
    let at = rec.len();
    rec.resize(at + st::HEADER, 0);
    put(&mut rec, at, &(strings.len() as u16).to_le_bytes());
    for (i, (src, s)) in strings.iter().enumerate() {
        put(&mut rec, at + 4 + 2 * i, &src.to_le_bytes());
        let len = s.map_or(st::UNREADABLE, |s| s.len() as u16);
        put(&mut rec, at + 12 + 2 * i, &len.to_le_bytes());
        if let Some(s) = s {
            rec.extend_from_slice(s);
            rec.push(0);
            rec.resize(rec.len().next_multiple_of(8), 0);
        }
    }
    let size = rec.len() as u16;
    put(&mut rec, header::SIZE, &size.to_le_bytes());
    let flags = u16::from_le_bytes([rec[header::FLAGS], rec[header::FLAGS + 1]]);
    set_flags(&mut rec, flags | st::FLAG);
    rec
}

/// `rec` with a stack trailer appended, its flag set and its size grown, the way the
/// collectors write it.
pub fn with_stacks(mut rec: Vec<u8>, kernel: &[u64], user: &[u64]) -> Vec<u8> {
    for addr in kernel.iter().chain(user) {
        rec.extend_from_slice(&addr.to_le_bytes());
    }
    rec.extend_from_slice(&(kernel.len() as u16).to_le_bytes());
    rec.extend_from_slice(&(user.len() as u16).to_le_bytes());
    rec.extend_from_slice(&[0; 4]);
    let size = rec.len() as u16;
    put(&mut rec, header::SIZE, &size.to_le_bytes());
    let flags = u16::from_le_bytes([rec[header::FLAGS], rec[header::FLAGS + 1]]);
    set_flags(&mut rec, flags | stack::FLAG);
    rec
}

//! Hand-built records in the `wasmtap-abi` layout, for unit tests.

use wasmtap_abi::{exec, exit, fork, header, sys_enter as se, Kind, COMM_LEN};

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

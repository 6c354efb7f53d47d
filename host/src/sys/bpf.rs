//! The `bpf` commands aya does not offer for the maps the host reads.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `BPF_MAP_LOOKUP_AND_DELETE_ELEM` (linux/bpf.h).
const MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;

/// The head of `union bpf_attr` the map element commands use: `map_fd`, `key`,
/// `value`, `flags`.
#[repr(C, align(8))]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `BPF_OBJ_GET_INFO_BY_FD`.
const OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// Per-CPU hash and LRU hash maps (`BPF_MAP_TYPE_PERCPU_HASH`, `_LRU_PERCPU_HASH`), whose
/// value is one per possible CPU.
const PER_CPU_HASHES: [u32; 2] = [5, 10];

/// The head of `struct bpf_map_info`.
#[repr(C)]
#[derive(Default)]
struct MapInfo {
    kind: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
}

/// `bpf_attr.info`.
#[repr(C, align(8))]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Bytes of a key and of a whole value (every CPU's, for a per-CPU map) of `map`.
pub fn map_sizes(map: BorrowedFd<'_>) -> io::Result<(usize, usize)> {
    let mut info = MapInfo::default();
    let attr = InfoAttr {
        bpf_fd: map.as_raw_fd() as u32,
        info_len: std::mem::size_of::<MapInfo>() as u32,
        info: &mut info as *mut MapInfo as u64,
    };
    // SAFETY: `attr` is a valid bpf_attr head of the size passed; the kernel writes at
    // most `info_len` bytes into `info`, a live, writable MapInfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            OBJ_GET_INFO_BY_FD,
            &attr as *const InfoAttr,
            std::mem::size_of::<InfoAttr>() as u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let value = info.value_size as usize;
    let whole = if PER_CPU_HASHES.contains(&info.kind) {
        let cpus = possible_cpus()?;
        value.div_ceil(8) * 8 * cpus
    } else {
        value
    };
    Ok((info.key_size as usize, whole))
}

/// CPUs the kernel may bring up (`/sys/devices/system/cpu/possible`, e.g. `0-3` or `0,2-5`).
fn possible_cpus() -> io::Result<usize> {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if let Some(n) = CPUS.get() {
        return Ok(*n);
    }
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("possible CPUs: {:?}", text.trim()));
    let mut n = 0;
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        n += b.checked_sub(a).ok_or_else(bad)? + 1;
    }
    Ok(*CPUS.get_or_init(|| n))
}

/// Read and delete one element in one step, so that nothing written to it between
/// the read and the delete is lost: an update after it makes a new element. `key` and
/// `value` must be the sizes [`map_sizes`] gives (checked here: anything else is an
/// error, never a read or write past them). Ok(false) when the key is not there.
pub fn map_lookup_and_delete(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let (key_size, value_size) = map_sizes(map)?;
    if key.len() != key_size || value.len() != value_size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("map element of {key_size}+{value_size} bytes, given {}+{}", key.len(), value.len()),
        ));
    }
    let attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: `attr` is a valid, initialized bpf_attr head of the size passed; the kernel
    // reads `key` (the caller passes the map's key size) and writes at most the map's value
    // size for each possible CPU into `value`, which the caller sizes so.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            MAP_LOOKUP_AND_DELETE_ELEM,
            &attr as *const ElemAttr,
            std::mem::size_of::<ElemAttr>() as u32,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOENT) {
        return Ok(false);
    }
    Err(e)
}

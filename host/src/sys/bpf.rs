//! The `bpf` commands aya does not offer for the maps the host reads.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `BPF_OBJ_GET_INFO_BY_FD` and `BPF_MAP_LOOKUP_AND_DELETE_ELEM` (linux/bpf.h).
const OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
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

/// `bpf(cmd, attr, sizeof attr)`; Err with errno when it fails.
///
/// # Safety
/// `attr` must be the bpf_attr head `cmd` reads, and every pointer in it valid for what
/// the kernel reads and writes through it for that command.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<()> {
    // SAFETY: the caller's contract; `attr` is a live value of the size passed.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *const T, std::mem::size_of::<T>() as u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The elements of one map, read and deleted a key at a time: its key and whole value
/// sizes (every CPU's, for a per-CPU map) asked once, and held to on every call.
pub struct MapElems<'a> {
    map: BorrowedFd<'a>,
    key_size: usize,
    value_size: usize,
}

impl<'a> MapElems<'a> {
    /// Ask the kernel the sizes of `map`'s keys and values.
    pub fn of(map: BorrowedFd<'a>) -> io::Result<MapElems<'a>> {
        let info = map_info(map)?;
        let value = info.value_size as usize;
        let value_size =
            if PER_CPU_HASHES.contains(&info.kind) { value.div_ceil(8) * 8 * possible_cpus()? } else { value };
        Ok(MapElems { map, key_size: info.key_size as usize, value_size })
    }

    /// Bytes of a whole value: what [`take`](Self::take) fills.
    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// Read and delete one element in one step, so that nothing written to it between
    /// the read and the delete is lost: an update after it makes a new element. `key` and
    /// `value` must be the map's sizes (checked: anything else is an error, never a read or
    /// write past them). Ok(false) when the key is not there.
    pub fn take(&self, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        if key.len() != self.key_size || value.len() != self.value_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "map element of {}+{} bytes, given {}+{}",
                    self.key_size,
                    self.value_size,
                    key.len(),
                    value.len()
                ),
            ));
        }
        let attr = ElemAttr {
            map_fd: self.map.as_raw_fd() as u32,
            _pad: 0,
            key: key.as_ptr() as u64,
            value: value.as_mut_ptr() as u64,
            flags: 0,
        };
        // SAFETY: the kernel reads `key_size` bytes at `key` and writes at most
        // `value_size` at `value`, both checked above against the map's own sizes.
        match unsafe { bpf(MAP_LOOKUP_AND_DELETE_ELEM, &attr) } {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A map's type (`BPF_MAP_TYPE_*`) and its `max_entries` (a ring buffer's size in bytes).
pub fn map_kind_and_entries(map: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let info = map_info(map)?;
    Ok((info.kind, info.max_entries))
}

fn map_info(map: BorrowedFd<'_>) -> io::Result<MapInfo> {
    let mut info = MapInfo::default();
    let attr = InfoAttr {
        bpf_fd: map.as_raw_fd() as u32,
        info_len: std::mem::size_of::<MapInfo>() as u32,
        info: &mut info as *mut MapInfo as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes into `info`, a live MapInfo.
    unsafe { bpf(OBJ_GET_INFO_BY_FD, &attr)? };
    Ok(info)
}

/// Times the kernel did not run `prog` because a BPF program was already running on
/// that CPU (`bpf_prog_info.recursion_misses`, Linux 5.12; 0 before).
pub fn prog_recursion_misses(prog: BorrowedFd<'_>) -> io::Result<u64> {
    // The head of `struct bpf_prog_info` up to `recursion_misses` (offset 208), as u64
    // words: with every count of arrays zero the kernel writes no array.
    let mut info = [0u64; 27];
    let attr = InfoAttr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes into `info`, a live array of
    // that size, and follows no pointer in it (they are all zero).
    unsafe { bpf(OBJ_GET_INFO_BY_FD, &attr)? };
    Ok(info[26])
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

//! What /proc says of a process, for the `proc` tapset: read on the symbolizer's thread
//! (the dispatch thread may not open files once confined), each file bounded.

use std::io::Read;
use std::os::unix::fs::MetadataExt;

use crate::sandbox::symbolize::{Process, PROC_ARGS, PROC_ARG_BYTES, PROC_PATH_BYTES};

/// Clock ticks a second of `/proc/PID/stat`'s times (USER_HZ, 100 on Linux).
const TICKS_PER_SEC: u64 = 100;
/// The most bytes of `stat` or `comm` read.
const SMALL_FILE: u64 = 4096;

/// Up to `max` bytes of `/proc/PID/NAME`, and whether there was more.
fn read_bounded(pid: u32, name: &str, max: usize) -> Option<(Vec<u8>, bool)> {
    let file = std::fs::File::open(format!("/proc/{pid}/{name}")).ok()?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes).ok()?;
    let more = bytes.len() > max;
    bytes.truncate(max);
    Some((bytes, more))
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// How many times a process caught in the middle of an `exec` is read again, and how long
/// to wait between reads.
const EXEC_RETRIES: u32 = 3;
const EXEC_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// The process `pid`, or None if it is gone or its stat cannot be read.
///
/// A process read while it `exec`s can show the new program's name and executable but no
/// arguments yet (the kernel sets up the new argument area after it switches the name):
/// such a read is made again, a few times a millisecond apart, so the answer is one
/// program's, not half of each.
pub fn read(pid: u32) -> Option<Process> {
    let mut p = read_once(pid)?;
    for _ in 0..EXEC_RETRIES {
        let mid_exec = p.argv.is_empty() && !p.exe.is_empty();
        if !mid_exec {
            break;
        }
        std::thread::sleep(EXEC_WAIT);
        p = read_once(pid)?;
    }
    Some(p)
}

fn read_once(pid: u32) -> Option<Process> {
    let (stat, _) = read_bounded(pid, "stat", SMALL_FILE as usize)?;
    let stat = String::from_utf8_lossy(&stat);
    // `PID (COMM) STATE PPID …`: the comm may hold spaces and parentheses, so the fields
    // are counted after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let start_ticks: u64 = fields.get(19)?.parse().ok()?;
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    let comm = read_bounded(pid, "comm", 64)
        .map(|(b, _)| String::from_utf8_lossy(&b).trim_end_matches('\n').to_string())
        .unwrap_or_default();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| cut(p.to_string_lossy().into_owned(), PROC_PATH_BYTES))
        .unwrap_or_default();
    let (argv, argv_truncated) = match read_bounded(pid, "cmdline", PROC_ARG_BYTES) {
        Some((bytes, _)) if bytes.is_empty() => (Vec::new(), false),
        Some((bytes, more)) => {
            let mut args: Vec<String> =
                bytes.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            if bytes.last() == Some(&0) {
                args.pop();
            }
            let many = args.len() > PROC_ARGS;
            args.truncate(PROC_ARGS);
            (args, more || many)
        }
        None => (Vec::new(), false),
    };
    let cgroup = read_bounded(pid, "cgroup", PROC_PATH_BYTES)
        .map(|(b, _)| {
            let text = String::from_utf8_lossy(&b).into_owned();
            let line = text.lines().find(|l| l.starts_with("0::")).or_else(|| text.lines().next()).unwrap_or("");
            // `0::/path` on the unified hierarchy; `N:controllers:/path` otherwise.
            let path = line.splitn(3, ':').nth(2).unwrap_or("");
            cut(path.to_string(), PROC_PATH_BYTES)
        })
        .unwrap_or_default();
    Some(Process {
        pid,
        ppid,
        uid,
        comm,
        exe,
        argv,
        argv_truncated,
        cgroup,
        start_ns: start_ticks.saturating_mul(1_000_000_000 / TICKS_PER_SEC),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_itself() {
        let me = read(std::process::id()).expect("this process");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert_eq!(me.exe, std::env::current_exe().unwrap().to_string_lossy());
        assert_eq!(me.argv.first().map(String::as_str), std::env::args().next().as_deref());
        assert!(!me.comm.is_empty() && me.comm.len() <= 15, "{:?}", me.comm);
        assert!(me.start_ns > 0);
        assert!(read(u32::MAX).is_none(), "no such process");
    }
}

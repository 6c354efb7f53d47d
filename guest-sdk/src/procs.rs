//! The `proc` tapset as a plugin calls it: what /proc says of the processes whose events
//! the plugin was given (comm, executable, arguments, cgroup, start time), answered by the
//! host through `wasmtap:proc/info@0.1.0`. A process outside the plugin's scope, gone, or
//! unreadable is `None`; so is every process in replay (a recording holds no processes)
//! and in native builds (a plugin's unit tests).
//!
//! Ask while the process may still be there: at its events, not at the end of the run.
//! One call answers up to 1,024 pids; the host's time reading /proc is charged to the
//! plugin's CPU budget.

/// What /proc says of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// Its effective user.
    pub uid: u32,
    /// At most 15 bytes.
    pub comm: String,
    /// The executable's path; empty where it cannot be read.
    pub exe: String,
    /// At most 64 arguments, 4,096 bytes in all.
    pub argv: Vec<String>,
    /// Whether `argv` was cut at those bounds.
    pub argv_truncated: bool,
    /// The unified hierarchy's path, or the first hierarchy's.
    pub cgroup: String,
    /// When it started, nanoseconds after boot.
    pub start_ns: u64,
}

/// The most pids one [`lookup`] may ask about.
pub const PIDS_PER_CALL: usize = 1024;

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code, reason = "wit-bindgen's canonical-ABI glue; generated, not written")]
mod bindings {
    wit_bindgen::generate!({
        path: "../wit/tapsets/proc",
        world: "wasmtap:proc/user@0.1.0",
    });
}

/// One answer per pid, in order (at most [`PIDS_PER_CALL`]; more faults the plugin).
#[cfg(target_arch = "wasm32")]
pub fn lookup(pids: &[u32]) -> Vec<Option<Process>> {
    bindings::wasmtap::proc::info::lookup(pids)
        .into_iter()
        .map(|p| {
            p.map(|p| Process {
                pid: p.pid,
                ppid: p.ppid,
                uid: p.uid,
                comm: p.comm,
                exe: p.exe,
                argv: p.argv,
                argv_truncated: p.argv_truncated,
                cgroup: p.cgroup,
                start_ns: p.start_ns,
            })
        })
        .collect()
}

/// One answer per pid: natively, none.
#[cfg(not(target_arch = "wasm32"))]
pub fn lookup(pids: &[u32]) -> Vec<Option<Process>> {
    vec![None; pids.len()]
}

/// What /proc says of `pid`, if it is in the plugin's scope and still there.
pub fn process(pid: u32) -> Option<Process> {
    lookup(&[pid]).pop().flatten()
}

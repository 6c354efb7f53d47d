//! What a plugin's `services.symbolize` may reach and what it pays for. A plugin names user
//! address spaces by pid, so it is held to the processes whose records it was given
//! ([`PidScope`]); kernel addresses only where the run may see the kernel
//! ([`super::Limits::kernel_symbols`]). Work is bounded per call before any is done, and the
//! symbolizer's CPU time for a call is added to the plugin's own.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::types;

/// Stack requests a plugin may make in one call: each costs a lookup of its process
/// however few addresses it holds, so the count is bounded apart from the addresses.
pub const STACK_REQUESTS_PER_CALL: usize = 4096;
/// Addresses a plugin may ask to symbolize in one call.
pub const ADDRS_PER_CALL: usize = 65536;
/// Pids a plugin's scope remembers; past it the oldest is forgotten (and counted).
pub const SCOPE_PIDS: usize = 16384;
/// Pids a plugin may ask the `proc` tapset about in one call.
pub const PROC_PIDS_PER_CALL: usize = 1024;
/// The most arguments, and bytes of them, a `proc` answer holds.
pub const PROC_ARGS: usize = 64;
pub const PROC_ARG_BYTES: usize = 4096;
/// The longest executable path and cgroup path in a `proc` answer.
pub const PROC_PATH_BYTES: usize = 4096;

/// What /proc says of one process: the record of `wasmtap:proc/info@0.1.0`.
#[derive(Clone, Debug, Default, PartialEq, Eq, wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub comm: String,
    pub exe: String,
    pub argv: Vec<String>,
    #[component(name = "argv-truncated")]
    pub argv_truncated: bool,
    pub cgroup: String,
    #[component(name = "start-ns")]
    pub start_ns: u64,
}

/// What answers a plugin's `symbolize` calls: live symbolization, or a recording's table.
pub trait Symbols: Send {
    /// One list of frames per request, one frame per address, within `timeout`.
    fn symbolize(&mut self, stacks: &[types::StackRequest], timeout: Duration) -> Result<Answer, SymbolsError>;

    /// What /proc says of each pid, within `timeout` (none where it cannot say), and the
    /// CPU time spent reading it. A recording holds no processes: none for each.
    fn processes(&mut self, pids: &[u32], _timeout: Duration) -> Result<(Vec<Option<Process>>, u64), SymbolsError> {
        Ok((vec![None; pids.len()], 0))
    }
}

/// Frames, and the symbolizer's CPU time spent finding them (charged to the asking plugin).
#[derive(Debug, Default)]
pub struct Answer {
    pub frames: Vec<Vec<types::Frame>>,
    pub cpu_ns: u64,
}

/// Why a symbolizer gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    #[error("the symbolizer did not answer within the call's remaining deadline of {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("the symbolizer did not answer within the call's remaining deadline of {} ms, after {} ms on one request; the run goes on without symbols", .timeout.as_millis(), .busy.as_millis())]
    GivenUp { timeout: Duration, busy: Duration },
}

/// A plugin broke a `services.symbolize` limit, or the symbolizer failed it: the call faults.
#[derive(Debug, thiserror::Error)]
pub enum SymbolizeFault {
    #[error("services.symbolize: {0} stack requests in one call, more than the {STACK_REQUESTS_PER_CALL} allowed")]
    TooManyRequests(usize),
    #[error("services.symbolize: {0} addresses in one call, more than the {ADDRS_PER_CALL} allowed")]
    TooManyAddrs(usize),
    #[error("services.symbolize: {0}")]
    Symbols(#[from] SymbolsError),
    #[error("wasmtap:proc/info.lookup: {0} pids in one call, more than the {PROC_PIDS_PER_CALL} allowed")]
    TooManyPids(usize),
}

impl SymbolizeFault {
    /// The fault kind the plugin is disabled (or restarted) with.
    pub fn kind(&self) -> super::FaultKind {
        match self {
            SymbolizeFault::Symbols(_) => super::FaultKind::Deadline,
            _ => super::FaultKind::Contract,
        }
    }
}

/// The processes one plugin was shown: the pids of the records queued for it. Kept by the
/// plugin's runner across restarts, read by each of its instances.
#[derive(Debug, Default)]
pub struct PidScope {
    pids: HashSet<u32>,
    /// Insertion order, for forgetting the oldest.
    order: VecDeque<u32>,
    /// Pids forgotten because the scope was full.
    pub forgotten: u64,
    /// Stack requests answered with unknown frames because they were out of scope.
    pub refused: u64,
}

/// A plugin's scope, shared by its runner (which fills it) and its instance (which reads it).
pub type SharedScope = Arc<Mutex<PidScope>>;

impl PidScope {
    /// Remember `pid`; past [`SCOPE_PIDS`] the oldest pid is forgotten.
    pub fn insert(&mut self, pid: u32) {
        if !self.pids.insert(pid) {
            return;
        }
        self.order.push_back(pid);
        if self.order.len() > SCOPE_PIDS {
            if let Some(old) = self.order.pop_front() {
                self.pids.remove(&old);
                self.forgotten += 1;
            }
        }
    }

    pub fn contains(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }
}

/// Check the number of requests before any is copied out of the plugin.
pub fn check_count(requests: usize) -> Result<(), SymbolizeFault> {
    match requests > STACK_REQUESTS_PER_CALL {
        true => Err(SymbolizeFault::TooManyRequests(requests)),
        false => Ok(()),
    }
}

/// Check a call's size before anything is done for it.
pub fn check_size(stacks: &[types::StackRequest]) -> Result<(), SymbolizeFault> {
    check_count(stacks.len())?;
    let total: usize = stacks.iter().map(|s| s.addrs.len()).sum();
    if total > ADDRS_PER_CALL {
        return Err(SymbolizeFault::TooManyAddrs(total));
    }
    Ok(())
}

/// Whether each request is in the plugin's scope; the refused ones are counted in `scope`.
/// Refused requests get unknown frames, the same as a process the host never saw: a plugin
/// learns nothing about a process it was not shown, and a pid the bounded scope forgot
/// costs frames, not the plugin.
pub fn screen(stacks: &[types::StackRequest], scope: &mut PidScope, kernel_allowed: bool) -> Vec<bool> {
    let allowed: Vec<bool> =
        stacks.iter().map(|s| if s.kernel { kernel_allowed } else { scope.contains(s.pid) }).collect();
    scope.refused += allowed.iter().filter(|a| !**a).count() as u64;
    allowed
}

/// Frames that name nothing, one per address.
pub fn unknown_frames(addrs: &[u64]) -> Vec<types::Frame> {
    addrs
        .iter()
        .map(|&addr| types::Frame {
            addr,
            symbol: String::new(),
            offset: 0,
            module: String::new(),
            file: String::new(),
            line: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pid: u32, kernel: bool) -> types::StackRequest {
        types::StackRequest { pid, kernel, addrs: vec![0x1000] }
    }

    #[test]
    fn only_pids_the_plugin_was_shown_and_the_kernel_where_allowed_pass() {
        let mut scope = PidScope::default();
        scope.insert(42);
        let stacks = [req(42, false), req(1, false), req(0, true)];
        assert_eq!(screen(&stacks, &mut scope, true), [true, false, true]);
        assert_eq!(scope.refused, 1);
        // A run that may not see the kernel: kernel requests are refused and counted too.
        assert_eq!(screen(&stacks, &mut scope, false), [true, false, false]);
        assert_eq!(scope.refused, 3);
    }

    #[test]
    fn a_full_scope_forgets_its_oldest_pid_and_counts_it() {
        let mut scope = PidScope::default();
        for pid in 0..SCOPE_PIDS as u32 + 2 {
            scope.insert(pid);
        }
        scope.insert(5);
        assert!(!scope.contains(0) && !scope.contains(1) && scope.contains(2) && scope.contains(5));
        assert_eq!(scope.forgotten, 2);
    }

    #[test]
    fn too_many_requests_or_addresses_are_refused_before_any_work() {
        let empty = types::StackRequest { pid: 1, kernel: false, addrs: Vec::new() };
        let stacks = vec![empty; STACK_REQUESTS_PER_CALL + 1];
        let e = check_size(&stacks).unwrap_err();
        assert_eq!(e.to_string(), "services.symbolize: 4097 stack requests in one call, more than the 4096 allowed");
        assert_eq!(e.kind(), crate::sandbox::FaultKind::Contract);
        let big = [types::StackRequest { pid: 1, kernel: false, addrs: vec![0; ADDRS_PER_CALL + 1] }];
        assert!(matches!(check_size(&big), Err(SymbolizeFault::TooManyAddrs(65537))));
        assert!(check_size(&stacks[..STACK_REQUESTS_PER_CALL]).is_ok());
    }
}

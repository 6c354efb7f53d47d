//! Symbols for plugins' `symbolize` calls. Live: blazesym over kallsyms and the memory
//! maps of each process, snapshotted when its first stack arrives so it can be
//! symbolized after it exits. Recorded: the table a recording carries, made at the end
//! of `wasmtap record` from every address its stacks hold.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use wasmtap_abi::{Kind, Records};

use crate::collect::recording::SymbolEntry as Recorded;
use crate::sandbox::symbolize::Process;
use crate::sandbox::{Answer, Symbols, SymbolsError};
use crate::symbolize::{Frame, Symbolizer};
use crate::wit::types;

/// Distinct addresses kept for a recording's symbol table, at most.
const RECORDED_ADDRS_MAX: usize = 1 << 20;
/// How long `wasmtap record` waits for its symbol table at the end of a run.
const TABLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A symbolizer busy this long with one request is given up. Far above a call's deadline,
/// so that a plugin that calls with almost none left faults alone, without costing other
/// plugins their symbols.
const STUCK_AFTER: Duration = Duration::from_secs(2);

/// What the symbolizer thread does; [`Symbolizer`] in a run, a stand-in in tests.
pub trait Resolve {
    /// `pid` ran code at the user address `addr`.
    fn observe(&mut self, pid: u32, addr: u64);
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame>;
    fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame>;
}

impl Resolve for Symbolizer {
    fn observe(&mut self, pid: u32, addr: u64) {
        Symbolizer::observe_at(self, pid, addr)
    }
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame> {
        Symbolizer::kernel(self, addrs)
    }
    fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        Symbolizer::user(self, pid, addrs)
    }
}

/// One stack to symbolize: user addresses of a pid, or kernel addresses.
type Stack = (u32, bool, Vec<u64>);

/// The live symbolizer. blazesym's state is not `Send`, so it lives on a thread of its
/// own; the pipeline shows it processes as their events pass, and plugins ask it for
/// frames, both through a channel. A thread that stops answering (a binary on a hung
/// file system, pathological debug info) is given up: the call that waited faults, and
/// the run goes on without symbols.
#[derive(Clone)]
pub struct Live {
    tx: Sender<Request>,
    stuck: Arc<AtomicBool>,
    /// When the thread began its current request (monotonic ns); 0 when idle.
    busy_since: Arc<AtomicU64>,
}

enum Request {
    /// Processes, each with the latest user address it was seen at.
    Observe(Vec<(u32, u64)>),
    /// Stacks, answered with their frames and the thread's CPU time spent on them.
    Stacks(Vec<Stack>, Sender<(Vec<Vec<Frame>>, u64)>),
    /// Pids, answered with what /proc says of them (the `proc` tapset) and the time.
    Processes(Vec<u32>, Sender<(Vec<Option<Process>>, u64)>),
}

impl Live {
    /// Start the symbolizer thread.
    pub fn start() -> std::io::Result<Live> {
        Live::with(Symbolizer::new)
    }

    /// Start the symbolizer thread, naming kernel addresses from `kallsyms`, a copy of
    /// `/proc/kallsyms` made where its addresses showed.
    pub fn start_with_kallsyms(kallsyms: std::path::PathBuf) -> std::io::Result<Live> {
        Live::with(move || Symbolizer::with_kallsyms(kallsyms))
    }

    /// Start a symbolizer thread over what `make` builds on it.
    pub fn with<R: Resolve, F: FnOnce() -> R + Send + 'static>(make: F) -> std::io::Result<Live> {
        let (tx, rx) = channel::<Request>();
        let busy_since = Arc::new(AtomicU64::new(0));
        let busy = busy_since.clone();
        std::thread::Builder::new().name("wasmtap-symbols".into()).spawn(move || {
            let mut sym = make();
            for req in rx {
                busy.store(crate::sys::monotonic_ns(), Ordering::Relaxed);
                match req {
                    Request::Observe(seen) => seen.into_iter().for_each(|(pid, addr)| sym.observe(pid, addr)),
                    Request::Stacks(stacks, reply) => {
                        let cpu0 = crate::sys::thread_cpu_ns();
                        let frames = stacks
                            .iter()
                            .map(|(pid, kernel, addrs)| match kernel {
                                true => sym.kernel(addrs),
                                false => sym.user(*pid, addrs),
                            })
                            .collect();
                        let _ = reply.send((frames, crate::sys::thread_cpu_ns().saturating_sub(cpu0)));
                    }
                    Request::Processes(pids, reply) => {
                        let cpu0 = crate::sys::thread_cpu_ns();
                        let facts = pids.iter().map(|pid| super::procfs::read(*pid)).collect();
                        let _ = reply.send((facts, crate::sys::thread_cpu_ns().saturating_sub(cpu0)));
                    }
                }
                busy.store(0, Ordering::Relaxed);
            }
        })?;
        Ok(Live { tx, stuck: Arc::default(), busy_since })
    }

    /// Snapshot the maps of every process with a user stack or a user probe in `bytes`, and
    /// snapshot again a process whose latest address its snapshot does not cover: the first
    /// records of a command started by the run may come from before its `exec`.
    pub fn observe(&self, bytes: &[u8]) {
        if self.stuck.load(Ordering::Relaxed) {
            return;
        }
        let mut seen: Vec<(u32, u64)> = Vec::new();
        for rec in Records::new(bytes) {
            let addr = match rec.kind() {
                Some(Kind::User) => rec.u64_at(wasmtap_abi::user::IP),
                Some(k) if k.has_stacks() => rec.stacks().and_then(|(_, u)| u.get(0)),
                _ => None,
            };
            let Some(addr) = addr else { continue };
            match seen.last_mut() {
                Some(last) if last.0 == rec.pid() => last.1 = addr,
                _ => seen.push((rec.pid(), addr)),
            }
        }
        if !seen.is_empty() {
            // Stable: the latest address of each pid stays last among its entries.
            seen.sort_by_key(|s| s.0);
            seen.reverse();
            seen.dedup_by_key(|s| s.0);
            let _ = self.tx.send(Request::Observe(seen));
        }
    }

    /// Frames for `stacks` within `timeout`; unknown frames once the thread is given up.
    fn ask(&self, stacks: Vec<Stack>, timeout: Duration) -> Result<(Vec<Vec<Frame>>, u64), SymbolsError> {
        let unknown = |stacks: &[Stack]| {
            let unknown = |addrs: &Vec<u64>| addrs.iter().map(|&addr| Frame { addr, ..Frame::default() }).collect();
            (stacks.iter().map(|s| unknown(&s.2)).collect(), 0)
        };
        let kept = stacks.clone();
        self.wait(|reply| Request::Stacks(stacks, reply), || unknown(&kept), timeout)
    }

    /// Send what `request` makes and wait for its answer within `timeout`; `fallback`'s
    /// answer once the thread is given up or gone.
    fn wait<T>(
        &self,
        request: impl FnOnce(Sender<T>) -> Request,
        fallback: impl FnOnce() -> T,
        timeout: Duration,
    ) -> Result<T, SymbolsError> {
        if self.stuck.load(Ordering::Relaxed) {
            return Ok(fallback());
        }
        let (reply, answer) = channel();
        if self.tx.send(request(reply)).is_err() {
            return Ok(fallback());
        }
        match answer.recv_timeout(timeout) {
            Ok(answer) => Ok(answer),
            Err(RecvTimeoutError::Disconnected) => Ok(fallback()),
            Err(RecvTimeoutError::Timeout) => {
                let since = self.busy_since.load(Ordering::Relaxed);
                let busy = Duration::from_nanos(crate::sys::monotonic_ns().saturating_sub(since));
                if since == 0 || busy < STUCK_AFTER {
                    return Err(SymbolsError::Timeout(timeout));
                }
                self.stuck.store(true, Ordering::Relaxed);
                Err(SymbolsError::GivenUp { timeout, busy })
            }
        }
    }

    /// Read the kernel's symbols now, while this process may still see their addresses:
    /// a run that gives up root (a tenant's, whose rule allows kernel addresses) is then
    /// shown `/proc/kallsyms` with every address 0. The symbolizer keeps what it read.
    pub fn warm_kernel(&self) {
        // Any kernel text address: the first symbol of kallsyms with a nonzero address.
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let addr = text.lines().find_map(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok().filter(|a| *a != 0));
        if let Some(addr) = addr {
            let _ = self.ask(vec![(0, true, vec![addr])], TABLE_TIMEOUT);
        }
    }

    /// Symbolize every address in `addrs`, for a recording's table.
    pub fn table(&self, addrs: &Addresses) -> Vec<Recorded> {
        let mut stacks: Vec<Stack> = vec![(0, true, addrs.kernel.iter().copied().collect())];
        let mut by_pid: HashMap<u32, Vec<u64>> = HashMap::new();
        for (pid, addr) in &addrs.user {
            by_pid.entry(*pid).or_default().push(*addr);
        }
        let mut pids: Vec<_> = by_pid.into_iter().collect();
        pids.sort();
        stacks.extend(pids.into_iter().map(|(pid, list)| (pid, false, list)));
        let keys: Vec<(u32, bool)> = stacks.iter().map(|s| (s.0, s.1)).collect();
        let Ok((frames, _)) = self.ask(stacks, TABLE_TIMEOUT) else { return Vec::new() };
        keys.into_iter()
            .zip(frames)
            .flat_map(|((pid, kernel), list)| list.into_iter().map(move |frame| Recorded { pid, kernel, frame }))
            .collect()
    }
}

impl Symbols for Live {
    fn symbolize(&mut self, stacks: &[types::StackRequest], timeout: Duration) -> Result<Answer, SymbolsError> {
        let asked = stacks.iter().map(|s| (s.pid, s.kernel, s.addrs.clone())).collect();
        let (frames, cpu_ns) = self.ask(asked, timeout)?;
        Ok(Answer { frames: frames.into_iter().map(|list| list.into_iter().map(wire).collect()).collect(), cpu_ns })
    }

    fn processes(&mut self, pids: &[u32], timeout: Duration) -> Result<(Vec<Option<Process>>, u64), SymbolsError> {
        let n = pids.len();
        self.wait(|reply| Request::Processes(pids.to_vec(), reply), || (vec![None; n], 0), timeout)
    }
}

/// The addresses of the stacks (and user probe sites) that went into a recording.
#[derive(Default)]
pub struct Addresses {
    kernel: BTreeSet<u64>,
    user: BTreeSet<(u32, u64)>,
}

impl Addresses {
    /// Note every address of `bytes`' records.
    pub fn add(&mut self, bytes: &[u8]) {
        for rec in Records::new(bytes) {
            if self.kernel.len() + self.user.len() >= RECORDED_ADDRS_MAX {
                return;
            }
            if let Some((k, u)) = rec.stacks() {
                self.kernel.extend(k.iter());
                self.user.extend(u.iter().map(|a| (rec.pid(), a)));
            }
            if rec.kind() == Some(Kind::User) {
                if let Some(ip) = rec.u64_at(wasmtap_abi::user::IP) {
                    self.user.insert((rec.pid(), ip));
                }
            }
        }
    }
}

/// A recording's symbol table.
pub struct Table {
    frames: HashMap<(u32, bool, u64), Frame>,
}

impl Table {
    pub fn new(recorded: &[Recorded]) -> Table {
        Table { frames: recorded.iter().map(|r| ((r.pid, r.kernel, r.frame.addr), r.frame.clone())).collect() }
    }
}

impl Table {
    fn frames(&self, pid: u32, kernel: bool, addrs: &[u64]) -> Vec<types::Frame> {
        let pid = if kernel { 0 } else { pid };
        addrs
            .iter()
            .map(|&addr| {
                let f = self.frames.get(&(pid, kernel, addr)).cloned().unwrap_or(Frame { addr, ..Frame::default() });
                wire(f)
            })
            .collect()
    }
}

impl Symbols for Table {
    /// A lookup in memory: nothing to wait for, and its time is already the caller's.
    fn symbolize(&mut self, stacks: &[types::StackRequest], _timeout: Duration) -> Result<Answer, SymbolsError> {
        let frames = stacks.iter().map(|s| self.frames(s.pid, s.kernel, &s.addrs)).collect();
        Ok(Answer { frames, cpu_ns: 0 })
    }
}

fn wire(f: Frame) -> types::Frame {
    types::Frame { addr: f.addr, symbol: f.symbol, offset: f.offset, module: f.module, file: f.file, line: f.line }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names every address `f` after `stall` of CPU time; a kernel request stalls it for good.
    struct Stand {
        stall: Duration,
    }

    impl Resolve for Stand {
        fn observe(&mut self, _pid: u32, _addr: u64) {}
        fn kernel(&mut self, _addrs: &[u64]) -> Vec<Frame> {
            std::thread::sleep(Duration::from_secs(3600));
            Vec::new()
        }
        fn user(&mut self, _pid: u32, addrs: &[u64]) -> Vec<Frame> {
            // CPU time, not wall time: the machine may be shared.
            let start = crate::sys::thread_cpu_ns();
            while crate::sys::thread_cpu_ns() - start < self.stall.as_nanos() as u64 {}
            addrs.iter().map(|&addr| Frame { addr, symbol: "f".into(), ..Frame::default() }).collect()
        }
    }

    fn req(kernel: bool) -> types::StackRequest {
        types::StackRequest { pid: 7, kernel, addrs: vec![0x10, 0x20] }
    }

    #[test]
    fn the_symbolizers_cpu_time_comes_back_with_its_answer() {
        let mut live = Live::with(|| Stand { stall: Duration::from_millis(30) }).unwrap();
        let answer = live.symbolize(&[req(false)], Duration::from_secs(5)).unwrap();
        assert_eq!(answer.frames[0].iter().map(|f| f.symbol.as_str()).collect::<Vec<_>>(), ["f", "f"]);
        // 30 ms of CPU time on the symbolizer thread, measured there.
        assert!(answer.cpu_ns >= 30_000_000, "{} ns", answer.cpu_ns);
    }

    #[test]
    fn a_stuck_symbolizer_fails_the_calls_that_wait_then_the_run_goes_on_without_symbols() {
        let mut live = Live::with(|| Stand { stall: Duration::ZERO }).unwrap();
        let started = std::time::Instant::now();
        let err = live.symbolize(&[req(true)], Duration::from_millis(50)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(err.to_string(), "the symbolizer did not answer within the call's remaining deadline of 50 ms");
        // Busy past STUCK_AFTER with one request: the thread is given up, said once.
        let err = live.symbolize(&[req(false)], STUCK_AFTER).unwrap_err();
        assert!(matches!(err, SymbolsError::GivenUp { .. }), "{err}");
        assert!(err.to_string().ends_with("; the run goes on without symbols"), "{err}");
        let quick = std::time::Instant::now();
        let later = live.symbolize(&[req(false)], Duration::from_secs(5)).unwrap();
        assert!(quick.elapsed() < Duration::from_millis(100), "{:?}", quick.elapsed());
        let frames: Vec<(u64, &str)> = later.frames[0].iter().map(|f| (f.addr, f.symbol.as_str())).collect();
        assert_eq!(frames, [(0x10, ""), (0x20, "")]);
    }
}

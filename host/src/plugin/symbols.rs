//! Symbols for plugins' `symbolize` calls. Live: blazesym over kallsyms and the memory
//! maps of each process, snapshotted when its first stack arrives so it can be
//! symbolized after it exits. Recorded: the table a recording carries, made at the end
//! of `wasmtap record` from every address its stacks hold.

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc::{channel, Sender};

use wasmtap_abi::{Kind, Records};

use crate::collect::recording::SymbolEntry as Recorded;
use crate::sandbox::types;
use crate::sandbox::Symbols;
use crate::symbolize::{Frame, Symbolizer};

/// Distinct addresses kept for a recording's symbol table, at most.
const RECORDED_ADDRS_MAX: usize = 1 << 20;

/// The live symbolizer. blazesym's state is not `Send`, so it lives on a thread of its
/// own; the pipeline shows it processes as their events pass, and plugins ask it for
/// frames, both through a channel.
#[derive(Clone)]
pub struct Live {
    tx: Sender<Request>,
}

enum Request {
    Observe(Vec<u32>),
    Kernel(Vec<u64>, Sender<Vec<Frame>>),
    User(u32, Vec<u64>, Sender<Vec<Frame>>),
}

impl Live {
    /// Start the symbolizer thread.
    pub fn start() -> std::io::Result<Live> {
        let (tx, rx) = channel::<Request>();
        std::thread::Builder::new().name("wasmtap-symbols".into()).spawn(move || {
            let mut sym = Symbolizer::new();
            for req in rx {
                match req {
                    Request::Observe(pids) => pids.into_iter().for_each(|p| sym.observe(p)),
                    Request::Kernel(addrs, reply) => {
                        let _ = reply.send(sym.kernel(&addrs));
                    }
                    Request::User(pid, addrs, reply) => {
                        let _ = reply.send(sym.user(pid, &addrs));
                    }
                }
            }
        })?;
        Ok(Live { tx })
    }

    /// Snapshot the maps of every process with a user stack or a user probe in `bytes`.
    pub fn observe(&self, bytes: &[u8]) {
        let mut pids = Vec::new();
        for rec in Records::new(bytes) {
            let user = match rec.kind() {
                Some(Kind::User) => true,
                Some(k) if k.has_stacks() => rec.stacks().is_some_and(|(_, u)| !u.is_empty()),
                _ => false,
            };
            if user && pids.last() != Some(&rec.pid()) {
                pids.push(rec.pid());
            }
        }
        if !pids.is_empty() {
            pids.sort_unstable();
            pids.dedup();
            let _ = self.tx.send(Request::Observe(pids));
        }
    }

    fn ask(&self, pid: u32, kernel: bool, addrs: &[u64]) -> Vec<Frame> {
        let (reply, answer) = channel();
        let req =
            if kernel { Request::Kernel(addrs.to_vec(), reply) } else { Request::User(pid, addrs.to_vec(), reply) };
        let unknown = || addrs.iter().map(|&addr| Frame { addr, ..Frame::default() }).collect();
        if self.tx.send(req).is_err() {
            return unknown();
        }
        answer.recv().unwrap_or_else(|_| unknown())
    }

    /// Symbolize every address in `addrs`, for a recording's table.
    pub fn table(&self, addrs: &Addresses) -> Vec<Recorded> {
        let kernel: Vec<u64> = addrs.kernel.iter().copied().collect();
        let mut out: Vec<Recorded> =
            self.ask(0, true, &kernel).into_iter().map(|frame| Recorded { pid: 0, kernel: true, frame }).collect();
        let mut by_pid: HashMap<u32, Vec<u64>> = HashMap::new();
        for (pid, addr) in &addrs.user {
            by_pid.entry(*pid).or_default().push(*addr);
        }
        let mut pids: Vec<_> = by_pid.into_iter().collect();
        pids.sort();
        for (pid, list) in pids {
            out.extend(self.ask(pid, false, &list).into_iter().map(|frame| Recorded { pid, kernel: false, frame }));
        }
        out
    }
}

impl Symbols for Live {
    fn frames(&mut self, pid: u32, kernel: bool, addrs: &[u64]) -> Vec<types::Frame> {
        self.ask(pid, kernel, addrs).into_iter().map(wire).collect()
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

impl Symbols for Table {
    fn frames(&mut self, pid: u32, kernel: bool, addrs: &[u64]) -> Vec<types::Frame> {
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

fn wire(f: Frame) -> types::Frame {
    types::Frame { addr: f.addr, symbol: f.symbol, offset: f.offset, module: f.module, file: f.file, line: f.line }
}

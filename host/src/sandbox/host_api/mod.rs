//! The host side of the contract's imports, one file an interface: `output.rs` (rows
//! and text), `probes.rs` (record layouts), `kernel_aggregations.rs` (snapshots),
//! `services.rs` (logs, clocks, symbols), and `previous.rs` (the same for plugins built
//! for `wasmtap:plugin@0.1.0`). Here: what a call's output and imports cost and hold.
//! Nothing here prints: output is collected and handed to the caller after each call.
//! Every guest-supplied size is checked against a cap; a plugin past a cap is trapped,
//! which disables only that plugin.

mod kernel_aggregations;
mod output;
mod previous;
pub(crate) mod probes;
mod services;

use super::symbolize::{self as sym, SharedScope};
use super::{SharedSymbols, StoreState};
use crate::clock::Clock;
use crate::wit::{aggregations, lifecycle, types};

/// Bytes of output (rows, text, logs) a plugin may produce in one call.
const OUTPUT_BYTES_PER_CALL: usize = 16 << 20;
/// Rows a plugin may emit in one call.
const ROWS_PER_CALL: usize = 1 << 20;
/// Output items (`emit`, `emit-packed`, `print` and `log` calls) a plugin may make in one call.
pub const ITEMS_PER_CALL: usize = 1 << 16;
/// What every output item costs against the budget at least, beside its bytes: an empty
/// item still costs the host a dispatch and a write.
pub const ITEM_MIN_BYTES: usize = 64;
/// What every row costs at least, beside its cells.
const ROW_MIN_BYTES: usize = 8;
/// What a log line costs at least: a diagnostic flushes stdout and writes stderr unbuffered.
pub const LOG_MIN_BYTES: usize = 1024;
/// Log lines shown per call; the rest are charged and dropped, so one call cannot bury
/// the user's terminal in diagnostics.
pub const LOG_LINES_PER_CALL: usize = 64;

/// One log line from a plugin.
#[derive(Clone, Debug)]
pub struct LogLine {
    pub level: types::Level,
    pub message: String,
}

/// What a plugin produced during one call, in order.
#[derive(Debug, Default)]
pub struct GuestOutput {
    pub items: Vec<GuestItem>,
    /// Bytes kept.
    pub bytes: u64,
    /// Items (row lists, texts, log lines) dropped because the plugin was over its
    /// output budget, and their bytes.
    pub dropped_items: u64,
    pub dropped_bytes: u64,
    /// The plugin asked to end the run (`services.exit`).
    pub exit: bool,
    rows: usize,
    calls: usize,
    logs: usize,
    /// Bytes that may still be kept before the budget is spent.
    budget: u64,
}

/// One piece of plugin output.
#[derive(Debug)]
pub enum GuestItem {
    Rows(Vec<types::Row>),
    /// Rows as `output.emit-packed` sent them, checked.
    Packed(Vec<u8>),
    Text(String),
    Log(LogLine),
}

/// A plugin produced more in one call than any call may: a fault.
#[derive(Debug)]
pub struct OutputLimit(String);

impl std::fmt::Display for OutputLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OutputLimit {}

impl GuestOutput {
    /// Account for an item of `bytes` (its minimum cost included); `Ok(false)` when it
    /// is over the budget and must be dropped.
    fn charge(&mut self, bytes: usize, rows: usize) -> wasmtime::Result<bool> {
        self.rows = self.rows.saturating_add(rows);
        self.calls += 1;
        let call_bytes = self.bytes + self.dropped_bytes + bytes as u64;
        if call_bytes > OUTPUT_BYTES_PER_CALL as u64 || self.rows > ROWS_PER_CALL || self.calls > ITEMS_PER_CALL {
            return Err(wasmtime::Error::new(OutputLimit(format!(
                "produced more than {} MiB, {} rows or {} output items in one call",
                OUTPUT_BYTES_PER_CALL >> 20,
                ROWS_PER_CALL,
                ITEMS_PER_CALL
            ))));
        }
        if bytes as u64 > self.budget {
            self.budget = 0;
            self.dropped_items += 1;
            self.dropped_bytes += bytes as u64;
            return Ok(false);
        }
        self.budget -= bytes as u64;
        self.bytes += bytes as u64;
        Ok(true)
    }

    /// A log line of `bytes`: charged, and kept only while the call has shown fewer
    /// than [`LOG_LINES_PER_CALL`].
    fn charge_log(&mut self, bytes: usize) -> wasmtime::Result<bool> {
        if !self.charge(bytes, 0)? {
            return Ok(false);
        }
        if self.logs < LOG_LINES_PER_CALL {
            self.logs += 1;
            return Ok(true);
        }
        self.bytes -= bytes as u64;
        self.dropped_items += 1;
        self.dropped_bytes += bytes as u64;
        Ok(false)
    }
}

impl lifecycle::Host for StoreState {}
impl aggregations::Host for StoreState {}

pub(super) struct HostState {
    pub clock: Clock,
    out: GuestOutput,
    /// `probes.schema` answers, by subscription index.
    pub schemas: Vec<Option<types::ProbeSchema>>,
    /// `kernel-aggregations.read-aggregation` answers; none if the plan declared no kernel aggregations.
    pub aggregates: Option<Box<dyn super::Aggregates>>,
    pub symbolize: Symbolize,
    /// What answers `probes.expand`, and how many more calls it may take: some only
    /// while `start` runs.
    pub lister: super::SharedLister,
    pub expand_calls: u32,
    /// What answers `probes.describe`, and how many more calls it may take.
    pub describer: super::SharedDescriber,
    pub describe_calls: u32,
    /// `probes.user-strings` requests of the current `start`, and how many more it may make.
    pub strings_asked: Vec<(String, Vec<String>)>,
    pub strings_calls: u32,
}

/// What `services.symbolize` answers from, may reach, and has cost in the current call.
pub(super) struct Symbolize {
    symbols: SharedSymbols,
    pub scope: SharedScope,
    pub kernel_allowed: bool,
    /// When the current call's deadline passes: the symbolizer may not take longer.
    pub deadline: std::time::Instant,
    /// The symbolizer's CPU time for this call, added to the plugin's meter after it.
    pub cpu_ns: u64,
}

impl HostState {
    pub fn new(clock: Clock, symbols: SharedSymbols) -> Self {
        let out = GuestOutput { budget: u64::MAX, ..GuestOutput::default() };
        let symbolize = Symbolize {
            symbols,
            scope: SharedScope::default(),
            kernel_allowed: false,
            deadline: std::time::Instant::now(),
            cpu_ns: 0,
        };
        HostState {
            clock,
            out,
            schemas: Vec::new(),
            aggregates: None,
            symbolize,
            lister: super::SharedLister::default(),
            expand_calls: 0,
            describer: super::SharedDescriber::default(),
            describe_calls: 0,
            strings_asked: Vec::new(),
            strings_calls: 0,
        }
    }

    /// The first line of the last error the plugin logged in the current call: why a
    /// plugin in another language than Rust says it is failing (the Python SDK logs an
    /// uncaught exception there before the call aborts).
    pub fn last_error(&self) -> Option<&str> {
        self.out.items.iter().rev().find_map(|item| match item {
            GuestItem::Log(l) if l.level == types::Level::Error => l.message.lines().next(),
            _ => None,
        })
    }

    pub fn take_output(&mut self) -> GuestOutput {
        let budget = self.out.budget;
        let out = std::mem::take(&mut self.out);
        self.out.budget = budget;
        out
    }

    pub fn set_output_budget(&mut self, bytes: u64) {
        self.out.budget = bytes;
    }
}

impl Symbolize {
    /// `wasmtap:proc/info.lookup`: pids in the plugin's scope asked of the symbolizer's
    /// thread (which may read /proc) within the call's deadline; the others answered none
    /// without reaching it.
    pub(super) fn processes(&mut self, pids: &[u32]) -> Result<Vec<Option<sym::Process>>, sym::SymbolizeFault> {
        if pids.len() > sym::PROC_PIDS_PER_CALL {
            return Err(sym::SymbolizeFault::TooManyPids(pids.len()));
        }
        let allowed: Vec<bool> = {
            let scope = self.scope.lock().unwrap_or_else(|e| e.into_inner());
            pids.iter().map(|p| scope.contains(*p)).collect()
        };
        let asked: Vec<u32> = pids.iter().zip(&allowed).filter(|(_, ok)| **ok).map(|(p, _)| *p).collect();
        let mut answered = Vec::new().into_iter();
        if !asked.is_empty() {
            let mut guard = self.symbols.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(symbols) = guard.as_mut() {
                let timeout = self.deadline.saturating_duration_since(std::time::Instant::now());
                let (facts, cpu_ns) = symbols.processes(&asked, timeout)?;
                self.cpu_ns += cpu_ns;
                answered = facts.into_iter();
            }
        }
        Ok(pids
            .iter()
            .zip(allowed)
            .map(|(pid, ok)| ok.then(|| answered.next()).flatten().flatten().filter(|p| p.pid == *pid))
            .collect())
    }

    /// Checked whole, screened against the plugin's scope, then answered within the call's
    /// deadline; out-of-scope requests get unknown frames without reaching the symbolizer.
    pub(super) fn answer(
        &mut self,
        stacks: &[types::StackRequest],
    ) -> Result<Vec<Vec<types::Frame>>, sym::SymbolizeFault> {
        sym::check_size(stacks)?;
        let allowed =
            sym::screen(stacks, &mut self.scope.lock().unwrap_or_else(|e| e.into_inner()), self.kernel_allowed);
        let asked: Vec<types::StackRequest> =
            stacks.iter().zip(&allowed).filter(|(_, ok)| **ok).map(|(s, _)| s.clone()).collect();
        let mut answered = Vec::new().into_iter();
        if !asked.is_empty() {
            let mut guard = self.symbols.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(symbols) = guard.as_mut() {
                let timeout = self.deadline.saturating_duration_since(std::time::Instant::now());
                let answer = symbols.symbolize(&asked, timeout)?;
                self.cpu_ns += answer.cpu_ns;
                answered = answer.frames.into_iter();
            }
        }
        let frames = stacks
            .iter()
            .zip(allowed)
            .map(|(s, ok)| match ok.then(|| answered.next()).flatten() {
                Some(frames) if frames.len() == s.addrs.len() => frames,
                _ => sym::unknown_frames(&s.addrs),
            })
            .collect();
        Ok(frames)
    }
}

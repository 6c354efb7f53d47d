//! What a plugin may use, and what breaking it is called: the per-plugin [`Limits`] the
//! sandbox enforces and the accounting reports, what happens on a fault ([`OnFault`]),
//! and the kinds of fault ([`FaultKind`]). Plain data, below every layer that uses it.

use std::time::Duration;

use serde::Serialize;

/// What happens to a plugin that faults (trap, panic, memory, deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnFault {
    /// Discard it; its later events are dropped and counted.
    Disable,
    /// Discard its store and start it again from its compiled form, after a backoff
    /// that doubles with each fault; a crash loop disables it.
    Restart,
}

/// Per-plugin resource limits. [`Limits::default`] gives the defaults `wasmtap run --help` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Limits {
    /// Linear memory and tables, all of the plugin's together.
    pub memory_bytes: usize,
    /// Core instances, tables and memories a plugin may create (each counted alone).
    pub instances: usize,
    /// Whether the user set `instances` (`--max-instances`): then a plugin's manifest
    /// cannot raise it ([`Limits::granting`]).
    #[serde(skip)]
    pub instances_set: bool,
    /// Longest a single call into the plugin may run.
    #[serde(serialize_with = "ser_duration_ms")]
    pub deadline: Duration,
    /// CPU time the plugin may use per second of wall time, in milliseconds (1000 = one CPU).
    pub cpu_ms_per_sec: u64,
    /// Bytes of output (rows, text, logs) per second of wall time.
    pub output_bytes_per_sec: u64,
    /// Aggregation entries the plugin may report in one call.
    pub state_entries: usize,
    pub on_fault: OnFault,
    /// Faults in a row, each before the plugin completed a single call, that end restarting.
    pub crash_loop: u32,
    /// Whether `services.symbolize` answers for kernel addresses: where the run may see the
    /// kernel (a root run may; a tenant of a shared host may not).
    pub kernel_symbols: bool,
}

/// The most core instances a plugin's manifest may ask for (`limits.instances`): a Python
/// plugin built by componentize-py makes 38 (CPython, its libc, its runtime and stubs),
/// a Rust or C plugin 1 to 3. Its memories share the one memory limit whatever their count.
pub const MANIFEST_MAX_INSTANCES: usize = 64;

impl Limits {
    /// These limits with what the plugin's manifest asks for granted (`asked`: its
    /// `limits.instances`): more core instances than the default, up to
    /// [`MANIFEST_MAX_INSTANCES`], unless the user set the count. Nothing else a manifest
    /// says raises a limit.
    pub fn granting(mut self, asked: Option<u32>) -> Limits {
        if let Some(n) = asked.filter(|_| !self.instances_set) {
            self.instances = self.instances.max((n as usize).min(MANIFEST_MAX_INSTANCES));
        }
        self
    }
}

/// Seconds in a row over the CPU or output budget after which a plugin is disabled.
pub const BUDGET_STRIKES: u32 = 3;

fn ser_duration_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            instances: 16,
            instances_set: false,
            deadline: Duration::from_millis(250),
            cpu_ms_per_sec: 500,
            output_bytes_per_sec: 16 << 20,
            state_entries: 1_000_000,
            on_fault: OnFault::Disable,
            crash_loop: 5,
            kernel_symbols: true,
        }
    }
}

/// Why a plugin call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Ran past its deadline (epoch interruption).
    Deadline,
    /// Tried to grow memory, tables or instances past its limits.
    Memory,
    /// A Rust panic (the message is on the plugin's stderr).
    Panic,
    /// Any other wasm trap: `unreachable`, out-of-bounds access, division by zero...
    Trap,
    /// Exceeded the output or copy limit of one call, or its state limit.
    Output,
    /// Tried to sleep or wait inside a host call.
    Blocked,
    /// Broke the host API's contract (a bad id, a malformed request).
    Contract,
}

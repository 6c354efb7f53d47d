//! A plugin call that failed, classified from typed errors: wasmtime's trap codes, the
//! host's own error types; with the plugin's backtrace and panic message where there is one.

use super::*;

/// A plugin tried to wait in a host call.
#[derive(Debug)]
pub(super) struct Blocked(pub(super) &'static str);

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tried to block in the host (wasi:io/poll {}); plugins may not sleep or wait", self.0)
    }
}

impl std::error::Error for Blocked {}

/// A plugin call that failed: the instance is unusable afterwards.
#[derive(Clone, Debug)]
pub struct Fault {
    /// The export being called (`on-batch`…).
    pub callback: &'static str,
    pub kind: FaultKind,
    /// What went wrong, for the user.
    pub reason: String,
    /// The innermost wasm frames, when wasmtime captured them.
    pub backtrace: Option<String>,
    /// How long the call ran before it was stopped.
    pub elapsed: Duration,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in {}: {}", self.callback, self.reason)?;
        if let Some(bt) = &self.backtrace {
            write!(f, " [wasm backtrace: {bt}]")?;
        }
        Ok(())
    }
}

impl Fault {
    pub(super) fn from_error(
        callback: &'static str,
        err: &wasmtime::Error,
        store: &Store<StoreState>,
        limits: &Limits,
        elapsed: Duration,
    ) -> Fault {
        let stderr = store.data().stderr.contents();
        let said = panic_message(&String::from_utf8_lossy(&stderr));
        let (kind, reason) = match err.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) => (
                FaultKind::Deadline,
                format!(
                    "ran past its deadline of {} ms (stopped after {} ms; infinite loop?)",
                    limits.deadline.as_millis(),
                    elapsed.as_millis()
                ),
            ),
            Some(wasmtime::Trap::UnreachableCodeReached) if said.is_some() => (FaultKind::Panic, "panicked".into()),
            Some(wasmtime::Trap::UnreachableCodeReached) => (FaultKind::Trap, "aborted (wasm `unreachable`)".into()),
            Some(wasmtime::Trap::StackOverflow) => (FaultKind::Trap, "overflowed its stack".into()),
            Some(trap) => (FaultKind::Trap, format!("trapped: {trap}")),
            None if err.downcast_ref::<symbolize::SymbolizeFault>().is_some() => {
                let fault = err.downcast_ref::<symbolize::SymbolizeFault>();
                (fault.map_or(FaultKind::Contract, |f| f.kind()), fault.map(|f| f.to_string()).unwrap_or_default())
            }
            None if err.downcast_ref::<Blocked>().is_some() => {
                (FaultKind::Blocked, err.downcast_ref::<Blocked>().map(Blocked::to_string).unwrap_or_default())
            }
            None if err.downcast_ref::<limiter::MemoryCap>().is_some() => (
                FaultKind::Memory,
                format!(
                    "exceeded its memory limit of {} MiB (all memories and tables together)",
                    limits.memory_bytes >> 20
                ),
            ),
            None if err.downcast_ref::<host_api::OutputLimit>().is_some() => (
                FaultKind::Output,
                err.downcast_ref::<host_api::OutputLimit>().map(|e| e.to_string()).unwrap_or_default(),
            ),
            // Anything else failed in the canonical ABI between the plugin and the host:
            // a value the host cannot take (a string that is not UTF-8, a pointer out of
            // bounds, a bad handle) or more than `COPY_BYTES_PER_CALL` copied out of the
            // plugin in one call, which wasmtime reports in its own words.
            None => (FaultKind::Contract, first_line(&err.root_cause().to_string())),
        };
        // Another language's plugin has no Rust panic message: the error it logged in
        // this call before it aborted says why.
        let said = said.or_else(|| {
            let aborted = matches!(err.downcast_ref::<wasmtime::Trap>(), Some(wasmtime::Trap::UnreachableCodeReached));
            aborted.then(|| store.data().host.last_error().map(str::to_string)).flatten()
        });
        let reason = match said {
            Some(line) => format!("{reason}: {}", truncate(&line, 300)),
            None => reason,
        };
        Fault { callback, kind, reason, backtrace: backtrace(err), elapsed }
    }
}

/// `f <- g <- h`, innermost first: function names where the plugin kept them, else indices.
pub(super) fn backtrace(err: &wasmtime::Error) -> Option<String> {
    let bt = err.downcast_ref::<wasmtime::WasmBacktrace>()?;
    let frames: Vec<String> = bt
        .frames()
        .iter()
        .take(BACKTRACE_FRAMES)
        .map(|f| match f.func_name() {
            Some(name) => truncate(name, 80),
            None => format!("func[{}]", f.func_index()),
        })
        .collect();
    if frames.is_empty() {
        return None;
    }
    let more = bt.frames().len().saturating_sub(BACKTRACE_FRAMES);
    let tail = if more > 0 { format!(" <- … {more} more") } else { String::new() };
    Some(format!("{}{tail}", frames.join(" <- ")))
}

/// The message of a Rust panic printed to the guest's stderr, if there is one.
pub(super) fn panic_message(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines().skip_while(|l| !l.contains("panicked at"));
    let at = lines.next()?;
    let msg: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    if msg.is_empty() {
        at.split_once("panicked at").map(|(_, rest)| rest.trim().to_string())
    } else {
        Some(msg.join(" "))
    }
}

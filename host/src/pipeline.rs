//! The run loop: chunks from a source (live collectors or a recording) go to the
//! plugins in batches; ticks fire on time; at the end plugins finish and every event
//! is accounted for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accounting::{Accounting, HostUsage, KernelCounters, LossReason};
use crate::clock::Clock;
use crate::collect::live::{ChunkReceiver, Live};
use crate::collect::overload::{self, Notice};
use crate::collect::recording::{self, Reader, RecordingError, Writer};
use crate::drops;
use crate::output::Output;
use crate::plugin::symbols;
use crate::plugin::PluginSet;
use crate::sys::GatedChild;
use crate::watchdog::{self, Doing};

/// How a live run ends.
pub struct LiveOptions {
    pub stop: Arc<AtomicBool>,
    pub duration: Option<Duration>,
    pub child: Option<GatedChild>,
    pub record: Option<Writer>,
    /// The live symbolizer, shown each process whose stacks pass by.
    pub symbols: Option<symbols::Live>,
    /// The overload guard, which stops the run when the collectors cost too much.
    pub overload: Option<overload::Guard>,
}

/// Run plugins over live events until Ctrl-C, the duration, or the `-c` command's exit.
pub fn run_live(
    plugins: &mut PluginSet,
    mut live: Live,
    rx: ChunkReceiver,
    mut opts: LiveOptions,
    out: &mut Output,
) -> Result<Accounting, RecordingError> {
    let clock = Clock::live();
    let started = Instant::now();
    let mut stopping = false;
    let mut command_status = None;
    let mut addresses = opts.record.as_ref().map(|_| symbols::Addresses::default());
    // Only records that carry user addresses need their processes' maps seen.
    let observer = opts.symbols.clone().filter(|_| plugins.table.has_user_addresses());
    let mut reporter = drops::Reporter::new(drops::REPORT_PERIOD);
    plugins.begin(clock.mono_ns(), out, &clock);
    if let Some(child) = opts.child.as_mut() {
        if let Err(e) = child.release() {
            out.diag(&format!("cannot start the command: {e}"));
        }
    }
    loop {
        watchdog::beat(Doing::Waiting);
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(chunk) => {
                watchdog::beat(Doing::Dispatching);
                if let Some(sym) = &observer {
                    sym.observe(&chunk.bytes);
                }
                if let Some(w) = opts.record.as_mut() {
                    w.chunk(&chunk)?;
                }
                if let Some(a) = addresses.as_mut() {
                    a.add(&chunk.bytes);
                }
                plugins.dispatch(&chunk.bytes, out, &clock);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        watchdog::beat(Doing::Ticking);
        plugins.tick(clock.mono_ns(), out, &clock);
        if reporter.due() {
            report_drops(&mut reporter, &live, plugins, out);
        }
        // Rows reach the reader as they happen (one write per chunk at most), not at exit.
        watchdog::beat(Doing::Flushing);
        out.flush();
        if stopping {
            continue;
        }
        if let Some(child) = opts.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                command_status = Some(status);
                stopping = true;
            }
        }
        let timed_out = opts.duration.is_some_and(|d| started.elapsed() >= d);
        if timed_out || opts.stop.load(Ordering::Relaxed) || out.is_broken() || overloaded(&opts.overload, out) {
            stopping = true;
        }
        if stopping {
            // The drain thread empties the rings once more, then closes the channel.
            live.stop();
        }
    }
    if command_status.is_none() {
        if let Some(child) = opts.child.as_mut() {
            child.kill();
        }
    }
    watchdog::beat(Doing::Finishing);
    plugins.finish(out, &clock);
    let mut kernel = live.counters();
    if let Some(w) = opts.record.take() {
        let symbols = match (&opts.symbols, &addresses) {
            (Some(sym), Some(a)) => sym.table(a),
            _ => Vec::new(),
        };
        // The kernel's counters only: a replay counts its own aggregation losses.
        w.finish(&recording::Trailer { ended_mono_ns: clock.mono_ns(), counters: kernel.clone(), symbols })?;
    }
    add_host_agg_lost(&mut kernel, plugins);
    let stats = plugins.stats(&kernel);
    let collectors = opts.overload.take().map(overload::Guard::finish);
    let host = HostUsage {
        ring_bytes: live.ring_bytes(),
        queue_peak_bytes: rx.peak_bytes(),
        plugin_memory_peak_bytes: plugins.memory_peak_bytes(),
        ..HostUsage::now()
    };
    Ok(Accounting { kernel, plugins: stats, command_status, host, collectors })
}

/// True when the overload guard says the collectors cost too much; its notices go out
/// as diagnostics.
fn overloaded(guard: &Option<overload::Guard>, out: &mut Output) -> bool {
    match guard.as_ref().and_then(overload::Guard::poll) {
        Some(Notice::Overloaded(why)) => {
            out.diag(&why);
            true
        }
        Some(Notice::Unmeasured(why)) => {
            out.diag(&why);
            false
        }
        None => false,
    }
}

/// One live drop report, if anything was lost since the last.
fn report_drops(reporter: &mut drops::Reporter, live: &Live, plugins: &PluginSet, out: &mut Output) {
    let kernel = live.counters();
    let stats = plugins.stats(&kernel);
    if let Some(line) = reporter.report(drops::Tally::of(&kernel, &stats)) {
        out.diag(&line);
    }
}

/// Run plugins over a recording. Time is the recording's: ticks fire at recorded
/// timestamps, so the same recording gives the same output every time.
pub fn run_replay(plugins: &mut PluginSet, mut reader: Reader, out: &mut Output) -> Result<Accounting, RecordingError> {
    let base =
        Clock { fixed_mono_ns: Some(reader.header.started_mono_ns), wall_offset_ns: reader.header.wall_offset_ns };
    let mut now = reader.header.started_mono_ns;
    plugins.begin(now, out, &base);
    plugins.tick(now, out, &base);
    while let Some(chunk) = reader.next_chunk()? {
        watchdog::beat(Doing::Dispatching);
        if let Some(first) = wasmtap_abi::Records::new(&chunk.bytes).next() {
            now = now.max(first.ts_ns());
        }
        let clock = Clock { fixed_mono_ns: Some(now), ..base };
        plugins.tick(now, out, &clock);
        plugins.dispatch(&chunk.bytes, out, &clock);
        if let Some(last) = wasmtap_abi::Records::new(&chunk.bytes).last() {
            now = now.max(last.ts_ns());
        }
    }
    let kernel = reader.trailer().map(|t| t.counters.clone()).unwrap_or_default();
    let end = reader.trailer().map_or(now, |t| t.ended_mono_ns.max(now));
    let clock = Clock { fixed_mono_ns: Some(end), ..base };
    plugins.tick(end, out, &clock);
    watchdog::beat(Doing::Finishing);
    plugins.finish(out, &clock);
    let mut kernel = kernel;
    add_host_agg_lost(&mut kernel, plugins);
    let stats = plugins.stats(&kernel);
    let host = HostUsage { plugin_memory_peak_bytes: plugins.memory_peak_bytes(), ..HostUsage::now() };
    Ok(Accounting { kernel, plugins: stats, command_status: None, host, collectors: None })
}

/// Events that kernel aggregations computed in the host (recording, replay) could not
/// keep because their map was full, reported like the kernel's own.
fn add_host_agg_lost(kernel: &mut KernelCounters, plugins: &PluginSet) {
    let (lost, starts_lost) = plugins.agg_lost();
    if lost > 0 {
        kernel.aggregated.get_or_insert_with(Default::default).dropped += lost;
        kernel.add_loss(LossReason::AggMapFull, lost);
    }
    kernel.add_loss(LossReason::StartMapFull, starts_lost);
}

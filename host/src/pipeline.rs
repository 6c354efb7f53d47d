//! The run loop: chunks from an [`EventSource`] (live collectors or a recording, with a
//! recording [`Tee`] on either) go to the plugins in batches; ticks fire on the source's
//! time; at the end plugins finish and every event is accounted for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accounting::{Accounting, HostUsage, KernelCounters, LossReason};
use crate::collect::overload::{self, Notice};
use crate::collect::recording::{self, RecordingError, Writer};
use crate::collect::source::{EventSource, Next, SourceEnd};
use crate::drops;
use crate::output::Output;
use crate::plugin::symbols;
use crate::plugin::PluginSet;
use crate::sys::GatedChild;
use crate::watchdog::{self, Doing};

/// How a run ends, and what watches it. A replay needs none of it.
#[derive(Default)]
pub struct RunOptions {
    /// Set by SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    pub duration: Option<Duration>,
    /// The `-c` command: released once the plugins have begun; the run ends when it exits.
    pub child: Option<GatedChild>,
    /// The live symbolizer, shown each process whose stacks pass by.
    pub symbols: Option<symbols::Live>,
    /// The overload guard, which stops the run when the collectors cost too much.
    pub overload: Option<overload::Guard>,
    /// The metrics export, given the run's accounting this often.
    pub export: Option<(Arc<crate::export::Sink>, Duration)>,
}

/// Run plugins over `source` until it ends, or until Ctrl-C, the duration, the `-c`
/// command's exit, a plugin's `exit`, a closed output or the overload guard ends it.
pub fn run(
    plugins: &mut PluginSet,
    source: &mut dyn EventSource,
    mut opts: RunOptions,
    out: &mut Output,
) -> Result<Accounting, RecordingError> {
    let started = Instant::now();
    let mut stopping = false;
    let mut command_status = None;
    // Only records that carry user addresses need their processes' maps seen.
    let observer = opts.symbols.clone().filter(|_| plugins.table.has_user_addresses());
    let mut reporter = drops::Reporter::new(drops::REPORT_PERIOD);
    let mut exported = Instant::now();
    let clock = source.clock();
    plugins.begin(clock.mono_ns(), out, &clock);
    plugins.tick(clock.mono_ns(), out, &clock);
    if let Some(child) = opts.child.as_mut() {
        if let Err(e) = child.release() {
            out.diag(&format!("cannot start the command: {e}"));
        }
    }
    loop {
        watchdog::beat(Doing::Waiting);
        let chunk = match source.next()? {
            Next::Chunk(chunk) => Some(chunk),
            Next::Idle => None,
            Next::End => break,
        };
        // Timers due by the source's time fire before the records that come after them.
        let clock = source.clock();
        watchdog::beat(Doing::Ticking);
        plugins.tick(clock.mono_ns(), out, &clock);
        if let Some(chunk) = chunk {
            watchdog::beat(Doing::Dispatching);
            if let Some(sym) = &observer {
                sym.observe(&chunk.bytes);
            }
            plugins.dispatch(&chunk.bytes, out, &clock);
            source.recycle(chunk);
        }
        if reporter.due() {
            if let Some(kernel) = source.counters_now() {
                report_drops(&mut reporter, &kernel, plugins, out);
            }
        }
        for notice in source.notices() {
            out.diag(&notice);
        }
        if let Some((sink, every)) = &opts.export {
            if exported.elapsed() >= *every {
                exported = Instant::now();
                if let Some(mut kernel) = source.counters_now() {
                    add_host_agg_lost(&mut kernel, plugins);
                    sink.account(&plugins.stats(&kernel));
                }
            }
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
        if timed_out
            || opts.stop.load(Ordering::Relaxed)
            || plugins.exit_asked()
            || out.is_broken()
            || overloaded(&opts.overload, out)
        {
            stopping = true;
        }
        if stopping {
            source.stop();
        }
    }
    if command_status.is_none() {
        if let Some(child) = opts.child.as_mut() {
            child.kill();
        }
    }
    let clock = source.clock();
    plugins.tick(clock.mono_ns(), out, &clock);
    watchdog::beat(Doing::Finishing);
    plugins.finish(out, &clock);
    let SourceEnd { mut kernel, ring_bytes, queue_peak_bytes, collectors: measured } = source.finish()?;
    for notice in source.notices() {
        out.diag(&notice);
    }
    add_host_agg_lost(&mut kernel, plugins);
    let stats = plugins.stats(&kernel);
    if let Some((sink, _)) = &opts.export {
        sink.account(&stats);
    }
    let collectors = opts.overload.take().map(overload::Guard::finish).or(measured);
    let host = HostUsage {
        ring_bytes,
        queue_peak_bytes,
        plugin_memory_peak_bytes: plugins.memory_peak_bytes(),
        ..HostUsage::now()
    };
    Ok(Accounting { kernel, plugins: stats, command_status, host, collectors, bounds: Default::default() })
}

/// Recording as a tee on any source: each chunk is written before the plugins see it,
/// the trailer (the collectors' counters, and the names of the user addresses the
/// records carry) once the source is done.
pub struct Tee<'a> {
    inner: &'a mut dyn EventSource,
    writer: Option<Writer>,
    symbols: Option<symbols::Live>,
    addresses: symbols::Addresses,
}

impl<'a> Tee<'a> {
    /// Write what `inner` yields with `writer`; name user addresses with `symbols`.
    pub fn new(inner: &'a mut dyn EventSource, writer: Writer, symbols: Option<symbols::Live>) -> Tee<'a> {
        Tee { inner, writer: Some(writer), symbols, addresses: symbols::Addresses::default() }
    }
}

impl EventSource for Tee<'_> {
    fn next(&mut self) -> Result<Next, RecordingError> {
        let next = self.inner.next()?;
        if let (Next::Chunk(chunk), Some(w)) = (&next, self.writer.as_mut()) {
            w.chunk(chunk)?;
            self.addresses.add(&chunk.bytes);
        }
        Ok(next)
    }

    fn clock(&self) -> crate::clock::Clock {
        self.inner.clock()
    }

    fn counters_now(&self) -> Option<KernelCounters> {
        self.inner.counters_now()
    }

    fn notices(&mut self) -> Vec<String> {
        self.inner.notices()
    }

    fn recycle(&mut self, chunk: crate::collect::Chunk) {
        self.inner.recycle(chunk);
    }

    fn stop(&mut self) {
        self.inner.stop();
    }

    fn finish(&mut self) -> Result<SourceEnd, RecordingError> {
        let end = self.inner.finish()?;
        if let Some(w) = self.writer.take() {
            let symbols = self.symbols.as_ref().map(|s| s.table(&self.addresses)).unwrap_or_default();
            let ended_mono_ns = self.inner.clock().mono_ns();
            // The kernel's counters only: a replay counts its own aggregation losses.
            w.finish(&recording::Trailer { ended_mono_ns, counters: end.kernel.clone(), symbols })?;
        }
        Ok(end)
    }
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
fn report_drops(reporter: &mut drops::Reporter, kernel: &KernelCounters, plugins: &PluginSet, out: &mut Output) {
    let stats = plugins.stats(kernel);
    if let Some(line) = reporter.report(drops::Tally::of(kernel, &stats)) {
        out.diag(&line);
    }
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

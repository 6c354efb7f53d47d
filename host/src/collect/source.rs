//! Where a run's events come from, as the pipeline sees them: an [`EventSource`]. Today
//! the live collectors ([`LiveSource`]), a recording ([`Replay`]), and a tenant's
//! collectors in another process (`service::executor::ShmSource`). Recording is a tee on any source
//! (`pipeline::Tee`), so the pipeline has one loop for all of them.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use super::live::{ChunkReceiver, Live};
use super::recording::{Reader, RecordingError};
use super::Chunk;
use crate::accounting::KernelCounters;
use crate::clock::Clock;

/// What a source has next.
pub enum Next {
    /// Records, in the `wasmtap-abi` layout.
    Chunk(Chunk),
    /// Nothing yet (a live source waited a few milliseconds); time still passes.
    Idle,
    /// The source is done.
    End,
}

/// What a source counted and held, once it is done.
#[derive(Debug, Default)]
pub struct SourceEnd {
    /// The collectors' counters: live, or as recorded.
    pub kernel: KernelCounters,
    /// Bytes of ring buffer the collectors had mapped.
    pub ring_bytes: u64,
    /// The most the queue between the collectors and the pipeline held at once.
    pub queue_peak_bytes: u64,
    /// What the collectors cost, when another process measured it (a tenant's run).
    pub collectors: Option<crate::accounting::CollectorCost>,
}

/// A stream of record chunks and the time they happen in.
pub trait EventSource {
    /// The next chunk; `Idle` when none came within a few milliseconds.
    fn next(&mut self) -> Result<Next, RecordingError>;

    /// The plugins' clock at this point of the source: the machine's, or the recording's
    /// time as of the records handed out so far.
    fn clock(&self) -> Clock;

    /// The collectors' counters so far, if the source can tell while it runs (for live
    /// loss reports).
    fn counters_now(&self) -> Option<KernelCounters> {
        None
    }

    /// What the source has to tell the user since it was last asked (a tenant's
    /// collectors, in another process, say why they stopped).
    fn notices(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// A chunk the pipeline is done with: a source may fill its buffer again.
    fn recycle(&mut self, chunk: Chunk) {
        drop(chunk);
    }

    /// Begin to end: what is already on its way still comes, then [`Next::End`].
    fn stop(&mut self);

    /// Once `next` said `End`: what the source counted and held.
    fn finish(&mut self) -> Result<SourceEnd, RecordingError>;
}

/// The live collectors: chunks as the drain thread copies them out of the rings.
pub struct LiveSource {
    // Dropped before `live`, whose drop waits for the drain thread's last pass: that
    // pass ends at once when no one can take its chunks.
    rx: ChunkReceiver,
    live: Live,
    clock: Clock,
}

impl LiveSource {
    pub fn new(live: Live, rx: ChunkReceiver) -> LiveSource {
        LiveSource { rx, live, clock: Clock::live() }
    }
}

impl EventSource for LiveSource {
    fn next(&mut self) -> Result<Next, RecordingError> {
        Ok(match self.rx.recv_timeout(Duration::from_millis(5)) {
            Ok(chunk) => Next::Chunk(chunk),
            Err(RecvTimeoutError::Timeout) => Next::Idle,
            Err(RecvTimeoutError::Disconnected) => Next::End,
        })
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    fn counters_now(&self) -> Option<KernelCounters> {
        Some(self.live.counters())
    }

    fn recycle(&mut self, chunk: Chunk) {
        self.rx.recycle(chunk);
    }

    /// The drain thread empties the rings once more, then closes the queue.
    fn stop(&mut self) {
        self.live.stop();
    }

    fn finish(&mut self) -> Result<SourceEnd, RecordingError> {
        Ok(SourceEnd {
            kernel: self.live.counters(),
            ring_bytes: self.live.ring_bytes(),
            queue_peak_bytes: self.rx.peak_bytes(),
            collectors: None,
        })
    }
}

/// A recording, in the recording's own time: the clock stands at the latest timestamp
/// handed out, so the same recording gives the same output every time.
pub struct Replay {
    reader: Reader,
    /// The recording's monotonic time as of the chunks handed out.
    now: u64,
    /// The last timestamp of the chunk handed out last: time reaches it once the
    /// plugins have seen that chunk.
    after_chunk: u64,
    stopped: bool,
    ended: bool,
}

impl Replay {
    pub fn new(reader: Reader) -> Replay {
        let now = reader.header.started_mono_ns;
        Replay { reader, now, after_chunk: now, stopped: false, ended: false }
    }
}

impl EventSource for Replay {
    fn next(&mut self) -> Result<Next, RecordingError> {
        self.now = self.now.max(self.after_chunk);
        let chunk = if self.stopped { None } else { self.reader.next_chunk()? };
        let Some(chunk) = chunk else {
            if !self.ended {
                self.ended = true;
                let ended = self.reader.trailer().map_or(self.now, |t| t.ended_mono_ns);
                self.now = self.now.max(ended);
            }
            return Ok(Next::End);
        };
        if let Some(first) = wasmtap_abi::Records::new(&chunk.bytes).next() {
            self.now = self.now.max(first.ts_ns());
        }
        if let Some(last) = wasmtap_abi::Records::new(&chunk.bytes).last() {
            self.after_chunk = last.ts_ns();
        }
        Ok(Next::Chunk(chunk))
    }

    fn clock(&self) -> Clock {
        Clock { fixed_mono_ns: Some(self.now), wall_offset_ns: self.reader.header.wall_offset_ns }
    }

    fn stop(&mut self) {
        self.stopped = true;
    }

    fn finish(&mut self) -> Result<SourceEnd, RecordingError> {
        let kernel = self.reader.trailer().map(|t| t.counters.clone()).unwrap_or_default();
        Ok(SourceEnd { kernel, ..SourceEnd::default() })
    }
}

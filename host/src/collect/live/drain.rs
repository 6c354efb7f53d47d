//! The drain thread: copies records out of the rings into chunks, and the bounded queue
//! between it and the pipeline ([`super::super::queue`]).

use super::*;

/// Records per chunk handed to the pipeline (bytes).
pub(super) const CHUNK_BYTES: usize = 256 << 10;
/// Bytes of records queued between the drain thread and the pipeline, in resident pages
/// ([`super::queue`]). Past it the drain thread waits and the rings fill: the kernel
/// counts what it cannot write, per probe. 12 MiB holds ~110,000 syscalls or ~60,000
/// opens, beside the ring's own: with the syscall ring, a plugin stalled for 250 ms (the
/// default deadline) loses nothing at 1 M events a second. A queued byte costs the host
/// one resident byte, as a ring byte does (a ring is mapped once, all of it from the
/// start: [`crate::sys::ring`]), so a stream at full rate peaks at the rings + 12 MiB +
/// the plugins + ~18 MiB: 47.5-48 MiB for one syscall stream at 0.6 to 1.2 M calls a
/// second, nothing lost in the host.
pub(super) const BYTES_IN_FLIGHT: u64 = 12 << 20;

pub(super) struct Drainer {
    pub(super) rings: Vec<crate::sys::ring::Ring>,
    pub(super) tx: ChunkSender,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) malformed: Arc<AtomicU64>,
}

impl Drainer {
    pub(super) fn run(mut self) {
        let mut chunk = Chunk::with_capacity(CHUNK_BYTES + 4096);
        loop {
            // Once stopping, the collectors are detached: this pass is the last, and it
            // reads everything they wrote, still within the queue's bound (the pipeline
            // keeps taking chunks until this thread is done).
            let stopping = self.stop.load(Ordering::Relaxed);
            self.tx.wait_for_room();
            let got = self.drain_once(&mut chunk);
            if !chunk.bytes.is_empty() {
                self.tx.send(&mut chunk);
            }
            if stopping {
                return;
            }
            if got == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn drain_once(&mut self, chunk: &mut Chunk) -> usize {
        let mut n = 0;
        for ring in &mut self.rings {
            loop {
                let start = chunk.bytes.len();
                let Some(len) = ring.next_into(&mut chunk.bytes) else { break };
                n += 1;
                match wasmtap_abi::check_record(&chunk.bytes[start..start + len]) {
                    Ok((_, size)) => {
                        chunk.bytes.truncate(start + size);
                        chunk.records += 1;
                    }
                    Err(_) => {
                        chunk.bytes.truncate(start);
                        self.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if chunk.bytes.len() >= CHUNK_BYTES {
                    self.tx.send(chunk);
                    self.tx.wait_for_room();
                }
            }
        }
        n
    }
}

/// The drain thread's end of the pipeline. It never drops: past [`BYTES_IN_FLIGHT`]
/// queued bytes the thread stops draining ([`ChunkSender::wait_for_room`]), the rings
/// fill, and the kernel counts the events it cannot write in their probes' rows.
pub(super) struct ChunkSender {
    pub(super) tx: crate::collect::queue::QueueSender,
    pub(super) drops: Arc<AtomicU64>,
}

impl ChunkSender {
    /// Hand a chunk to the pipeline; its records count as dropped only if the pipeline
    /// is gone.
    fn send(&self, chunk: &mut Chunk) {
        let empty = Chunk { bytes: self.tx.buffer(CHUNK_BYTES + 4096), records: 0 };
        let full = std::mem::replace(chunk, empty);
        if let Err(lost) = self.tx.send(full) {
            self.drops.fetch_add(lost.records, Ordering::Relaxed);
        }
    }

    /// Backpressure: wait while the pipeline is [`BYTES_IN_FLIGHT`] or more behind, also
    /// for the last drain after `Live::stop`; returns at once when the pipeline is gone.
    fn wait_for_room(&self) {
        self.tx.wait_for_room();
    }
}

/// The pipeline's end: chunks in the order the rings gave them.
pub struct ChunkReceiver {
    pub(super) rx: crate::collect::queue::QueueReceiver,
}

impl ChunkReceiver {
    /// The next chunk, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Chunk, std::sync::mpsc::RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// The most bytes of chunks queued at once, in resident pages.
    pub fn peak_bytes(&self) -> u64 {
        self.rx.peak_bytes()
    }

    /// A chunk the pipeline is done with: its buffer is drained into again.
    pub fn recycle(&self, chunk: Chunk) {
        self.rx.recycle(chunk);
    }
}

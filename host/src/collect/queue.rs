//! The queue of chunks between the drain thread and the pipeline, bounded by bytes.
//!
//! The sender waits for room before it drains the rings again ([`QueueSender::wait_for_room`]),
//! so past the bound records stay in the rings, which are mapped anyway, and what the
//! rings cannot hold the kernel counts per probe. A chunk is charged by the pages it
//! touches, which is what it adds to the host's resident memory; the queue keeps its
//! peak for `--stats`. The pipeline hands spent chunks' buffers back
//! ([`QueueReceiver::recycle`]) and the sender reuses them ([`QueueSender::buffer`]): a
//! chunk of a few hundred KiB allocated and freed a thousand times a second otherwise
//! costs the host a mapping, page faults and an unmapping each time.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Chunk;

const PAGE: u64 = 4096;
/// Spent buffers kept for reuse, at most.
const SPARE: usize = 16;

/// What a chunk costs in resident memory: its bytes, in whole pages.
pub fn charge(chunk: &Chunk) -> u64 {
    (chunk.bytes.len() as u64).div_ceil(PAGE).max(1) * PAGE
}

#[derive(Default)]
struct State {
    chunks: VecDeque<Chunk>,
    /// Buffers of chunks the pipeline is done with, empty, for the sender to fill again.
    spare: Vec<Vec<u8>>,
    bytes: u64,
    peak: u64,
    senders_gone: bool,
    receiver_gone: bool,
}

struct Shared {
    cap: u64,
    state: Mutex<State>,
    /// Signalled when a chunk arrives or the sender goes.
    filled: Condvar,
    /// Signalled when a chunk leaves or the receiver goes.
    emptied: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A queue of at most `cap` bytes of chunks (plus the one that crosses it).
pub fn bounded(cap: u64) -> (QueueSender, QueueReceiver) {
    let shared =
        Arc::new(Shared { cap, state: Mutex::new(State::default()), filled: Condvar::new(), emptied: Condvar::new() });
    (QueueSender { shared: shared.clone() }, QueueReceiver { shared })
}

/// The drain thread's end.
pub struct QueueSender {
    shared: Arc<Shared>,
}

impl QueueSender {
    /// Queue a chunk; it comes back if the receiver is gone.
    pub fn send(&self, chunk: Chunk) -> Result<(), Chunk> {
        let mut s = self.shared.lock();
        if s.receiver_gone {
            return Err(chunk);
        }
        s.bytes += charge(&chunk);
        s.peak = s.peak.max(s.bytes);
        s.chunks.push_back(chunk);
        drop(s);
        self.shared.filled.notify_one();
        Ok(())
    }

    /// Wait while the queue holds its bound or more; returns at once when the receiver is
    /// gone. Its owner must keep receiving until the sender is gone, or drop the receiver.
    pub fn wait_for_room(&self) {
        let mut s = self.shared.lock();
        while s.bytes >= self.shared.cap && !s.receiver_gone {
            s = self.shared.emptied.wait_timeout(s, Duration::from_millis(1)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// An empty buffer for a chunk of `capacity` bytes: a spent one if the pipeline gave
    /// one back, else a new one.
    pub fn buffer(&self, capacity: usize) -> Vec<u8> {
        let spare = self.shared.lock().spare.pop();
        match spare {
            Some(mut b) => {
                b.reserve(capacity);
                b
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// Bytes queued now.
    pub fn bytes(&self) -> u64 {
        self.shared.lock().bytes
    }
}

impl Drop for QueueSender {
    fn drop(&mut self) {
        self.shared.lock().senders_gone = true;
        self.shared.filled.notify_all();
    }
}

/// The pipeline's end: chunks in the order they were sent.
pub struct QueueReceiver {
    shared: Arc<Shared>,
}

impl QueueReceiver {
    /// The next chunk, waiting up to `timeout`; `Disconnected` once the sender is gone
    /// and the queue is empty.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Chunk, RecvTimeoutError> {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.lock();
        loop {
            if let Some(chunk) = s.chunks.pop_front() {
                s.bytes -= charge(&chunk);
                drop(s);
                self.shared.emptied.notify_one();
                return Ok(chunk);
            }
            if s.senders_gone {
                return Err(RecvTimeoutError::Disconnected);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            s = self.shared.filled.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The most bytes the queue held at once.
    pub fn peak_bytes(&self) -> u64 {
        self.shared.lock().peak
    }

    /// Give back a spent chunk's buffer for the sender to reuse (at most [`SPARE`] are kept).
    pub fn recycle(&self, chunk: Chunk) {
        let mut bytes = chunk.bytes;
        bytes.clear();
        let mut s = self.shared.lock();
        if s.spare.len() < SPARE && !s.senders_gone {
            s.spare.push(bytes);
        }
    }

    /// The bound.
    pub fn cap(&self) -> u64 {
        self.shared.cap
    }
}

impl Drop for QueueReceiver {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.receiver_gone = true;
        // What is left is freed now, not when the sender goes.
        s.chunks.clear();
        s.spare.clear();
        s.bytes = 0;
        drop(s);
        self.shared.emptied.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(bytes: usize) -> Chunk {
        Chunk { bytes: vec![0; bytes], records: 1 }
    }

    #[test]
    fn chunks_are_charged_in_pages_and_come_out_in_order() {
        let (tx, rx) = bounded(1 << 20);
        for n in [1, 4096, 4097, 100] {
            tx.send(chunk(n)).unwrap();
        }
        assert_eq!(tx.bytes(), 4096 + 4096 + 8192 + 4096);
        let sizes: Vec<usize> = (0..4).map(|_| rx.recv_timeout(Duration::ZERO).unwrap().bytes.len()).collect();
        assert_eq!(sizes, [1, 4096, 4097, 100]);
        assert_eq!(tx.bytes(), 0);
        assert_eq!(rx.peak_bytes(), 20480, "the peak stays");
        assert!(matches!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Timeout)));
    }

    #[test]
    fn spent_buffers_are_filled_again_a_few_at_most() {
        let (tx, rx) = bounded(1 << 20);
        let fresh = tx.buffer(64 << 10);
        assert!(fresh.is_empty() && fresh.capacity() >= 64 << 10);
        for _ in 0..SPARE + 2 {
            tx.send(chunk(300 << 10)).unwrap();
        }
        for _ in 0..SPARE + 2 {
            rx.recycle(rx.recv_timeout(Duration::ZERO).unwrap());
        }
        // SPARE kept, each empty with its bytes still allocated; then new ones.
        for _ in 0..SPARE {
            let b = tx.buffer(64 << 10);
            assert!(b.is_empty() && b.capacity() >= 300 << 10, "{}", b.capacity());
        }
        assert!(tx.buffer(64 << 10).capacity() < 300 << 10);
        // Kept buffers are not charged to the queue.
        assert_eq!(tx.bytes(), 0);
    }

    #[test]
    fn the_sender_waits_at_the_bound_until_the_receiver_takes() {
        let (tx, rx) = bounded(8192);
        tx.send(chunk(8192)).unwrap();
        let taker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let c = rx.recv_timeout(Duration::ZERO).unwrap();
            (c, rx)
        });
        let t = Instant::now();
        tx.wait_for_room();
        assert!(t.elapsed() >= Duration::from_millis(40), "waited for the receiver");
        let (c, rx) = taker.join().unwrap();
        assert_eq!(c.bytes.len(), 8192);
        assert_eq!(tx.bytes(), 0);
        // Under the bound: no wait.
        tx.send(chunk(100)).unwrap();
        let t = Instant::now();
        tx.wait_for_room();
        assert!(t.elapsed() < Duration::from_millis(40));
        assert_eq!(rx.peak_bytes(), 8192);
    }

    #[test]
    fn a_gone_receiver_ends_the_wait() {
        let (tx, rx) = bounded(4096);
        tx.send(chunk(10)).unwrap();
        drop(rx);
        tx.wait_for_room();
        assert_eq!(tx.bytes(), 0, "what was queued is freed with the receiver");
        assert!(tx.send(chunk(10)).is_err(), "the chunk comes back");
    }

    #[test]
    fn the_receiver_drains_then_sees_the_sender_gone() {
        let (tx, rx) = bounded(1 << 20);
        tx.send(chunk(10)).unwrap();
        drop(tx);
        assert_eq!(rx.recv_timeout(Duration::ZERO).unwrap().bytes.len(), 10);
        assert!(matches!(rx.recv_timeout(Duration::from_secs(5)), Err(RecvTimeoutError::Disconnected)));
    }
}

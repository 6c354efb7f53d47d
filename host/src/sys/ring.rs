//! The consumer side of a BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`), with its data pages
//! mapped once.
//!
//! The kernel lays a ring's data out twice in a row so that a reader may see a record
//! that wraps past the end as one slice; a reader that maps it that way (libbpf, aya)
//! holds every data page twice in its resident set from the moment it maps the ring.
//! The host copies each record out into a chunk anyway, so it maps the data once and
//! copies a record that wraps in two pieces: a ring costs the host its size, not twice
//! its size. The protocol is the kernel's (`kernel/bpf/ringbuf.c`): an 8-byte header per
//! record, its length with a busy and a discard bit, records 8-byte aligned, the
//! producer's position read with acquire and the consumer's written with release.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::page_size;

const HEADER: u64 = 8;
const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
/// `BPF_MAP_TYPE_RINGBUF`.
const RINGBUF: u32 = 27;

/// One ring's consumer: the consumer page mapped writable, the producer page and the
/// data mapped read-only, once.
pub struct Ring {
    consumer: *mut u8,
    producer: *mut u8,
    size: u64,
    /// The consumer position as last written (this is the ring's only consumer).
    pos: u64,
    /// False for a ring over test memory, which is not unmapped.
    mapped: bool,
}

// SAFETY: the mappings belong to this value alone and are only touched through &mut
// self (reads of the kernel's side are atomic loads), so moving it to another thread
// is sound.
unsafe impl Send for Ring {}

impl Ring {
    /// Map the ring behind `map`, a ring buffer map. It stays mapped (and the map alive)
    /// until the `Ring` is dropped, whatever becomes of `map`'s descriptor.
    pub fn open(map: BorrowedFd<'_>) -> io::Result<Ring> {
        let (kind, size) = super::bpf::map_kind_and_entries(map)?;
        let size = size as usize;
        let page = page_size();
        if kind != RINGBUF || size == 0 || !size.is_power_of_two() || !size.is_multiple_of(page) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a ring buffer map (type {kind}, {size} bytes)"),
            ));
        }
        let consumer = mmap(map, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = match mmap(map, page + size, libc::PROT_READ, page) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: unmapping the page mapped just above, which nothing else uses.
                unsafe { libc::munmap(consumer.cast(), page) };
                return Err(e);
            }
        };
        let mut ring = Ring { consumer, producer, size: size as u64, pos: 0, mapped: true };
        ring.pos = ring.consumer_pos().load(Ordering::Acquire);
        Ok(ring)
    }

    /// Resident bytes the mappings hold: the two position pages and the data once.
    pub fn resident_bytes(&self) -> u64 {
        2 * page_size() as u64 + self.size
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer page is mapped for the life of `self`, page aligned, and
        // its first 8 bytes are the kernel's `consumer_pos`, which only this reader writes.
        unsafe { &*(self.consumer as *const AtomicU64) }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, for the producer page's `producer_pos`, which the kernel writes.
        unsafe { &*(self.producer as *const AtomicU64) }
    }

    /// The data area, `size` bytes after the producer page.
    fn data(&self) -> *const u8 {
        // SAFETY: the producer mapping is a page and `size` bytes long.
        unsafe { self.producer.add(page_size()) }
    }

    /// Append the next committed record to `out` and give its length; None when there
    /// is none yet (none written, or the next one still being written). Records the
    /// producer discarded are skipped. The record's space is handed back to the kernel
    /// before this returns.
    pub fn next_into(&mut self, out: &mut Vec<u8>) -> Option<usize> {
        loop {
            let produced = self.producer_pos().load(Ordering::Acquire);
            if self.pos >= produced {
                return None;
            }
            let mask = self.size - 1;
            let at = (self.pos & mask) as usize;
            // SAFETY: headers are 8-byte aligned inside the data area (positions advance
            // by multiples of 8 and the size is a multiple of the page), so the 4 bytes
            // at `at` lie within it, aligned for an AtomicU32 the kernel writes.
            let header = unsafe { &*(self.data().add(at) as *const AtomicU32) }.load(Ordering::Acquire);
            if header & BUSY != 0 {
                return None;
            }
            let len = u64::from(header & !(BUSY | DISCARD));
            let next = self.pos + (len + HEADER).div_ceil(8) * 8;
            let copied = if header & DISCARD == 0 {
                // A length past the ring cannot come from the kernel; never read past it.
                let len = len.min(self.size - HEADER) as usize;
                let start = ((self.pos + HEADER) & mask) as usize;
                let first = len.min(self.size as usize - start);
                // SAFETY: `start + first` and `len - first` are within the data area of
                // `size` bytes; the kernel does not write a record between its commit
                // (the busy bit cleared, read above with acquire) and our release of it.
                unsafe {
                    out.extend_from_slice(std::slice::from_raw_parts(self.data().add(start), first));
                    out.extend_from_slice(std::slice::from_raw_parts(self.data(), len - first));
                }
                Some(len)
            } else {
                None
            };
            self.pos = next;
            self.consumer_pos().store(next, Ordering::Release);
            if copied.is_some() {
                return copied;
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if !self.mapped {
            return;
        }
        // SAFETY: unmapping the two mappings `open` made, once; no reference into them
        // outlives `self`.
        unsafe {
            libc::munmap(self.consumer.cast(), page_size());
            libc::munmap(self.producer.cast(), page_size() + self.size as usize);
        }
    }
}

fn mmap(map: BorrowedFd<'_>, len: usize, prot: libc::c_int, offset: usize) -> io::Result<*mut u8> {
    // SAFETY: a new shared mapping of the map's pages at an address the kernel picks;
    // it aliases no Rust memory.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, map.as_raw_fd(), offset as libc::off_t)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring over plain memory laid out as the kernel's: a consumer page, then a
    /// producer page followed by `size` bytes of data.
    struct Fake {
        consumer: Vec<u64>,
        producer: Vec<u64>,
        size: usize,
    }

    impl Fake {
        fn new(size: usize) -> Fake {
            let words = page_size() / 8;
            Fake { consumer: vec![0; words], producer: vec![0; words + size / 8], size }
        }

        fn ring(&mut self) -> Ring {
            Ring {
                consumer: self.consumer.as_mut_ptr().cast(),
                producer: self.producer.as_mut_ptr().cast(),
                size: self.size as u64,
                pos: self.consumer[0],
                mapped: false,
            }
        }

        /// Write a record at position `pos` with `flags`, as the kernel would, and move
        /// the producer past it; the next position.
        fn write(&mut self, pos: u64, body: &[u8], flags: u32) -> u64 {
            let data: &mut [u8] = as_bytes(&mut self.producer[page_size() / 8..]);
            let mask = self.size as u64 - 1;
            data[(pos & mask) as usize..][..4].copy_from_slice(&(body.len() as u32 | flags).to_ne_bytes());
            for (i, b) in body.iter().enumerate() {
                data[((pos + 8 + i as u64) & mask) as usize] = *b;
            }
            let next = pos + (body.len() as u64 + 8).div_ceil(8) * 8;
            self.producer[0] = next;
            next
        }
    }

    fn as_bytes(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64s are plain bytes; the slice covers exactly their memory.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), words.len() * 8) }
    }

    #[test]
    fn a_record_that_wraps_past_the_end_comes_out_whole_and_its_space_is_released() {
        let mut fake = Fake::new(4096);
        // Start 16 bytes before the end: the header fits, the body wraps.
        fake.consumer[0] = 4096 * 3 - 16;
        let body: Vec<u8> = (0..40).collect();
        let end = fake.write(4096 * 3 - 16, &body, 0);
        let mut ring = fake.ring();
        let mut out = vec![7];
        assert_eq!(ring.next_into(&mut out), Some(40));
        assert_eq!(out[0], 7);
        assert_eq!(&out[1..], &body[..]);
        assert_eq!(ring.next_into(&mut out), None);
        assert_eq!(fake.consumer[0], end);
    }

    #[test]
    fn discarded_records_are_skipped_and_a_busy_one_waits() {
        let mut fake = Fake::new(4096);
        let p = fake.write(0, b"gone", DISCARD);
        let p = fake.write(p, b"kept", 0);
        let busy = p;
        fake.write(p, b"half", BUSY);
        let mut ring = fake.ring();
        let mut out = Vec::new();
        assert_eq!(ring.next_into(&mut out), Some(4));
        assert_eq!(out, b"kept");
        assert_eq!(ring.next_into(&mut out), None, "a record still being written is not read");
        assert_eq!(fake.consumer[0], busy, "space up to the busy record is released");
    }

    #[test]
    fn a_length_past_the_ring_never_reads_past_it() {
        let mut fake = Fake::new(4096);
        let data = as_bytes(&mut fake.producer[page_size() / 8..]);
        data[..4].copy_from_slice(&(1u32 << 29).to_ne_bytes());
        fake.producer[0] = 8 + (1 << 29);
        let mut ring = fake.ring();
        let mut out = Vec::new();
        assert_eq!(ring.next_into(&mut out), Some(4096 - 8));
    }
}

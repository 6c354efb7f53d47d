//! A ring of record chunks in shared memory, from the privileged side of a tenant's run
//! (its collectors) to its executor (the unprivileged process that runs the plugins):
//! a sealed memfd both map, and an eventfd that wakes the reader, written once per chunk,
//! never once per event.
//!
//! The first page holds the positions, each on a cache line of its own: `head` (bytes
//! written, the writer's), `tail` (bytes read, the reader's) and `closed` (the writer is
//! done). The data follows, a power of two in size; a chunk is a 16-byte header (its
//! length and its record count) and its bytes, 8-byte aligned, copied in two pieces where
//! it wraps past the end. Positions only grow.
//!
//! Each side trusts nothing it reads from the other. The writer keeps its own head and
//! reads only `tail`, which must lie between the last tail it saw and its head: anything
//! else ends the stream ([`Broken`]). The reader checks every length against what was
//! written, so a bad header cannot make it read past the ring. The memfd is sealed
//! against shrinking and growing, so neither side can take pages away from under the
//! other's mapping (a SIGBUS in the collectors' process).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::page_size;

const HEAD: usize = 0;
const TAIL: usize = 64;
const CLOSED: usize = 128;
const FRAME: u64 = 16;

/// The other side broke the ring's protocol: the stream ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event ring between the collectors and the executor is broken: {0}")]
pub struct Broken(pub String);

/// One side of a shared ring.
pub struct ShmRing {
    base: *mut u8,
    len: usize,
    size: u64,
    /// This side's own position: the head for the writer, the tail for the reader.
    pos: u64,
    /// The writer: the last tail it read.
    seen_tail: u64,
    wake: OwnedFd,
    /// False for a ring over test memory, which is not unmapped.
    mapped: bool,
}

// SAFETY: the mapping belongs to this value and is only touched through &mut self (or
// atomically, for the positions), so moving it to another thread is sound.
unsafe impl Send for ShmRing {}

/// What the writer hands the reader: the memfd and the eventfd.
pub struct Handles {
    pub memory: OwnedFd,
    pub wake: OwnedFd,
}

impl ShmRing {
    /// A new ring of `data_bytes` (a power of two, a multiple of the page size): the
    /// writer's side, and the descriptors for the reader.
    pub fn create(data_bytes: usize) -> io::Result<(ShmRing, Handles)> {
        let page = page_size();
        if !data_bytes.is_power_of_two() || !data_bytes.is_multiple_of(page) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("ring of {data_bytes} bytes")));
        }
        let file = super::memfd("wasmtap-events")?;
        file.set_len((page + data_bytes) as u64)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl(F_ADD_SEALS) on a descriptor `file` owns; it touches no memory.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let wake = eventfd()?;
        let reader_wake = wake.try_clone()?;
        let base = map(file.as_fd(), page + data_bytes)?;
        let ring =
            ShmRing { base, len: page + data_bytes, size: data_bytes as u64, pos: 0, seen_tail: 0, wake, mapped: true };
        Ok((ring, Handles { memory: OwnedFd::from(file), wake: reader_wake }))
    }

    /// The reader's side of a ring another process made: its memfd must be sealed
    /// against shrinking and growing and hold a position page and a power of two of data.
    pub fn open(handles: Handles) -> io::Result<ShmRing> {
        let page = page_size();
        let fd = handles.memory.as_raw_fd();
        // SAFETY: fcntl(F_GET_SEALS) on a descriptor the caller owns; it touches no memory.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        let needed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & needed != needed {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the event ring's memory is not sealed"));
        }
        let len = std::fs::File::from(handles.memory.try_clone()?).metadata()?.len() as usize;
        let size = len.saturating_sub(page);
        if size == 0 || !size.is_power_of_two() || !size.is_multiple_of(page) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("an event ring of {len} bytes")));
        }
        let base = map(handles.memory.as_fd(), len)?;
        let mut ring = ShmRing { base, len, size: size as u64, pos: 0, seen_tail: 0, wake: handles.wake, mapped: true };
        ring.pos = ring.tail().load(Ordering::Acquire);
        Ok(ring)
    }

    /// Bytes of data the ring holds.
    pub fn data_bytes(&self) -> u64 {
        self.size
    }

    fn at(&self, offset: usize) -> *mut u8 {
        // SAFETY: offsets used are within the first page or the data, both mapped.
        unsafe { self.base.add(offset) }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: the position page is mapped for the life of `self` and 8-byte aligned.
        unsafe { &*(self.at(HEAD) as *const AtomicU64) }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as for `head`.
        unsafe { &*(self.at(TAIL) as *const AtomicU64) }
    }

    fn closed_flag(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*(self.at(CLOSED) as *const AtomicU32) }
    }

    fn data(&self) -> *mut u8 {
        self.at(self.len - self.size as usize)
    }

    /// Copy `bytes` into the data at ring position `pos`, in two pieces if it wraps.
    fn write_at(&mut self, pos: u64, bytes: &[u8]) {
        let off = (pos & (self.size - 1)) as usize;
        let first = bytes.len().min(self.size as usize - off);
        // SAFETY: `off + first` and `bytes.len() - first` lie within the data, which is
        // mapped writable; the source is a live slice that does not overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data().add(off), first);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), self.data(), bytes.len() - first);
        }
    }

    /// Copy `len` bytes at ring position `pos` onto the end of `out`.
    fn read_at(&self, pos: u64, len: usize, out: &mut Vec<u8>) {
        let off = (pos & (self.size - 1)) as usize;
        let first = len.min(self.size as usize - off);
        out.reserve(len);
        let start = out.len();
        // SAFETY: the reserved room holds `len` bytes past `start`; the pieces read lie
        // within the data (len <= size, checked by the caller).
        unsafe {
            std::ptr::copy_nonoverlapping(self.data().add(off), out.as_mut_ptr().add(start), first);
            std::ptr::copy_nonoverlapping(self.data(), out.as_mut_ptr().add(start + first), len - first);
            out.set_len(start + len);
        }
    }

    /// The writer: put one chunk of `records` records in the ring and wake the reader.
    /// `Ok(false)`: no room now (the reader is behind); try again later.
    pub fn push(&mut self, bytes: &[u8], records: u64) -> Result<bool, Broken> {
        let need = FRAME + (bytes.len() as u64).next_multiple_of(8);
        if need > self.size {
            return Err(Broken(format!("a chunk of {} bytes does not fit a ring of {}", bytes.len(), self.size)));
        }
        let tail = self.tail().load(Ordering::Acquire);
        if tail < self.seen_tail || tail > self.pos {
            return Err(Broken(format!("the reader's position {tail} is outside {}..={}", self.seen_tail, self.pos)));
        }
        self.seen_tail = tail;
        if self.pos - tail + need > self.size {
            return Ok(false);
        }
        let mut frame = [0u8; FRAME as usize];
        frame[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        frame[8..].copy_from_slice(&records.to_le_bytes());
        let pos = self.pos;
        self.write_at(pos, &frame);
        self.write_at(pos + FRAME, bytes);
        self.pos += need;
        self.head().store(self.pos, Ordering::Release);
        self.wake();
        Ok(true)
    }

    /// The writer is done: the reader takes what is left, then sees the end.
    pub fn close(&mut self) {
        self.closed_flag().store(1, Ordering::Release);
        self.wake();
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write(2) of 8 bytes from a live buffer to the eventfd this value owns.
        // A full counter (EAGAIN) already wakes the reader.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// The reader: the next chunk's bytes appended to `out` and its record count, or
    /// `None` if the writer has written nothing more yet.
    pub fn pop(&mut self, out: &mut Vec<u8>) -> Result<Option<u64>, Broken> {
        let head = self.head().load(Ordering::Acquire);
        if head == self.pos {
            return Ok(None);
        }
        let avail = head.wrapping_sub(self.pos);
        if head < self.pos || avail > self.size || avail < FRAME {
            return Err(Broken(format!("the writer's position {head} does not follow {}", self.pos)));
        }
        let mut frame = Vec::with_capacity(FRAME as usize);
        self.read_at(self.pos, FRAME as usize, &mut frame);
        let len = u64::from_le_bytes(frame[..8].try_into().unwrap_or_default());
        let records = u64::from_le_bytes(frame[8..].try_into().unwrap_or_default());
        let need = len.checked_next_multiple_of(8).and_then(|l| l.checked_add(FRAME));
        let Some(need) = need.filter(|n| *n <= avail) else {
            return Err(Broken(format!("a chunk of {len} bytes where {} were written", avail - FRAME)));
        };
        self.read_at(self.pos + FRAME, len as usize, out);
        self.pos += need;
        self.tail().store(self.pos, Ordering::Release);
        Ok(Some(records))
    }

    /// The reader: whether the writer said it is done (what it wrote before may remain).
    pub fn closed(&self) -> bool {
        self.closed_flag().load(Ordering::Acquire) != 0
    }

    /// The reader: wait until the writer wakes it, at most `timeout_ms`.
    pub fn wait(&self, timeout_ms: i32) {
        let mut pfd = libc::pollfd { fd: self.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll(2) over one live pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n > 0 {
            let mut count = [0u8; 8];
            // SAFETY: read(2) of 8 bytes into a live buffer from the eventfd this value
            // owns (non-blocking: a spurious wakeup reads nothing).
            unsafe { libc::read(self.wake.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        }
    }
}

impl Drop for ShmRing {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: unmapping the mapping this value made, which nothing else uses.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

fn map(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new shared mapping of `len` bytes of a sealed memfd at least that long;
    // the kernel picks the address.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes two ints and returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(size: usize) -> (ShmRing, ShmRing) {
        let (w, h) = ShmRing::create(size).unwrap();
        (w, ShmRing::open(h).unwrap())
    }

    #[test]
    fn chunks_come_out_whole_and_in_order_across_the_end_of_the_ring() {
        let page = page_size();
        let (mut w, mut r) = pair(page);
        let mut out = Vec::new();
        // Chunks of odd sizes, each taken before the next: they wrap many times.
        for i in 0..200u64 {
            let bytes: Vec<u8> = (0..(i as usize * 37) % (page / 2)).map(|b| (b as u64 ^ i) as u8).collect();
            assert!(w.push(&bytes, i).unwrap(), "chunk {i}");
            out.clear();
            assert_eq!(r.pop(&mut out).unwrap(), Some(i));
            assert_eq!(out, bytes, "chunk {i}");
            assert_eq!(r.pop(&mut out).unwrap(), None);
        }
        assert!(!r.closed());
        w.close();
        assert!(r.closed());
    }

    #[test]
    fn a_full_ring_says_so_until_the_reader_takes_a_chunk() {
        let page = page_size();
        let (mut w, mut r) = pair(page);
        let chunk = vec![7u8; page / 4 - 16];
        let fitted = (0..10).take_while(|_| w.push(&chunk, 1).unwrap()).count();
        assert_eq!(fitted, 4);
        assert!(!w.push(&chunk, 1).unwrap());
        assert_eq!(r.pop(&mut Vec::new()).unwrap(), Some(1));
        assert!(w.push(&chunk, 1).unwrap());
        assert!(w.push(&vec![0; page], 1).is_err(), "larger than the ring");
    }

    #[test]
    fn a_reader_that_lies_about_its_position_breaks_the_stream_for_itself_alone() {
        let page = page_size();
        let (mut w, r) = pair(page);
        assert!(w.push(&[1; 64], 1).unwrap());
        // Past the head: the writer would overwrite what it has not handed out.
        r.tail().store(1 << 40, Ordering::Release);
        assert!(w.push(&[1; 64], 1).unwrap_err().0.contains("outside"));
        let (mut w, mut r) = pair(page);
        assert!(w.push(&[1; 64], 1).unwrap());
        assert!(r.pop(&mut Vec::new()).unwrap().is_some());
        assert!(w.push(&[1; 64], 1).unwrap());
        // Backwards.
        r.tail().store(0, Ordering::Release);
        assert!(w.push(&[1; 64], 1).is_err());
    }

    #[test]
    fn a_bad_header_never_reads_past_what_was_written() {
        let page = page_size();
        let (mut w, mut r) = pair(page);
        assert!(w.push(&[1; 64], 1).unwrap());
        // The length says more than was written.
        let len = r.data();
        // SAFETY: the first 8 bytes of the test ring's data, mapped writable.
        unsafe { std::ptr::copy_nonoverlapping(u64::MAX.to_le_bytes().as_ptr(), len, 8) };
        assert!(r.pop(&mut Vec::new()).is_err());
        // A head that runs past the ring's size.
        let (_w, mut r) = pair(page);
        r.head().store(page as u64 * 2, Ordering::Release);
        assert!(r.pop(&mut Vec::new()).is_err());
    }

    #[test]
    fn the_reader_refuses_memory_that_is_not_sealed_or_not_a_ring() {
        let file = super::super::memfd("t").unwrap();
        file.set_len(page_size() as u64 * 3).unwrap();
        let wake = eventfd().unwrap();
        let open = |f: &std::fs::File| {
            ShmRing::open(Handles { memory: OwnedFd::from(f.try_clone().unwrap()), wake: wake.try_clone().unwrap() })
        };
        assert!(open(&file).err().unwrap().to_string().contains("not sealed"));
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        // SAFETY: fcntl(F_ADD_SEALS) on a descriptor the test owns.
        assert_eq!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) }, 0);
        // Two pages of data plus the position page... three pages: two of data is a power of two.
        assert!(open(&file).is_ok());
        let odd = super::super::memfd("t").unwrap();
        odd.set_len(page_size() as u64 * 4).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fcntl(odd.as_raw_fd(), libc::F_ADD_SEALS, seals) }, 0);
        assert!(open(&odd).err().unwrap().to_string().contains("event ring of"));
    }
}

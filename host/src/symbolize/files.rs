//! The ELF files blazesym reads. blazesym memory-maps every file it symbolizes from; if the
//! file's owner truncates it while it is mapped, the next read of the map kills the host with
//! SIGBUS. So blazesym is only handed descriptors of ours, as `/proc/self/fd/N`:
//!
//! - a file only root may change (owned by root, not group- or world-writable) is mapped where
//!   it is; the descriptor pins the inode whose owner was checked, so a file renamed into its
//!   place later changes nothing;
//! - any other file is copied with `read` (never mapped) into a sealed memfd, at most
//!   [`COPY_MAX`] bytes, and blazesym maps the copy, which nobody can shrink.
//!
//! Debug information is read only from the file itself: a file that links to separate debug
//! files (`.gnu_debuglink`, `.gnu_debugaltlink`, `.debug_sup`) gets its ELF symbols only,
//! because blazesym would open and map the linked file by a name the binary chooses.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object::{Object, ReadCache};

/// The largest file copied; a bigger one that root does not own gets unnamed frames.
pub(crate) const COPY_MAX: u64 = 128 << 20;
/// Files kept open (and their copies kept), the oldest closed first.
const HELD_MAX: usize = 64;
/// Bytes of the files kept, together. A copy is memory of the host's own (a memfd), and
/// blazesym's parsed tables of a file grow with it; past this the oldest files are closed,
/// however few are held (the newest is always kept). Twice the largest copy.
const HELD_BYTES_MAX: u64 = 2 * COPY_MAX;
/// Sections that make blazesym look for another file.
const LINK_SECTIONS: [&str; 3] = [".gnu_debuglink", ".gnu_debugaltlink", ".debug_sup"];

/// A file blazesym may read, by a path that reaches our descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Readable {
    /// `/proc/self/fd/N`.
    pub path: PathBuf,
    /// Whether its debug information may be read (it links to no other file).
    pub debug: bool,
    /// Whether `path` is a private copy rather than the file itself.
    pub copied: bool,
}

/// What a file was when it was opened: a change means another file, or new content.
type Key = (u64, u64, i64, i64, u64);

struct Held {
    file: File,
    readable: Readable,
    /// The file's size (its copy's, when copied).
    bytes: u64,
}

/// The files opened for blazesym, by identity.
pub(crate) struct Files {
    held: HashMap<Key, Held>,
    order: VecDeque<Key>,
    /// Bytes of the files held.
    bytes: u64,
    bytes_max: u64,
}

impl Default for Files {
    fn default() -> Self {
        Files { held: HashMap::new(), order: VecDeque::new(), bytes: 0, bytes_max: HELD_BYTES_MAX }
    }
}

impl Files {
    /// A path for blazesym to read `path` by; `None` when it cannot be read safely. Closed
    /// files are passed to `evict`, so that blazesym drops its map of them.
    pub fn open(&mut self, path: &Path, evict: impl FnMut(&Path)) -> Option<Readable> {
        let original = File::open(path).ok()?;
        let md = original.metadata().ok()?;
        if !md.is_file() {
            return None;
        }
        let key = (md.dev(), md.ino(), md.mtime(), md.mtime_nsec(), md.size());
        if let Some(held) = self.held.get(&key) {
            return Some(held.readable.clone());
        }
        let root_only = md.uid() == 0 && md.mode() & 0o022 == 0;
        let (file, bytes) = if root_only { (original, md.size()) } else { private_copy(original, md.size())? };
        let debug = !links_elsewhere(&file);
        let readable =
            Readable { path: format!("/proc/self/fd/{}", file.as_raw_fd()).into(), debug, copied: !root_only };
        self.hold(key, Held { file, readable: readable.clone(), bytes }, evict);
        Some(readable)
    }

    /// Keep `held`, closing the oldest files while more than [`HELD_MAX`] are held or
    /// their bytes are over [`HELD_BYTES_MAX`] (the newest is always kept).
    fn hold(&mut self, key: Key, held: Held, mut evict: impl FnMut(&Path)) {
        self.bytes += held.bytes;
        self.held.insert(key, held);
        self.order.push_back(key);
        while self.order.len() > HELD_MAX || (self.bytes > self.bytes_max && self.order.len() > 1) {
            let Some(old) = self.order.pop_front() else { break };
            if let Some(gone) = self.held.remove(&old) {
                // Before the descriptor closes and its number can name another file.
                evict(&gone.readable.path);
                self.bytes -= gone.bytes;
                drop(gone.file);
            }
        }
    }
}

/// `file`'s bytes, read (never mapped) into a sealed memfd, and how many; `None` past
/// [`COPY_MAX`].
fn private_copy(file: File, size: u64) -> Option<(File, u64)> {
    if size > COPY_MAX {
        return None;
    }
    let mut copy = crate::sys::memfd("wasmtap-elf").ok()?;
    // A file truncated while it is read only makes a shorter copy.
    let copied = std::io::copy(&mut file.take(COPY_MAX + 1), &mut copy).ok()?;
    if copied > COPY_MAX {
        return None;
    }
    crate::sys::seal(&copy).ok()?;
    Some((copy, copied))
}

/// Whether the ELF file names a separate debug file; unparseable files count as linking.
fn links_elsewhere(file: &File) -> bool {
    let cache = ReadCache::new(file);
    match object::File::parse(&cache) {
        Ok(elf) => LINK_SECTIONS.iter().any(|name| elf.section_by_name(name).is_some()),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wasmtap-files-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_others_may_write_is_read_through_a_copy_that_survives_truncation() {
        let dir = temp("copy");
        let bin = dir.join("bin");
        std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o666)).unwrap();
        let size = std::fs::metadata(&bin).unwrap().len();
        let mut files = Files::default();
        let readable = files.open(&bin, |_| {}).expect("a readable copy");
        assert!(readable.copied, "{readable:?}");
        // The owner truncates the binary: the copy blazesym maps keeps every byte.
        File::options().write(true).open(&bin).unwrap().set_len(0).unwrap();
        assert_eq!(std::fs::metadata(&readable.path).unwrap().len(), size);
        let sealed = File::options().write(true).open(&readable.path).and_then(|f| f.set_len(0));
        assert!(sealed.is_err(), "the copy is sealed");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_file_only_root_may_change_is_read_in_place_and_linked_debug_files_are_not_followed() {
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("libc");
        let mut files = Files::default();
        let readable = files.open(libc, |_| {}).expect("libc");
        assert!(!readable.copied, "{readable:?}");
        let same = std::fs::metadata(libc).unwrap().ino() == std::fs::metadata(&readable.path).unwrap().ino();
        assert!(same, "{readable:?}");
        // Debian's libc names its debug file in `.gnu_debuglink`.
        let has_link = std::process::Command::new("readelf").args(["-S", "-W"]).arg(libc).output().unwrap();
        let has_link = String::from_utf8_lossy(&has_link.stdout).contains(".gnu_debuglink");
        assert_eq!(readable.debug, !has_link, "{readable:?}");
    }

    #[test]
    fn closing_a_file_tells_blazesym_to_drop_it_first() {
        let dir = temp("evict");
        let mut files = Files::default();
        let mut evicted = Vec::new();
        for i in 0..=HELD_MAX {
            let p = dir.join(format!("f{i}"));
            std::fs::write(&p, b"not elf").unwrap();
            files.open(&p, |gone| evicted.push(gone.to_path_buf())).unwrap();
        }
        assert_eq!(evicted.len(), 1);
        assert_eq!(files.held.len(), HELD_MAX);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn held_files_are_bounded_by_their_bytes_the_oldest_closed_first() {
        let dir = temp("bytes");
        let mut files = Files { bytes_max: 10_000, ..Files::default() };
        let mut evicted = Vec::new();
        let mut paths = Vec::new();
        for i in 0..5 {
            let p = dir.join(format!("f{i}"));
            std::fs::write(&p, vec![b'x'; 3_000]).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
            paths.push(files.open(&p, |gone| evicted.push(gone.to_path_buf())).unwrap().path);
        }
        // 5 × 3,000 bytes against 10,000: the two oldest copies are closed, three kept.
        assert_eq!(evicted, paths[..2]);
        assert_eq!((files.held.len(), files.bytes), (3, 9_000));
        // A file over the bound alone is still kept, the only one.
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; 20_000]).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o666)).unwrap();
        files.open(&big, |gone| evicted.push(gone.to_path_buf())).unwrap();
        assert_eq!((files.held.len(), files.bytes, evicted.len()), (1, 20_000, 5));
        std::fs::remove_dir_all(&dir).ok();
    }
}

//! Names for stack addresses: function, offset into it, and source line when debug info exists.
//!
//! Reports are printed after the run, when most traced processes are gone and their
//! `/proc/PID/maps` with them. So the first event from a process takes a snapshot of its
//! executable mappings ([`Symbolizer::observe`]); later, [`Symbolizer::user`] turns each address
//! into an offset in the mapped file and reads the symbols from that file. A file that was
//! deleted or replaced since the snapshot is read through the live process when it still runs;
//! otherwise its frames stay unnamed rather than wrongly named. Kernel addresses resolve through
//! `/proc/kallsyms` (and a `vmlinux` with DWARF when one is installed), which shows real
//! addresses to root only. blazesym maps the files it reads, so it only sees files that no
//! one but root can change under it, or private copies ([`files`]).
//!
//! ```no_run
//! use wasmtap::symbolize::Symbolizer;
//!
//! let mut symbols = Symbolizer::new();
//! let (pid, stack) = (4242, [0x5555_5555_5139_u64]);
//! symbols.observe(pid); // on the first event from `pid`
//! // ... the process exits, the run ends ...
//! for frame in symbols.user(pid, &stack) {
//!     println!("{}", frame.display()); // "spin_here+0x3 (x.c:4)"
//! }
//! ```

mod files;

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized};
use blazesym::{MaybeDefault, Pid};

/// Processes whose mappings are kept, and the most memory their snapshots may hold; the
/// oldest snapshot goes first. A process's snapshot is kept after it exits, for the stacks
/// recorded before (a report may come long after), so a machine that starts many processes
/// fills these up: a shell's snapshot takes ~1 KiB, one of a program with forty libraries
/// ~8 KiB.
const MAX_PIDS: usize = 4096;
const MAX_SNAPSHOT_BYTES: usize = 8 << 20;
/// A live process whose maps were just re-read is not re-read for a miss sooner than this, so
/// stacks with junk addresses cannot turn every lookup into a `/proc` read.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// One symbolized address.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    /// The address as recorded.
    pub addr: u64,
    /// Demangled function name; empty when unknown.
    pub symbol: String,
    /// `addr` minus the start of `symbol`.
    pub offset: u64,
    /// `kernel`, `[name]` for a kernel module, or the mapped file (`[vdso]`) for user frames.
    pub module: String,
    /// Source file; empty without debug info.
    pub file: String,
    /// Source line; 0 without debug info.
    pub line: u32,
}

impl Frame {
    /// `func+0x1a`, `func+0x1a (file.c:21)`, or the bare address (`0x7f12...`) when unknown.
    pub fn display(&self) -> String {
        if self.symbol.is_empty() {
            return format!("{:#x}", self.addr);
        }
        let mut out = format!("{}+{:#x}", self.symbol, self.offset);
        if !self.file.is_empty() {
            let name = self.file.rsplit('/').next().unwrap_or(&self.file);
            out += &match self.line {
                0 => format!(" ({name})"),
                line => format!(" ({name}:{line})"),
            };
        }
        out
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    pub exec: bool,
    /// Offset in the file of the byte mapped at `start`.
    pub offset: u64,
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
    /// File path, a pseudo-path like `[vdso]`, or empty for anonymous memory.
    pub path: String,
    /// The kernel marked the file ` (deleted)`; `path` has that suffix removed.
    pub deleted: bool,
}

/// Parse the text of `/proc/PID/maps`, skipping lines that do not parse.
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<Mapping> {
    // Five fields, then padding and a path that may itself contain spaces.
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    let (path, deleted) = path.strip_suffix(" (deleted)").map_or((path, false), |p| (p, true));
    let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
    Some(Mapping {
        start,
        end: end.max(start),
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        major: u32::from_str_radix(major, 16).ok()?,
        minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path: path.to_string(),
        deleted,
    })
}

/// What a path pointed to when looked at; a change means the file was replaced or rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(path: &str) -> Option<FileId> {
        let md = fs::metadata(path).ok()?;
        Some(FileId { dev: md.dev(), ino: md.ino(), mtime: (md.mtime(), md.mtime_nsec()) })
    }
}

/// An executable mapping and, when `map.path` names the mapped file for us, that file's identity.
#[derive(Debug)]
struct Exec {
    map: Mapping,
    trusted: Option<FileId>,
}

/// The executable mappings of one process.
#[derive(Debug)]
struct Snapshot {
    /// Start time from `/proc/PID/stat`: tells the process apart from a later one with its pid.
    started: u64,
    /// Sorted by start address.
    maps: Vec<Exec>,
    reread: Option<Instant>,
}

impl Snapshot {
    fn take(pid: u32) -> Option<Snapshot> {
        let started = start_time(pid)?;
        let text = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let mut maps: Vec<Exec> = parse_maps(&text)
            .into_iter()
            .filter(|m| m.exec)
            .map(|map| Exec { trusted: trusted_id(pid, &map), map })
            .collect();
        maps.sort_by_key(|e| e.map.start);
        // The mappings that are not executable were read into the same allocation.
        maps.shrink_to_fit();
        Some(Snapshot { started, maps, reread: None })
    }

    /// About what the snapshot holds in memory.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Snapshot>()
            + self.maps.capacity() * std::mem::size_of::<Exec>()
            + self.maps.iter().map(|e| e.map.path.capacity()).sum::<usize>()
    }

    fn find(&self, addr: u64) -> Option<&Exec> {
        let idx = self.maps.partition_point(|e| e.map.start <= addr).checked_sub(1)?;
        self.maps.get(idx).filter(|e| addr < e.map.end)
    }

    /// Keep the old mappings the new layout does not cover: they name addresses recorded
    /// before a `dlclose` or `exec`.
    fn absorb(&mut self, old: Snapshot) {
        for e in old.maps {
            if !self.maps.iter().any(|n| n.map.start < e.map.end && e.map.start < n.map.end) {
                self.maps.push(e);
            }
        }
        self.maps.sort_by_key(|e| e.map.start);
    }
}

/// Field 22 of `/proc/PID/stat`; `None` once the process is gone.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name before it may contain spaces and parentheses; fields resume after the last `)`.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// The identity of `map.path` as we see it, if that is the file the process mapped. Comparing
/// with the process's own view (`map_files`) catches replaced files and other mount namespaces.
fn trusted_id(pid: u32, map: &Mapping) -> Option<FileId> {
    if map.deleted || !map.path.starts_with('/') {
        return None;
    }
    let ours = FileId::of(&map.path)?;
    let theirs = match fs::metadata(map_files(pid, map)) {
        Ok(md) => (md.dev(), md.ino()),
        // map_files needs CAP_SYS_ADMIN; the maps line says the same on most file systems.
        Err(_) => (libc::makedev(map.major, map.minor), map.inode),
    };
    ((ours.dev, ours.ino) == theirs).then_some(ours)
}

fn map_files(pid: u32, map: &Mapping) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", map.start, map.end))
}

/// Where to read the symbols of one group of frames.
#[derive(PartialEq)]
enum Target {
    /// An ELF file, addressed by file offset.
    File(files::Readable),
    /// Our own vDSO, addressed by absolute address: it is the same image in every process of
    /// the same ABI, and no file holds it.
    OwnVdso,
}

type Wrap = fn(&[u64]) -> Input<&[u64]>;

impl Target {
    /// The source to read, or `None` where debug information may not be read.
    fn source(&self, debug_syms: bool) -> Option<(Source<'static>, Wrap)> {
        Some(match self {
            Target::File(f) if debug_syms && !f.debug => return None,
            Target::File(f) => (Elf { debug_syms, ..Elf::new(&f.path) }.into(), |a| Input::FileOffset(a)),
            Target::OwnVdso => (Process { debug_syms, ..Process::new(Pid::Slf) }.into(), |a| Input::AbsAddr(a)),
        })
    }
}

/// Turns kernel and user addresses into [`Frame`]s. Not `Send`: blazesym keeps `Rc`s inside.
pub struct Symbolizer {
    blaze: blazesym::symbolize::Symbolizer,
    procs: HashMap<u32, Snapshot>,
    /// Pids in the order their snapshots were taken, for eviction.
    order: VecDeque<u32>,
    /// What the snapshots hold, by [`Snapshot::bytes`].
    held: usize,
    /// `(base, size, "[name]")` from `/proc/modules`, read on the first kernel lookup.
    modules: Option<Vec<(u64, u64, String)>>,
    own_vdso: Option<Mapping>,
    /// The files blazesym may map.
    files: files::Files,
    /// A copy of `/proc/kallsyms` to read kernel symbols from instead (a tenant's executor,
    /// which is shown every kernel address as 0, is handed one).
    kallsyms: Option<std::path::PathBuf>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        // One frame per address: inlined callees are not split out, the line is the innermost one.
        let blaze = blazesym::symbolize::Symbolizer::builder().enable_inlined_fns(false).build();
        let own_maps = fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let own_vdso = parse_maps(&own_maps).into_iter().find(|m| m.path == "[vdso]");
        let (procs, order, files) = (HashMap::new(), VecDeque::new(), files::Files::default());
        Symbolizer { blaze, procs, order, held: 0, modules: None, own_vdso, files, kallsyms: None }
    }

    /// Kernel symbols from `kallsyms`, a copy of `/proc/kallsyms` made where its addresses
    /// showed, rather than from the kernel's own files.
    pub fn with_kallsyms(kallsyms: std::path::PathBuf) -> Symbolizer {
        Symbolizer { kallsyms: Some(kallsyms), ..Symbolizer::new() }
    }

    /// Snapshot the executable mappings of `pid` unless it is already known. Call it on the first
    /// event from a process, while it still runs: a known pid costs one hash lookup, a new one a
    /// read of `/proc/PID/maps` and two `stat`s per executable mapping.
    pub fn observe(&mut self, pid: u32) {
        if self.procs.contains_key(&pid) {
            return;
        }
        if let Some(snapshot) = Snapshot::take(pid) {
            self.held += snapshot.bytes();
            self.procs.insert(pid, snapshot);
            self.order.push_back(pid);
            while self.order.len() > MAX_PIDS || (self.held > MAX_SNAPSHOT_BYTES && self.order.len() > 1) {
                if let Some(oldest) = self.order.pop_front() {
                    if let Some(gone) = self.procs.remove(&oldest) {
                        self.held -= gone.bytes();
                    }
                }
            }
        }
    }

    /// Note that `pid` ran code at the user address `addr`: snapshot it if it is unknown, and
    /// again if its snapshot does not cover `addr` (it called `exec` or `dlopen` since, or the
    /// snapshot was taken before the `exec` of a command the run started). A covered address
    /// costs a hash lookup and a binary search.
    pub fn observe_at(&mut self, pid: u32, addr: u64) {
        match self.procs.get(&pid) {
            None => self.observe(pid),
            Some(snapshot) if snapshot.find(addr).is_some() => {}
            Some(_) => {
                self.refresh(pid, &[addr]);
            }
        }
    }

    /// One frame per kernel address, in order. Kernel-module frames carry `[name]` as module.
    pub fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame> {
        let modules = self.modules.get_or_insert_with(read_modules);
        let mut frames: Vec<Frame> = addrs
            .iter()
            .map(|&addr| {
                let module = modules.iter().find(|(base, size, _)| addr.wrapping_sub(*base) < *size);
                Frame { addr, module: module.map_or("kernel", |m| m.2.as_str()).to_string(), ..Frame::default() }
            })
            .collect();
        let all: Vec<usize> = (0..frames.len()).collect();
        if let Some(path) = &self.kallsyms {
            let kernel =
                Kernel { kallsyms: MaybeDefault::Some(path.clone()), vmlinux: MaybeDefault::None, ..Kernel::default() };
            fill_unnamed(&self.blaze, &Source::Kernel(kernel), |a| Input::AbsAddr(a), &mut frames, &all, addrs);
            return frames;
        }
        // A vmlinux found on disk may fail on a module (compressed, not in depmod) that kallsyms
        // still names, so unnamed frames get a second, kallsyms-only pass.
        for kernel in [Kernel::default(), Kernel { vmlinux: MaybeDefault::None, ..Kernel::default() }] {
            fill_unnamed(&self.blaze, &Source::Kernel(kernel), |a| Input::AbsAddr(a), &mut frames, &all, addrs);
        }
        frames
    }

    /// One frame per user address of `pid`, in order. Works after the process exited if it was
    /// observed before; a live process is snapshotted now, and re-read when it maps new code.
    pub fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        let alive = self.refresh(pid, addrs);
        let mut frames: Vec<Frame> = addrs.iter().map(|&addr| Frame { addr, ..Frame::default() }).collect();
        let Some(snapshot) = self.procs.get(&pid) else {
            return frames;
        };
        // Frames grouped by where their symbols are read; each file is checked once per call.
        let mut groups: Vec<(Target, Vec<usize>, Vec<u64>)> = Vec::new();
        let mut checked: HashMap<u64, Option<files::Readable>> = HashMap::new();
        for (i, frame) in frames.iter_mut().enumerate() {
            let Some(exec) = snapshot.find(frame.addr) else { continue };
            frame.module = exec.map.path.clone();
            let (target, input) = if exec.map.path == "[vdso]" {
                match self.own_vdso.as_ref().filter(|own| own.end - own.start == exec.map.end - exec.map.start) {
                    Some(own) => (Target::OwnVdso, frame.addr - exec.map.start + own.start),
                    None => continue,
                }
            } else {
                let (blaze, files) = (&mut self.blaze, &mut self.files);
                let file = checked.entry(exec.map.start).or_insert_with(|| {
                    let path = readable_file(pid, exec, alive)?;
                    files.open(&path, |gone| {
                        let _ = blaze.evict(&blazesym::symbolize::evict::Elf::new(gone).into());
                    })
                });
                let Some(file) = file else { continue };
                (Target::File(file.clone()), (frame.addr - exec.map.start).wrapping_add(exec.map.offset))
            };
            match groups.iter_mut().find(|g| g.0 == target) {
                Some(group) => {
                    group.1.push(i);
                    group.2.push(input);
                }
                None => groups.push((target, vec![i], vec![input])),
            }
        }
        // Debug info that cannot be read (say, compressed with zstd) must not hide the ELF
        // symbols, so unnamed frames get a second pass without it.
        for (target, idx, inputs) in groups {
            for debug_syms in [true, false] {
                let Some((src, wrap)) = target.source(debug_syms) else { continue };
                fill_unnamed(&self.blaze, &src, wrap, &mut frames, &idx, &inputs);
            }
        }
        frames
    }

    /// Snapshot `pid` if it is alive and either unknown or mapping something new since the
    /// last snapshot (a `dlopen` or `exec`). Returns whether the snapshot's process still runs.
    fn refresh(&mut self, pid: u32, addrs: &[u64]) -> bool {
        let Some(old) = self.procs.get(&pid) else {
            self.observe(pid);
            return self.procs.contains_key(&pid);
        };
        let started = old.started;
        let alive = start_time(pid) == Some(started);
        let covered = addrs.iter().all(|&a| old.find(a).is_some());
        if covered || !alive || old.reread.is_some_and(|t| t.elapsed() < REREAD_AFTER) {
            return alive;
        }
        let Some(mut fresh) = Snapshot::take(pid).filter(|s| s.started == started) else {
            return alive;
        };
        fresh.reread = Some(Instant::now());
        if let Some(old) = self.procs.remove(&pid) {
            self.held -= old.bytes();
            fresh.absorb(old);
        }
        self.held += fresh.bytes();
        self.procs.insert(pid, fresh);
        true
    }
}

/// The file to read `exec`'s symbols from: its path while that still names the mapped file,
/// else the live process's own handle on it.
fn readable_file(pid: u32, exec: &Exec, alive: bool) -> Option<PathBuf> {
    if exec.trusted.is_some() && FileId::of(&exec.map.path) == exec.trusted {
        Some(PathBuf::from(&exec.map.path))
    } else if alive && exec.map.path.starts_with('/') {
        Some(map_files(pid, &exec.map))
    } else {
        None
    }
}

/// Symbolize `frames[idx[k]]` from `inputs[k]`, for those frames still unnamed.
fn fill_unnamed(
    blaze: &blazesym::symbolize::Symbolizer,
    src: &Source,
    wrap: Wrap,
    frames: &mut [Frame],
    idx: &[usize],
    inputs: &[u64],
) {
    let todo: Vec<usize> = (0..idx.len()).filter(|&k| frames[idx[k]].symbol.is_empty()).collect();
    if todo.is_empty() {
        return;
    }
    let todo_inputs: Vec<u64> = todo.iter().map(|&k| inputs[k]).collect();
    if let Ok(syms) = blaze.symbolize(src, wrap(&todo_inputs)) {
        todo.iter().zip(&syms).for_each(|(&k, sym)| fill(&mut frames[idx[k]], sym));
    }
}

fn fill(frame: &mut Frame, sym: &Symbolized<'_>) {
    let Symbolized::Sym(sym) = sym else { return };
    frame.symbol = sym.name.to_string();
    frame.offset = sym.offset as u64;
    if let Some(code) = &sym.code_info {
        frame.file = code.to_path().to_string_lossy().into_owned();
        frame.line = code.line.unwrap_or(0);
    }
}

/// Loaded kernel modules as `(base, size, "[name]")`; empty without root (bases read as 0).
fn read_modules() -> Vec<(u64, u64, String)> {
    let text = fs::read_to_string("/proc/modules").unwrap_or_default();
    let parse = |line: &str| {
        // name size refcount deps state base
        let f: Vec<&str> = line.split_whitespace().collect();
        let base = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok().filter(|&b| b != 0)?;
        Some((base, f.get(1)?.parse().ok()?, format!("[{}]", f.first()?)))
    };
    text.lines().filter_map(parse).collect()
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn parse_maps_reads_files_pseudo_paths_and_anonymous_memory() {
        let text = "\
55d0c8a00000-55d0c8a24000 r-xp 00004000 fe:00 247264                     /usr/bin/grep
7f0000000000-7f0000001000 r-xp 00001000 08:11 99                         /opt/my app/lib x.so (deleted)
7f0000002000-7f0000003000 rw-p 00000000 00:00 0 
7f0000004000-7f0000005000 rwxp 00000000 00:00 0
7ffd5a1f0000-7ffd5a1f2000 r-xp 00000000 00:00 0                          [vdso]
not a maps line
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 5);
        let m = &maps[0];
        let fields = (m.start, m.end, m.exec, m.offset, (m.major, m.minor), m.inode, m.path.as_str(), m.deleted);
        assert_eq!(fields, (0x55d0c8a00000, 0x55d0c8a24000, true, 0x4000, (0xfe, 0), 247264, "/usr/bin/grep", false));
        assert_eq!(
            (maps[1].path.as_str(), maps[1].deleted, maps[1].major, maps[1].minor),
            ("/opt/my app/lib x.so", true, 8, 0x11)
        );
        assert_eq!((maps[2].path.as_str(), maps[2].exec), ("", false));
        assert_eq!((maps[3].path.as_str(), maps[3].exec), ("", true));
        assert_eq!((maps[4].path.as_str(), maps[4].exec), ("[vdso]", true));
    }

    #[test]
    fn display_matches_bpftrace_style() {
        let mut frame = Frame { addr: 0x7f00_1234, ..Frame::default() };
        assert_eq!(frame.display(), "0x7f001234");
        frame.symbol = "spin_here".into();
        frame.offset = 0x1a;
        assert_eq!(frame.display(), "spin_here+0x1a");
        frame.file = "/src/x.c".into();
        frame.line = 21;
        assert_eq!(frame.display(), "spin_here+0x1a (x.c:21)");
    }

    // A function whose name the test knows. Its symbol is mangled or a demangled path
    // (`wasmtap::symbolize::tests::wasmtap_symbolize_probe`), so tests look for the name in it.
    #[inline(never)]
    fn wasmtap_symbolize_probe() {
        std::hint::black_box(());
    }

    #[test]
    fn names_a_function_of_this_process() {
        let addr = wasmtap_symbolize_probe as *const () as u64;
        let pid = std::process::id();
        let mut symbols = Symbolizer::new();
        symbols.observe(pid);
        let frames = symbols.user(pid, &[addr]);
        assert!(frames[0].symbol.contains("wasmtap_symbolize_probe"), "{frames:?}");
        assert_eq!(frames[0].offset, 0, "{frames:?}");
        assert_eq!(frames[0].module, std::env::current_exe().unwrap().to_str().unwrap());
    }

    #[test]
    fn blazesym_reads_a_private_copy_that_the_owners_truncation_does_not_reach() {
        use std::os::unix::fs::PermissionsExt;
        // A copy of this test binary that anyone may write, and the file offset of a function in it.
        let addr = wasmtap_symbolize_probe as *const () as u64;
        let exe = std::env::current_exe().unwrap();
        let maps = parse_maps(&fs::read_to_string("/proc/self/maps").unwrap());
        let map =
            maps.iter().find(|m| m.exec && m.start <= addr && addr < m.end && std::path::Path::new(&m.path) == exe);
        let map = map.unwrap();
        let offset = addr - map.start + map.offset;
        let dir = std::env::temp_dir().join(format!("wasmtap-trunc-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("bin");
        fs::copy(&exe, &bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o666)).unwrap();

        let symbols = &mut Symbolizer::new();
        let file = symbols.files.open(&bin, |_| {}).unwrap();
        assert!(file.copied, "{file:?}");
        let target = Target::File(file);
        let name = |symbols: &Symbolizer| {
            let mut frames = vec![Frame { addr: offset, ..Frame::default() }];
            let (src, wrap) = target.source(false).unwrap();
            fill_unnamed(&symbols.blaze, &src, wrap, &mut frames, &[0], &[offset]);
            frames[0].symbol.clone()
        };
        assert!(name(symbols).contains("wasmtap_symbolize_probe"), "{}", name(symbols));
        // The owner truncates the binary while blazesym holds it. A map of the original loses
        // its pages (SIGBUS for a read that was under way); the copy keeps answering.
        fs::File::options().write(true).open(&bin).unwrap().set_len(0).unwrap();
        assert!(name(symbols).contains("wasmtap_symbolize_probe"), "{}", name(symbols));
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn names_a_function_with_its_line_after_the_process_exited() {
        let dir = std::env::temp_dir().join(format!("wasmtap-symbolize-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let src = "#include <stdio.h>\n#include <unistd.h>\nvoid spin_here(void) {\n  for (volatile int i = 0; i < 10; i++) {}\n}\n\
                   int main(void) {\n  char b[64];\n  printf(\"%p\\n\", (void *)spin_here);\n  fflush(stdout);\n  spin_here();\n\
                   while (read(0, b, sizeof b) > 0) {}\n  return 0;\n}\n";
        fs::write(dir.join("x.c"), src).unwrap();
        let cc = Command::new("cc")
            .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
            .arg(dir.join("x"))
            .arg(dir.join("x.c"))
            .status()
            .expect("this test needs a C compiler (cc)");
        assert!(cc.success());

        let mut child = Command::new(dir.join("x")).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
        let mut symbols = Symbolizer::new();
        symbols.observe(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(start_time(child.id()), None, "the process should be gone");

        let frames = symbols.user(child.id(), &[addr + 3]);
        fs::remove_dir_all(&dir).ok();
        let frame = &frames[0];
        assert_eq!((frame.symbol.as_str(), frame.offset), ("spin_here", 3), "{frame:?}");
        assert!(frame.file.ends_with("x.c") && frame.line > 0, "{frame:?}");
        assert!(frame.module.ends_with("/x"), "{frame:?}");
    }

    #[test]
    fn a_process_first_seen_before_its_exec_is_named_after_it_exited() {
        let dir = std::env::temp_dir().join(format!("wasmtap-symbolize-exec-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let src = "#include <stdio.h>\n#include <unistd.h>\nvoid spin_after_exec(void) {\n  for (volatile int i = 0; i < 10; i++) {}\n}\n\
                   int main(void) {\n  char b[64];\n  printf(\"%p\\n\", (void *)spin_after_exec);\n  fflush(stdout);\n\
                   spin_after_exec();\n  while (read(0, b, sizeof b) > 0) {}\n  return 0;\n}\n";
        fs::write(dir.join("x.c"), src).unwrap();
        let cc = Command::new("cc")
            .args(["-g", "-O0", "-o"])
            .arg(dir.join("x"))
            .arg(dir.join("x.c"))
            .status()
            .expect("this test needs a C compiler (cc)");
        assert!(cc.success());

        // A shell that waits for a line, then becomes `x`: the pid's first snapshot is the shell's.
        let mut child = Command::new("sh")
            .args(["-c", "read line; exec \"$0\""])
            .arg(dir.join("x"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut symbols = Symbolizer::new();
        symbols.observe_at(pid, 0x1000);
        assert!(symbols.procs.contains_key(&pid));
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
        // A sample from after the exec: its address is outside the shell's snapshot.
        symbols.observe_at(pid, addr);
        drop(stdin);
        child.wait().unwrap();

        let frames = symbols.user(pid, &[addr + 3]);
        fs::remove_dir_all(&dir).ok();
        assert_eq!((frames[0].symbol.as_str(), frames[0].offset), ("spin_after_exec", 3), "{:?}", frames[0]);
    }

    #[test]
    fn unknown_pids_and_addresses_give_unnamed_frames() {
        let mut symbols = Symbolizer::new();
        let frames = symbols.user(u32::MAX, &[0x1234, 0]);
        assert_eq!(frames, vec![Frame { addr: 0x1234, ..Frame::default() }, Frame::default()]);
        let own = symbols.user(std::process::id(), &[8]);
        assert_eq!(own[0].symbol, "");
    }

    /// A kallsyms function whose address no other symbol shares, if kallsyms shows addresses.
    fn kallsyms_function() -> Option<(u64, String)> {
        let text = fs::read_to_string("/proc/kallsyms").ok()?;
        let syms: Vec<(u64, &str, &str)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((u64::from_str_radix(f.next()?, 16).ok()?, f.next()?, f.next()?))
            })
            .collect();
        let unique = |addr: u64| syms.iter().filter(|s| s.0 == addr).count() == 1;
        let preferred = syms.iter().find(|s| s.2 == "do_sys_openat2" && unique(s.0));
        let any = || syms.iter().find(|s| s.1 == "T" && s.0 != 0 && unique(s.0));
        preferred.or_else(any).map(|s| (s.0, s.2.to_string()))
    }

    #[test]
    fn names_a_kernel_function() {
        let Some((addr, name)) = kallsyms_function() else {
            // Without root, kallsyms shows every address as 0. CI runs as root and must not skip.
            assert!(std::env::var_os("CI").is_none(), "privileged test cannot run: /proc/kallsyms hides addresses");
            eprintln!("skipping privileged test: /proc/kallsyms hides addresses (not root)");
            return;
        };
        let frames = Symbolizer::new().kernel(&[addr + 1]);
        assert_eq!((frames[0].symbol.as_str(), frames[0].offset), (name.as_str(), 1), "{frames:?}");
        assert_eq!(frames[0].module, "kernel");
    }
}

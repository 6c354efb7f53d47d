//! ELF lookups for user-space probes: where a `uprobe:libc:malloc` or a
//! `usdt:/usr/bin/python3:python:function__entry` attaches.
//!
//! The kernel attaches a uprobe at a *file offset* inside a binary, not at a symbol or a virtual
//! address. This module turns what you write into that offset, as bpftrace and libbpf do: it
//! finds the binary (a path, a library name through `/etc/ld.so.cache`, or a program in `$PATH`),
//! reads its `.symtab`/`.dynsym` and its SystemTap SDT notes, and decodes USDT argument specs
//! into `struct pt_regs` locations. It only reads files, so none of it needs root.
//!
//! ```no_run
//! use wasmtap::collect::elf;
//!
//! let libc = elf::find_binary("libc")?; // e.g. /usr/lib/x86_64-linux-gnu/libc.so.6
//! println!("malloc at file offset {:#x}", elf::function_offset(&libc, "malloc")?);
//! for probe in elf::usdt_probes(&libc)? {
//!     println!("{}:{} at {:#x} ({})", probe.provider, probe.name, probe.pc_offset, probe.arg_text);
//! }
//! # Ok::<(), elf::ElfError>(())
//! ```

use std::collections::btree_map::{BTreeMap, Entry};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use object::elf::{
    FileHeader64, SectionHeader64, ELFCLASS64, PT_LOAD, SHF_ALLOC, SHN_UNDEF, SHT_DYNSYM, SHT_NOBITS, SHT_NOTE,
    SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC,
};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::{Endian, Endianness};

/// Where a bare library name is looked for when `/etc/ld.so.cache` does not know it.
const LIBRARY_DIRS: [&str; 5] =
    ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib", "/usr/local/lib"];
const LD_SO_CACHE: &str = "/etc/ld.so.cache";
/// `$PATH` when the variable is unset, as in glibc's `execvp`.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// ELF note type of a SystemTap SDT probe descriptor (owner "stapsdt").
const NT_STAPSDT: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is not an ELF file")]
    NotElf { path: PathBuf },
    #[error("{path} is a malformed or unsupported ELF file: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("address {vaddr:#x} is outside every loadable segment of {path}")]
    Unmapped { path: PathBuf, vaddr: u64 },
    #[error("no function `{name}` in {path}{hint}")]
    NoFunction { path: PathBuf, name: String, hint: String },
    #[error("offset {offset:#x} is past the end of `{name}` ({size} bytes) in {path}")]
    OutsideFunction { path: PathBuf, name: String, offset: u64, size: u64 },
    #[error("no USDT probe `{probe}` in {path} ({available})")]
    NoProbe { path: PathBuf, probe: String, available: String },
    #[error("library `{name}` not found (searched: ld.so.cache, {})", LIBRARY_DIRS.join(", "))]
    NoLibrary { name: String },
    #[error("program `{name}` not found in $PATH")]
    NoProgram { name: String },
    #[error("unsupported USDT operand `{spec}`: {reason}")]
    UsdtOperand { spec: String, reason: &'static str },
}

/// A function symbol and where its first instruction is in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncSymbol {
    pub name: String,
    pub addr: u64,
    /// 0 when the symbol table does not say (hand-written assembly).
    pub size: u64,
    pub file_offset: u64,
}

/// One site of a USDT probe, ready to attach: a probe inlined in several places has one entry each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtProbe {
    pub provider: String,
    pub name: String,
    /// File offset of the probe's `nop`, where the uprobe goes.
    pub pc_offset: u64,
    /// File offset of the probe's u16 semaphore (perf's `ref_ctr_offset`); `None` if it has none.
    pub semaphore_offset: Option<u64>,
    /// The decoded `arg_text`; empty if any operand is unsupported (`parse_usdt_arg` says which).
    pub args: Vec<UsdtArg>,
    /// The arguments as the compiler wrote them, e.g. `-4@%edi 8@-16(%rbp)`.
    pub arg_text: String,
}

/// One USDT argument: how many bytes to read, their signedness, and where they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    /// 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub loc: UsdtLoc,
}

/// Where a USDT argument lives when the probe fires. `regs_off` is the byte offset of a
/// 64-bit register in the kernel's x86_64 `struct pt_regs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsdtLoc {
    Const(i64),
    Reg { regs_off: u16 },
    Mem { regs_off: u16, disp: i64 },
}

/// Finds a binary named the way bpftrace accepts it and returns its canonical absolute path:
/// a path (absolute or relative), a library name (`libc`, `libc.so.6`, `libpthread`) looked up
/// in `/etc/ld.so.cache` and then the standard library directories, or a program in `$PATH`.
pub fn find_binary(spec: &str) -> Result<PathBuf, ElfError> {
    let canonical = |path: &Path| fs::canonicalize(path).map_err(|source| ElfError::Read { path: path.into(), source });
    if spec.contains('/') {
        return canonical(Path::new(spec));
    }
    let is_library = spec.starts_with("lib") || spec.contains(".so");
    if is_library {
        let cached = fs::read(LD_SO_CACHE).ok().and_then(|cache| ld_cache_lookup(&cache, spec));
        if let Some(path) = cached.or_else(|| LIBRARY_DIRS.iter().find_map(|dir| dir_lookup(Path::new(dir), spec))) {
            return canonical(&path);
        }
    }
    // A name like `libtool` may still be a program.
    let program = if spec.contains(".so") { None } else { find_program(spec) };
    match program {
        Some(path) => canonical(&path),
        None if is_library => Err(ElfError::NoLibrary { name: spec.into() }),
        None => Err(ElfError::NoProgram { name: spec.into() }),
    }
}

/// Function symbols of `.symtab` and `.dynsym`: defined `STT_FUNC`/`STT_GNU_IFUNC` symbols,
/// one per name, sorted by name.
pub fn functions(path: &Path) -> Result<Vec<FuncSymbol>, ElfError> {
    functions_in(path, &read(path)?)
}

/// [`functions`] of a file already read: `data` is the contents of `path` (which errors name).
pub fn functions_in(path: &Path, data: &[u8]) -> Result<Vec<FuncSymbol>, ElfError> {
    Elf::parse(path, data)?.functions()
}

/// The uprobe attach offset of function `name`, optionally with a byte offset into it
/// (`malloc+4`, `malloc+0x10`). A misspelt name gets a suggestion.
pub fn function_offset(path: &Path, name: &str) -> Result<u64, ElfError> {
    let (func, offset) = split_offset(name);
    let funcs = functions(path)?;
    let Ok(i) = funcs.binary_search_by(|f| f.name.as_str().cmp(func)) else {
        let hint = nearest(func, funcs.iter().map(|f| f.name.as_str()))
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default();
        return Err(ElfError::NoFunction { path: path.into(), name: func.into(), hint });
    };
    let f = &funcs[i];
    let outside = || ElfError::OutsideFunction { path: path.into(), name: f.name.clone(), offset, size: f.size };
    if f.size > 0 && offset >= f.size {
        return Err(outside());
    }
    f.file_offset.checked_add(offset).ok_or_else(outside)
}

/// Converts a virtual address of this ELF file to a file offset, through its `PT_LOAD` segments.
pub fn vaddr_to_offset(path: &Path, vaddr: u64) -> Result<u64, ElfError> {
    let data = read(path)?;
    Elf::parse(path, &data)?.offset_of(vaddr)
}

/// Every USDT probe site in the file's `.note.stapsdt` notes, with addresses moved by
/// `.stapsdt.base` (for prelinked files) and converted to file offsets.
pub fn usdt_probes(path: &Path) -> Result<Vec<UsdtProbe>, ElfError> {
    usdt_probes_in(path, &read(path)?)
}

/// [`usdt_probes`] of a file already read: `data` is the contents of `path` (which errors name).
pub fn usdt_probes_in(path: &Path, data: &[u8]) -> Result<Vec<UsdtProbe>, ElfError> {
    Elf::parse(path, data)?.usdt_probes()
}

/// Every site of USDT probe `provider:name`; without a provider, of `name` in any provider.
pub fn usdt_probe(path: &Path, provider: Option<&str>, name: &str) -> Result<Vec<UsdtProbe>, ElfError> {
    let all = usdt_probes(path)?;
    let wanted = |p: &UsdtProbe| p.name == name && provider.is_none_or(|provider| p.provider == provider);
    let sites: Vec<UsdtProbe> = all.iter().filter(|p| wanted(p)).cloned().collect();
    if !sites.is_empty() {
        return Ok(sites);
    }
    let mut names: Vec<String> = all.iter().map(|p| format!("{}:{}", p.provider, p.name)).collect();
    names.sort();
    names.dedup();
    let available = match names.len() {
        0 => "it has none".to_string(),
        n if n > 30 => format!("it has: {}, and {} more", names[..30].join(", "), n - 30),
        _ => format!("it has: {}", names.join(", ")),
    };
    let probe = provider.map_or_else(|| name.to_string(), |provider| format!("{provider}:{name}"));
    Err(ElfError::NoProbe { path: path.into(), probe, available })
}

/// Parses one SystemTap SDT argument, `SIZE@OPERAND` in x86_64 AT&T syntax: `-4@%edi`,
/// `8@-16(%rbp)`, `4@$5`. A negative size means signed.
pub fn parse_usdt_arg(spec: &str) -> Result<UsdtArg, ElfError> {
    let bad = |reason| ElfError::UsdtOperand { spec: spec.into(), reason };
    let (size, operand) = spec.split_once('@').ok_or_else(|| bad("expected SIZE@OPERAND"))?;
    let (signed, size) = match size.parse::<i8>() {
        Ok(n @ (-8 | -4 | -2 | -1)) => (true, n.unsigned_abs()),
        Ok(n @ (1 | 2 | 4 | 8)) => (false, n.unsigned_abs()),
        _ => return Err(bad("the size must be one of -8, -4, -2, -1, 1, 2, 4, 8")),
    };
    let loc = if let Some(imm) = operand.strip_prefix('$') {
        UsdtLoc::Const(parse_int(imm).ok_or_else(|| bad("symbolic or malformed immediate"))?)
    } else if let Some(reg) = operand.strip_prefix('%') {
        if reg.contains(':') {
            return Err(bad("segment-relative addressing"));
        }
        UsdtLoc::Reg { regs_off: register(reg).map_err(bad)? }
    } else if let Some((disp, inner)) = operand.split_once('(') {
        let inner = inner.strip_suffix(')').ok_or_else(|| bad("expected `disp(%reg)`"))?;
        if inner.contains(',') {
            return Err(bad("indexed (SIB) addressing"));
        }
        let reg = inner.strip_prefix('%').ok_or_else(|| bad("expected a register in parentheses"))?;
        let disp = if disp.is_empty() { Some(0) } else { parse_int(disp) };
        let disp = disp.ok_or_else(|| bad("symbolic or malformed displacement"))?;
        UsdtLoc::Mem { regs_off: register(reg).map_err(bad)?, disp }
    } else {
        return Err(bad("expected `%reg`, `$imm` or `disp(%reg)`"));
    };
    Ok(UsdtArg { size, signed, loc })
}

/// The `struct pt_regs` offset of a general-purpose register, under any of its names.
fn register(name: &str) -> Result<u16, &'static str> {
    Ok(match name {
        "rax" | "eax" | "ax" | "al" => 80,
        "rbx" | "ebx" | "bx" | "bl" => 40,
        "rcx" | "ecx" | "cx" | "cl" => 88,
        "rdx" | "edx" | "dx" | "dl" => 96,
        "rsi" | "esi" | "si" | "sil" => 104,
        "rdi" | "edi" | "di" | "dil" => 112,
        "rbp" | "ebp" | "bp" | "bpl" => 32,
        "rsp" | "esp" | "sp" | "spl" => 152,
        "rip" => 128,
        "ah" | "bh" | "ch" | "dh" => return Err("8-bit high registers are not supported"),
        // r8..r15, with a d/w/b suffix for their low 32/16/8 bits.
        _ => match ["d", "w", "b"].iter().find_map(|suffix| name.strip_suffix(suffix)).unwrap_or(name) {
            "r8" => 72,
            "r9" => 64,
            "r10" => 56,
            "r11" => 48,
            "r12" => 24,
            "r13" => 16,
            "r14" => 8,
            "r15" => 0,
            _ => return Err("unknown register"),
        },
    })
}

/// A decimal or `0x` hexadecimal integer, possibly negative; 64-bit values wrap as two's complement.
fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = text.strip_prefix('-').map_or((false, text), |d| (true, d));
    let magnitude = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) if hex.bytes().all(|b| b.is_ascii_hexdigit()) => u64::from_str_radix(hex, 16).ok()?,
        None if digits.bytes().all(|b| b.is_ascii_digit()) => digits.parse().ok()?,
        _ => return None,
    };
    Some(if negative { (magnitude as i64).wrapping_neg() } else { magnitude as i64 })
}

/// `malloc+0x10` → (`malloc`, 16); a name whose tail is not a number (`operator+`) is kept whole.
fn split_offset(name: &str) -> (&str, u64) {
    let parsed = name.rsplit_once('+').and_then(|(func, off)| Some((func, u64::try_from(parse_int(off)?).ok()?)));
    parsed.filter(|(func, _)| !func.is_empty()).unwrap_or((name, 0))
}

/// The candidate closest to `name` by edit distance, if it is close enough to be a typo.
fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .filter(|c| c.len().abs_diff(name.len()) <= limit)
        .map(|c| (super::probes::edit_distance(name, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Looks `name` up in a `glibc-ld.so.cache1.1` cache, alone or after an old `ld.so-1.7.0` one.
pub fn ld_cache_lookup(cache: &[u8], name: &str) -> Option<PathBuf> {
    const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
    const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    const HEADER: usize = 48;
    const ENTRY: usize = 24;
    /// `FLAG_ELF_LIBC6 | FLAG_X8664_LIB64`: a 64-bit x86 glibc library.
    const X86_64_LIBC6: u32 = 0x0303;
    let mut start = 0;
    if cache.starts_with(OLD_MAGIC) {
        let old_entries = usize::try_from(le_u32(cache, 12)?).ok()?;
        start = old_entries.checked_mul(12)?.checked_add(16 + 7)? & !7;
    }
    // String offsets of the new format count from its own header.
    let new = cache.get(start..)?;
    if !new.starts_with(NEW_MAGIC) {
        return None;
    }
    let count = usize::try_from(le_u32(new, 20)?).ok()?.min(new.len().saturating_sub(HEADER) / ENTRY);
    let matches = (0..count).map(|i| HEADER + i * ENTRY).filter_map(|at| {
        let (flags, hwcap) = (le_u32(new, at)?, le_u64(new, at + 16)?);
        let (key, value) = (c_str(new, le_u32(new, at + 4)?)?, c_str(new, le_u32(new, at + 8)?)?);
        (flags == X86_64_LIBC6 && library_matches(key, name)).then_some((key, value, hwcap))
    });
    // Prefer the exact name, then the baseline (not glibc-hwcaps) build, then the shortest name.
    let (_, best, _) =
        matches.min_by_key(|&(key, _, hwcap)| (key != name, hwcap != 0, key.ends_with(".so"), key.len()))?;
    Some(PathBuf::from(best))
}

/// `libc` matches `libc.so.6`, `libc.so` matches `libc.so.6`; `libc` does not match `libcrypt.so.1`.
fn library_matches(file: &str, name: &str) -> bool {
    file.strip_prefix(name).is_some_and(|rest| {
        rest.is_empty() || rest.starts_with(".so") || (name.contains(".so") && rest.starts_with('.'))
    })
}

/// The best ELF file in `dir` matching library `name` (a `libc.so` linker script is not one).
fn dir_lookup(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut found: Vec<(bool, bool, usize, PathBuf)> = fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let file = path.file_name()?.to_str()?;
            library_matches(file, name).then(|| (file != name, file.ends_with(".so"), file.len(), path.clone()))
        })
        .filter(|(.., path)| is_elf(path))
        .collect();
    found.sort();
    found.into_iter().next().map(|(.., path)| path)
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == *b"\x7fELF"
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The NUL-terminated UTF-8 string at `at`.
fn c_str(bytes: &[u8], at: u32) -> Option<&str> {
    let tail = bytes.get(usize::try_from(at).ok()?..)?;
    std::str::from_utf8(&tail[..tail.iter().position(|&b| b == 0)?]).ok()
}

fn read(path: &Path) -> Result<Vec<u8>, ElfError> {
    fs::read(path).map_err(|source| ElfError::Read { path: path.into(), source })
}

/// A parsed 64-bit ELF file; every table is bounds-checked by `object` when it is read.
struct Elf<'d> {
    path: &'d Path,
    data: &'d [u8],
    endian: Endianness,
    segments: &'d [<FileHeader64<Endianness> as FileHeader>::ProgramHeader],
    sections: SectionTable<'d, FileHeader64<Endianness>>,
}

impl<'d> Elf<'d> {
    fn parse(path: &'d Path, data: &'d [u8]) -> Result<Self, ElfError> {
        if !data.starts_with(b"\x7fELF") {
            return Err(ElfError::NotElf { path: path.into() });
        }
        let malformed = |reason: String| ElfError::Malformed { path: path.into(), reason };
        if data.get(4) != Some(&ELFCLASS64) {
            return Err(malformed("only 64-bit ELF files are supported".into()));
        }
        let header = FileHeader64::<Endianness>::parse(data).map_err(|e| malformed(e.to_string()))?;
        let endian = header.endian().map_err(|e| malformed(e.to_string()))?;
        let segments = header.program_headers(endian, data).map_err(|e| malformed(e.to_string()))?;
        let sections = header.sections(endian, data).map_err(|e| malformed(e.to_string()))?;
        Ok(Elf { path, data, endian, segments, sections })
    }

    fn malformed(&self, reason: impl ToString) -> ElfError {
        ElfError::Malformed { path: self.path.into(), reason: reason.to_string() }
    }

    /// Through the `PT_LOAD` segment holding `vaddr` in its file part; through the allocated
    /// sections only when there are no segments (relocatable objects, some debug files).
    fn offset_of(&self, vaddr: u64) -> Result<u64, ElfError> {
        let e = self.endian;
        let within = |start: u64, size: u64, offset: u64| {
            let delta = vaddr.checked_sub(start)?;
            if delta < size {
                offset.checked_add(delta)
            } else {
                None
            }
        };
        let mut loads = self.segments.iter().filter(|p| p.p_type(e) == PT_LOAD).peekable();
        let offset = if loads.peek().is_some() {
            loads.find_map(|p| within(p.p_vaddr(e), p.p_filesz(e), p.p_offset(e)))
        } else {
            let in_file = |s: &&SectionHeader64<Endianness>| {
                s.sh_flags(e) & u64::from(SHF_ALLOC) != 0 && s.sh_type(e) != SHT_NOBITS
            };
            self.sections.iter().filter(in_file).find_map(|s| within(s.sh_addr(e), s.sh_size(e), s.sh_offset(e)))
        };
        offset
            .filter(|&offset| offset < self.data.len() as u64)
            .ok_or_else(|| ElfError::Unmapped { path: self.path.into(), vaddr })
    }

    fn functions(&self) -> Result<Vec<FuncSymbol>, ElfError> {
        let e = self.endian;
        let mut by_name: BTreeMap<String, FuncSymbol> = BTreeMap::new();
        for kind in [SHT_SYMTAB, SHT_DYNSYM] {
            let table = self.sections.symbols(e, self.data, kind).map_err(|err| self.malformed(err))?;
            for sym in table.iter() {
                let is_func = matches!(sym.st_type(), STT_FUNC | STT_GNU_IFUNC);
                if !is_func || sym.st_shndx(e) == SHN_UNDEF || sym.st_value(e) == 0 {
                    continue;
                }
                let name = table.symbol_name(e, sym).ok().and_then(|name| std::str::from_utf8(name).ok());
                let (Some(name), Ok(file_offset)) = (name, self.offset_of(sym.st_value(e))) else { continue };
                let found = FuncSymbol { name: name.into(), addr: sym.st_value(e), size: sym.st_size(e), file_offset };
                match by_name.entry(found.name.clone()) {
                    Entry::Vacant(slot) => {
                        slot.insert(found);
                    }
                    // An alias with a size beats one without.
                    Entry::Occupied(mut slot) if slot.get().size == 0 && found.size > 0 => {
                        slot.insert(found);
                    }
                    Entry::Occupied(_) => {}
                }
            }
        }
        Ok(by_name.into_values().filter(|f| !f.name.is_empty()).collect())
    }

    fn usdt_probes(&self) -> Result<Vec<UsdtProbe>, ElfError> {
        let e = self.endian;
        let base = self.sections.section_by_name(e, b".stapsdt.base").map(|(_, s)| s.sh_addr(e));
        let mut probes = Vec::new();
        for section in self.sections.iter().filter(|s| s.sh_type(e) == SHT_NOTE) {
            if self.sections.section_name(e, section).ok() != Some(&b".note.stapsdt"[..]) {
                continue;
            }
            let Some(mut notes) = section.notes(e, self.data).map_err(|err| self.malformed(err))? else { continue };
            while let Some(note) = notes.next().map_err(|err| self.malformed(err))? {
                if note.name() == b"stapsdt" && note.n_type(e) == NT_STAPSDT {
                    probes.push(self.usdt_probe(note.desc(), base)?);
                }
            }
        }
        Ok(probes)
    }

    /// Decodes one note: pc, `.stapsdt.base` as linked, semaphore, then "provider\0name\0args\0".
    fn usdt_probe(&self, desc: &[u8], base: Option<u64>) -> Result<UsdtProbe, ElfError> {
        let word = |i: usize| Some(self.endian.read_u64(desc.get(i * 8..i * 8 + 8)?.try_into().ok()?));
        let (Some(pc), Some(linked_base), Some(semaphore)) = (word(0), word(1), word(2)) else {
            return Err(self.malformed("a USDT note is too short"));
        };
        let mut strings =
            desc.get(24..).unwrap_or_default().split(|&b| b == 0).map(|s| String::from_utf8_lossy(s).into_owned());
        let (provider, name) = (strings.next().unwrap_or_default(), strings.next().unwrap_or_default());
        let arg_text = strings.next().unwrap_or_default();
        // Prelinking moves the sections but not the note contents; `.stapsdt.base` says by how much.
        let shift = base.filter(|_| linked_base != 0).map_or(0, |actual| actual.wrapping_sub(linked_base));
        let offset = |vaddr: u64| {
            let vaddr = vaddr.wrapping_add(shift);
            let outside =
                |_| self.malformed(format!("USDT probe `{provider}:{name}` at {vaddr:#x} is outside the file"));
            self.offset_of(vaddr).map_err(outside)
        };
        let pc_offset = offset(pc)?;
        let semaphore_offset = if semaphore == 0 { None } else { Some(offset(semaphore)?) };
        let args = arg_text.split_whitespace().map(parse_usdt_arg).collect::<Result<_, _>>().unwrap_or_default();
        Ok(UsdtProbe { provider, name, pc_offset, semaphore_offset, args, arg_text })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Runs a tool the tests rely on; a missing tool fails the test rather than skipping it.
    fn run(program: &str, args: &[&str]) -> String {
        let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        assert!(out.status.success(), "{program} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn hex(text: &str) -> u64 {
        u64::from_str_radix(text.trim().trim_end_matches(',').trim_start_matches("0x"), 16).unwrap()
    }

    /// File offset of `vaddr` from `readelf -lW`, independently of the code under test.
    fn readelf_offset(path: &Path, vaddr: u64) -> u64 {
        let segments = run("readelf", &["-lW", path.to_str().unwrap()]);
        segments
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.first() == Some(&"LOAD"))
            .find_map(|f| {
                let (offset, start, filesz) = (hex(f[1]), hex(f[2]), hex(f[4]));
                (start..start + filesz).contains(&vaddr).then(|| vaddr - start + offset)
            })
            .unwrap_or_else(|| panic!("{vaddr:#x} is in no LOAD segment of {}", path.display()))
    }

    #[test]
    fn usdt_args_decode_to_pt_regs_locations() {
        let arg = |size, signed, loc| UsdtArg { size, signed, loc };
        let cases = [
            ("-4@%edi", arg(4, true, UsdtLoc::Reg { regs_off: 112 })),
            ("8@-16(%rbp)", arg(8, false, UsdtLoc::Mem { regs_off: 32, disp: -16 })),
            ("4@$5", arg(4, false, UsdtLoc::Const(5))),
            ("-8@$-3", arg(8, true, UsdtLoc::Const(-3))),
            ("8@%r12", arg(8, false, UsdtLoc::Reg { regs_off: 24 })),
            ("2@0x10(%rax)", arg(2, false, UsdtLoc::Mem { regs_off: 80, disp: 16 })),
            ("1@%dil", arg(1, false, UsdtLoc::Reg { regs_off: 112 })),
            ("8@(%rsp)", arg(8, false, UsdtLoc::Mem { regs_off: 152, disp: 0 })),
            ("-2@%r15w", arg(2, true, UsdtLoc::Reg { regs_off: 0 })),
            ("8@-0x8(%rip)", arg(8, false, UsdtLoc::Mem { regs_off: 128, disp: -8 })),
            ("8@$0xffffffffffffffff", arg(8, false, UsdtLoc::Const(-1))),
        ];
        for (spec, want) in cases {
            assert_eq!(parse_usdt_arg(spec).unwrap(), want, "{spec}");
        }
        let errors = [
            ("8@(%rax,%rdx,8)", "indexed"),
            ("x@%eax", "size"),
            ("8@%foo", "unknown register"),
            ("1@%ah", "high"),
            ("8@%fs:0x28", "segment"),
            ("8@counter(%rip)", "symbolic"),
            ("8@%r16", "unknown register"),
            ("%eax", "SIZE@OPERAND"),
        ];
        for (spec, reason) in errors {
            let message = parse_usdt_arg(spec).unwrap_err().to_string();
            assert!(message.starts_with("unsupported USDT operand") && message.contains(reason), "{spec}: {message}");
        }
    }

    #[test]
    fn library_and_program_names_resolve_like_bpftrace() {
        let libc = find_binary("libc").unwrap();
        assert_eq!(find_binary("libc.so.6").unwrap(), libc);
        assert!(libc.is_absolute() && libc.to_str().unwrap().contains("libc.so.6"), "{}", libc.display());
        let sh = find_binary("sh").unwrap();
        let real_sh = ["/usr/bin/sh", "/bin/sh"].iter().filter_map(|p| fs::canonicalize(p).ok()).collect::<Vec<_>>();
        assert!(real_sh.contains(&sh), "{} is not sh", sh.display());
        let message = find_binary("libwasmtap-no-such-lib").unwrap_err().to_string();
        assert!(message.contains("library `libwasmtap-no-such-lib` not found"), "{message}");
        assert!(message.contains("searched: ld.so.cache, /lib/x86_64-linux-gnu,"), "{message}");
        assert!(matches!(find_binary("wasmtap-no-such-program"), Err(ElfError::NoProgram { .. })));
        let missing = find_binary("/no/such/file").unwrap_err().to_string();
        assert!(missing.starts_with("cannot read /no/such/file: No such file or directory"), "{missing}");
    }

    #[test]
    fn libc_malloc_offset_matches_readelf() {
        let libc = find_binary("libc").unwrap();
        let funcs = functions(&libc).unwrap();
        let malloc = funcs.iter().find(|f| f.name == "malloc").expect("malloc in libc");
        assert!(malloc.size > 0);
        assert!(funcs.windows(2).all(|w| w[0].name < w[1].name), "sorted and deduplicated");

        let symbols = run("readelf", &["-sW", "--dyn-syms", libc.to_str().unwrap()]);
        let vaddr = symbols
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() >= 8 && f[3] == "FUNC" && f[7].split('@').next() == Some("malloc"))
            .map(|f| hex(f[1]))
            .expect("readelf lists malloc");
        assert_eq!(malloc.addr, vaddr);
        let offset = readelf_offset(&libc, vaddr);
        assert_eq!(function_offset(&libc, "malloc").unwrap(), offset);
        assert_eq!(vaddr_to_offset(&libc, vaddr).unwrap(), offset);
        assert_eq!(function_offset(&libc, "malloc+0x4").unwrap(), offset + 4);
        assert!(matches!(function_offset(&libc, "malloc+100000"), Err(ElfError::OutsideFunction { .. })));

        let typo = function_offset(&libc, "mallok").unwrap_err().to_string();
        assert!(typo.starts_with("no function `mallok` in ") && typo.ends_with("(did you mean `malloc`?)"), "{typo}");
        let far = function_offset(&libc, "zzzzzzzzzzzz").unwrap_err().to_string();
        assert!(far.ends_with("libc.so.6"), "no suggestion for a name far from all: {far}");
    }

    #[test]
    fn non_elf_and_truncated_files_are_errors_not_panics() {
        let dir = scratch_dir("junk");
        let text = dir.join("text");
        fs::write(&text, "#!/bin/sh\n").unwrap();
        assert_eq!(functions(&text).unwrap_err().to_string(), format!("{} is not an ELF file", text.display()));
        let libc = fs::read(find_binary("libc").unwrap()).unwrap();
        for len in [4, 16, 64, 200, 4096, libc.len() / 2] {
            let cut = dir.join(format!("cut{len}"));
            fs::write(&cut, &libc[..len]).unwrap();
            let _ = functions(&cut);
            let _ = usdt_probes(&cut);
        }
        let _ = fs::remove_dir_all(dir);
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wasmtap-elf-{}-{name}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    const TICK_C: &str = r#"
#include <sys/sdt.h>
void sem_fire(int i);
int main(int argc, char **argv) {
    volatile long x = 0;
    (void)argv;
    for (int i = 0; i < argc + 3; i++) {
        DTRACE_PROBE2(wtest, tick, i, (long)&x);
        sem_fire(i);
        x += i;
    }
    return (int)x;
}
"#;
    /// sdt.h gives every probe of a file a semaphore once `_SDT_HAS_SEMAPHORES` is set, so the
    /// probe with one lives in its own file.
    const SEM_C: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short wtest_sem_semaphore __attribute__((unused)) __attribute__((section(".probes")));
void sem_fire(int i) {
    if (wtest_sem_semaphore)
        STAP_PROBE1(wtest, sem, i);
}
"#;

    /// (provider, name, location, semaphore) of each note, as `readelf -n` prints them.
    fn readelf_notes(path: &Path) -> Vec<(String, String, u64, u64)> {
        let text = run("readelf", &["-n", path.to_str().unwrap()]);
        let field = |line: &str, key: &str| line.trim().strip_prefix(key).map(str::to_string);
        let lines: Vec<&str> = text.lines().collect();
        lines
            .windows(3)
            .filter_map(|w| {
                let (provider, name) = (field(w[0], "Provider: ")?, field(w[1], "Name: ")?);
                let location: Vec<&str> = w[2].split_whitespace().collect();
                Some((provider, name, hex(location[1]), hex(location[5])))
            })
            .collect()
    }

    fn check_usdt_binary(flags: &[&str]) {
        let dir = scratch_dir(&flags.join("").replace('-', "_"));
        fs::write(dir.join("tick.c"), TICK_C).unwrap();
        fs::write(dir.join("sem.c"), SEM_C).unwrap();
        let prog = dir.join("prog");
        let (tick, sem, out) = (dir.join("tick.c"), dir.join("sem.c"), prog.to_str().unwrap().to_string());
        let mut args = flags.to_vec();
        args.extend([tick.to_str().unwrap(), sem.to_str().unwrap(), "-o", &out]);
        run("cc", &args);

        let probes = usdt_probes(&prog).unwrap();
        let notes = readelf_notes(&prog);
        assert_eq!(probes.len(), notes.len(), "{probes:?}");
        let data = fs::read(&prog).unwrap();
        for (probe, (provider, name, location, semaphore)) in probes.iter().zip(&notes) {
            assert_eq!((&probe.provider, &probe.name), (provider, name));
            assert_eq!(probe.pc_offset, readelf_offset(&prog, *location), "{probe:?}");
            assert_eq!(data.get(probe.pc_offset as usize), Some(&0x90), "a nop at the probe site");
            let disasm = run(
                "objdump",
                &[
                    "-d",
                    &format!("--start-address={location:#x}"),
                    &format!("--stop-address={:#x}", location + 1),
                    &out,
                ],
            );
            assert!(
                disasm.lines().any(|l| l.trim_start().starts_with(&format!("{location:x}:")) && l.contains("nop")),
                "{disasm}"
            );
            let want_semaphore = (*semaphore != 0).then(|| readelf_offset(&prog, *semaphore));
            assert_eq!(probe.semaphore_offset, want_semaphore);
            assert_eq!(probe.args.len(), probe.arg_text.split_whitespace().count(), "all args parse: {probe:?}");
        }
        let tick = probes.iter().find(|p| p.name == "tick").expect("wtest:tick");
        assert_eq!((tick.provider.as_str(), tick.args.len(), tick.semaphore_offset), ("wtest", 2, None));
        assert_eq!((tick.args[0].size, tick.args[0].signed, tick.args[1].size), (4, true, 8));
        let sem = usdt_probe(&prog, Some("wtest"), "sem").unwrap();
        assert!(sem.iter().all(|p| p.semaphore_offset.is_some() && p.args.len() == 1), "{sem:?}");
        let missing = usdt_probe(&prog, Some("foo"), "bar").unwrap_err().to_string();
        assert!(
            missing.starts_with("no USDT probe `foo:bar` in ") && missing.ends_with("(it has: wtest:sem, wtest:tick)"),
            "{missing}"
        );
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn usdt_probes_match_readelf_and_point_at_nops() {
        check_usdt_binary(&["-O1"]);
        check_usdt_binary(&["-O2", "-fPIE", "-pie"]);
        check_usdt_binary(&["-O2", "-fno-pie", "-no-pie"]);
    }
}

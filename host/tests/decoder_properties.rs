//! Property tests of the host's decoders of outside data: recordings, tracefs format
//! files, `--param` values, probe names, USDT notes and operands. Each takes any input
//! without panicking and names what is wrong with a bad one; where a writer exists, what
//! it writes reads back unchanged. The cargo-fuzz targets in `fuzz/` explore the same
//! decoders for longer (docs/fuzzing.md).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use wasmtap::accounting::{KernelCounters, KindCounters};
use wasmtap::collect::elf::{self, UsdtArg, UsdtLoc};
use wasmtap::collect::probes::{self, ProbeSpec};
use wasmtap::collect::recording::{Header, Reader, RecordingError, SymbolEntry, Trailer, Writer};
use wasmtap::collect::tracefs::{self, Field, FieldKind};
use wasmtap::collect::Chunk;
use wasmtap::plugin::params::{self, ParamError, RawParam};
use wasmtap::wit::types::{ParamKind, ParamSpec};
use wasmtap_abi::Kind;

/// A scratch file of this test process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Scratch(std::env::temp_dir().join(format!("wasmtap-props-{}-{n}", std::process::id())))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---- recordings ----

/// A valid record of `kind` with `extra` more 8-byte words and random contents.
fn record() -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(Kind::ALL.to_vec()), 0usize..4).prop_flat_map(|(kind, extra)| {
        let size = (kind.min_size() + 8 * extra).min(kind.max_size());
        prop::collection::vec(any::<u8>(), size).prop_map(move |mut b| {
            b[0..2].copy_from_slice(&(kind as u16).to_le_bytes());
            b[2..4].copy_from_slice(&(size as u16).to_le_bytes());
            b[6..8].copy_from_slice(&0u16.to_le_bytes()); // no stack trailer
            b
        })
    })
}

fn header() -> impl Strategy<Value = Header> {
    let probes = prop::collection::vec("[a-z:_*]{1,20}", 0..4);
    (any::<i128>(), any::<u64>(), probes, ".{0,12}", ".{0,12}").prop_map(|(wall, start, probes, hostname, kernel)| {
        Header {
            layout_version: wasmtap_abi::LAYOUT_VERSION,
            wall_offset_ns: wall,
            started_mono_ns: start,
            probes,
            table: Default::default(),
            hostname,
            kernel,
        }
    })
}

fn trailer() -> impl Strategy<Value = Trailer> {
    let counts = (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())
        .prop_map(|(filtered, emitted, dropped, lost)| KindCounters { filtered, emitted, dropped, lost });
    let kinds = prop::collection::btree_map(prop::sample::select(Kind::ALL.to_vec()), counts.clone(), 0..4);
    let symbols = prop::collection::vec((any::<u32>(), any::<u64>(), ".{0,8}"), 0..3);
    (any::<u64>(), kinds, any::<u64>(), any::<u64>(), prop::option::of(counts), symbols).prop_map(
        |(ended, kinds, pipeline_dropped, malformed, aggregated, symbols)| Trailer {
            ended_mono_ns: ended,
            counters: KernelCounters {
                kinds,
                pipeline_dropped,
                malformed,
                aggregated,
                probes: Default::default(),
                losses: Default::default(),
                agg_losses: Default::default(),
            },
            symbols: symbols
                .into_iter()
                .map(|(pid, addr, symbol)| SymbolEntry {
                    pid,
                    kernel: pid == 0,
                    frame: wasmtap::symbolize::Frame { addr, symbol, ..Default::default() },
                })
                .collect(),
        },
    )
}

type Recording = (Header, Vec<Vec<u8>>, Trailer);

fn recording() -> impl Strategy<Value = Recording> {
    let chunk = prop::collection::vec(record(), 1..4).prop_map(|recs| recs.concat());
    (header(), prop::collection::vec(chunk, 0..4), trailer())
}

fn write(path: &Path, (header, chunks, trailer): &Recording) {
    // The writer never overwrites: each case writes a new file.
    let _ = std::fs::remove_file(path);
    let mut w = Writer::create(path, header).unwrap();
    for bytes in chunks {
        let records = wasmtap_abi::Records::new(bytes).count() as u64;
        w.chunk(&Chunk { bytes: bytes.clone(), records }).unwrap();
    }
    w.finish(trailer).unwrap();
}

/// Everything in the recording at `path`, read the way `replay` does.
fn read(path: &Path) -> Result<Recording, RecordingError> {
    let mut r = Reader::open(path)?;
    let peeked = r.peek_trailer()?;
    let mut chunks = Vec::new();
    while let Some(chunk) = r.next_chunk()? {
        assert_eq!(chunk.records, wasmtap_abi::Records::new(&chunk.bytes).count() as u64);
        chunks.push(chunk.bytes);
    }
    let trailer = r.trailer().expect("a trailer after the last chunk").clone();
    assert_eq!(peeked, trailer, "peek_trailer agrees with reading to the end");
    Ok((r.header.clone(), chunks, trailer))
}

/// Byte ranges of the file's framing: magic, version, lengths and tags.
fn framing(file: &[u8], chunks: &[Vec<u8>]) -> Vec<std::ops::Range<usize>> {
    let json = u32::from_le_bytes(file[16..20].try_into().unwrap()) as usize;
    // Magic, version and header length.
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    ranges.push(0..20);
    let mut at = 20 + json;
    for c in chunks {
        ranges.push(at..at + 5);
        at += 5 + c.len();
    }
    ranges.push(at..at + 5);
    ranges
}

fn assert_names_the_file(e: &RecordingError, path: &Path, len: usize) {
    let message = e.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    if let RecordingError::Corrupt { offset, reason, .. } = e {
        assert!(*offset <= len as u64 && !reason.is_empty(), "{message}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_written_recording_reads_back_identical(rec in recording()) {
        let path = Scratch::new();
        write(&path.0, &rec);
        prop_assert_eq!(read(&path.0).unwrap(), rec);
    }

    #[test]
    fn a_truncated_recording_is_an_error(rec in recording(), cut in any::<prop::sample::Index>()) {
        let path = Scratch::new();
        write(&path.0, &rec);
        let full = std::fs::read(&path.0).unwrap();
        let cut = cut.index(full.len());
        std::fs::write(&path.0, &full[..cut]).unwrap();
        let e = read(&path.0).expect_err("a truncated recording was accepted");
        assert_names_the_file(&e, &path.0, cut);
    }

    /// Recordings carry no checksum, so a changed byte inside a record or inside the JSON
    /// can go unnoticed; but a damaged frame is always an error, and a recording that
    /// still reads has the chunks that were written, at most the one byte changed.
    #[test]
    fn a_corrupted_byte_is_an_error_or_stays_inside_its_chunk(
        rec in recording(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let path = Scratch::new();
        write(&path.0, &rec);
        let mut file = std::fs::read(&path.0).unwrap();
        let i = at.index(file.len());
        file[i] ^= flip;
        std::fs::write(&path.0, &file).unwrap();
        match read(&path.0) {
            Err(e) => assert_names_the_file(&e, &path.0, file.len()),
            Ok((_, chunks, _)) => {
                prop_assert!(!framing(&file, &rec.1).iter().any(|r| r.contains(&i)), "framing byte {i} changed unnoticed");
                let lens = |c: &[Vec<u8>]| c.iter().map(Vec::len).collect::<Vec<_>>();
                prop_assert_eq!(lens(&chunks), lens(&rec.1));
                let changed = chunks.concat().iter().zip(rec.1.concat()).filter(|(a, b)| *a != b).count();
                prop_assert!(changed <= 1);
            }
        }
    }

    #[test]
    fn any_bytes_after_a_valid_start_are_an_error_or_whole_records(
        head in header(),
        tail in prop::collection::vec(any::<u8>(), 0..512),
        magic_only in any::<bool>(),
    ) {
        let path = Scratch::new();
        write(&path.0, &(head, vec![], Trailer::default()));
        let mut file = std::fs::read(&path.0).unwrap();
        let json = u32::from_le_bytes(file[16..20].try_into().unwrap()) as usize;
        file.truncate(if magic_only { 12 } else { 20 + json });
        file.extend(&tail);
        std::fs::write(&path.0, &file).unwrap();
        if let Err(e) = read(&path.0) {
            assert_names_the_file(&e, &path.0, file.len());
        }
    }
}

// ---- tracefs format files ----

/// One field: its declaration, size, and what the parser should make of it.
fn tracefs_field() -> impl Strategy<Value = (String, u32, FieldKind, u32, bool)> {
    let ints = prop::sample::select(vec![
        ("int", 4),
        ("unsigned int", 4),
        ("long", 8),
        ("unsigned long", 8),
        ("u64", 8),
        ("s32", 4),
        ("pid_t", 4),
        ("short", 2),
        ("unsigned char", 1),
        ("__u16", 2),
        ("long long", 8),
    ]);
    prop_oneof![
        (ints.clone(), any::<bool>()).prop_map(|((ty, size), signed)| {
            let kind = if signed { FieldKind::Signed } else { FieldKind::Unsigned };
            (format!("{ty} NAME"), size, kind, 1, signed)
        }),
        Just(("const char * NAME".to_string(), 8, FieldKind::Unsigned, 1, false)),
        Just(("bool NAME".to_string(), 1, FieldKind::Unsigned, 1, false)),
        (1u32..300).prop_map(|n| (format!("char NAME[{n}]"), n, FieldKind::Text, n, false)),
        (ints, 1u32..64).prop_map(|((ty, size), n)| (format!("{ty} NAME[{n}]"), size * n, FieldKind::Array, n, false)),
        Just(("__data_loc char[] NAME".to_string(), 4, FieldKind::DynamicText, 1, false)),
        Just(("__data_loc u8[] NAME".to_string(), 4, FieldKind::DynamicBytes, 1, false)),
        Just(("__rel_loc char[] NAME".to_string(), 4, FieldKind::DynamicText, 1, false)),
        (3u32..200).prop_filter("not an integer size", |n| ![4, 8].contains(n)).prop_map(|n| (
            "struct in6_addr NAME".to_string(),
            n,
            FieldKind::Array,
            n,
            false
        )),
    ]
}

/// Format text for `fields`, laid out as the kernel prints it, and the fields it describes.
fn tracefs_format() -> impl Strategy<Value = (String, u32, Vec<Field>)> {
    let one = ("[a-z_][a-z0-9_]{0,12}", tracefs_field(), 0u32..60000);
    (prop::collection::vec(one, 1..12), any::<u32>()).prop_map(|(raw, id)| {
        let mut text = format!("name: ev\nID: {id}\nformat:\n");
        let mut fields: Vec<Field> = Vec::new();
        for (name, (decl, size, kind, count, signed), offset) in raw {
            if fields.iter().any(|f| f.name == name) {
                continue;
            }
            let decl = decl.replace("NAME", &name);
            text += &format!("\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{};\n", u8::from(signed));
            let c_type = match decl.strip_suffix(']').and_then(|d| d.rsplit_once('[')) {
                Some((head, n)) => format!("{}[{n}]", head.trim_end_matches(name.as_str()).trim_end()),
                None => decl.trim_end_matches(name.as_str()).trim_end().to_string(),
            };
            let relative = decl.starts_with("__rel_loc");
            let common = name.starts_with("common_");
            fields.push(Field { name, c_type, kind, offset, size, count, signed, common, relative });
        }
        text += "\nprint fmt: \"%d\", REC->x\n";
        (text, id, fields)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tracefs_format_text_parses_back_to_its_fields((text, id, fields) in tracefs_format()) {
        let f = tracefs::parse_format("cat", "ev", &text).unwrap();
        prop_assert_eq!((f.category.as_str(), f.name.as_str(), f.id), ("cat", "ev", id));
        prop_assert_eq!(f.fields, fields);
    }

    #[test]
    fn any_tracefs_text_parses_or_names_the_line(name in "[a-z_]{1,8}", text in "(name: [a-z_]{1,8}|ID: [0-9]{1,6}|format:|\tfield:[ -~]{0,30};\toffset:[0-9]{1,6};\tsize:[0-9]{1,6};\tsigned:[01];|[ -~]{0,20}|\n){0,12}") {
        match tracefs::parse_format("cat", &name, &text) {
            Ok(f) => {
                for x in &f.fields {
                    prop_assert!(x.offset <= 65535 && (1..=65535).contains(&x.size) && x.count >= 1, "{x:?}");
                    prop_assert!(x.size % x.count == 0, "{x:?}");
                }
            }
            Err(e) => {
                let message = e.to_string();
                prop_assert!(message.starts_with(&format!("bad format file for cat:{name} at line ")), "{message}");
            }
        }
    }

    #[test]
    fn any_bytes_as_a_tracefs_format_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = tracefs::parse_format("cat", "ev", &String::from_utf8_lossy(&bytes));
    }
}

// ---- plugin parameters and probe names ----

fn duration_unit() -> impl Strategy<Value = (&'static str, u64)> {
    prop::sample::select(vec![
        ("ns", 1),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn raw_params_round_trip(plugin in prop::option::of("[a-z_][a-z0-9_]{0,8}"), name in "[a-z_][a-z0-9_]{0,8}", value in ".{0,16}") {
        let text = match &plugin {
            Some(p) => format!("{p}.{name}={value}"),
            None => format!("{name}={value}"),
        };
        prop_assert_eq!(text.parse::<RawParam>(), Ok(RawParam { plugin, name, value }));
    }

    #[test]
    fn any_param_text_parses_or_is_quoted_back(text in ".{0,24}") {
        match text.parse::<RawParam>() {
            Ok(p) => prop_assert!(!p.name.is_empty() && text.contains('=')),
            Err(e) => prop_assert_eq!(e, ParamError::Syntax(text)),
        }
    }

    #[test]
    fn normalized_values_are_canonical(v in prop_oneof![".{0,12}", "[ ]?[-+]?[0-9]{1,20}(\\.[0-9]{0,12})?(ns|us|ms|s|m|h|min|sec)?", "(?i)(true|false|yes|no|on|off|0|1)"]) {
        for kind in [ParamKind::Integer, ParamKind::Boolean, ParamKind::Text] {
            if let Some(once) = params::normalize(kind, &v) {
                prop_assert_eq!(params::normalize(kind, &once), Some(once.clone()), "{:?}", kind);
            }
        }
        // A bare number means seconds as input, but nanoseconds once normalized: the
        // canonical form read back as nanoseconds is a fixed point.
        if let Some(ns) = params::normalize(ParamKind::Duration, &v) {
            prop_assert_eq!(params::normalize(ParamKind::Duration, &format!("{ns}ns")), Some(ns));
        }
    }

    #[test]
    fn formatted_durations_parse_back_exactly(ns in any::<u64>(), (unit, scale) in duration_unit()) {
        // Minutes and hours in whole units: most of their fractions have no exact decimal.
        let ns = if scale.to_string().trim_start_matches('1').bytes().all(|b| b == b'0') { ns } else { ns / scale * scale };
        let (whole, frac) = (ns / scale, ns % scale);
        let digits = scale.to_string().len() - 1;
        let text = if frac == 0 { format!("{whole}{unit}") } else { format!("{whole}.{frac:0digits$}{unit}") };
        prop_assert_eq!(params::parse_duration(&text), Some(Duration::from_nanos(ns)), "{}", text);
        prop_assert_eq!(params::parse_duration(&format!("{ns}ns")), Some(Duration::from_nanos(ns)));
    }

    #[test]
    fn resolve_fills_every_spec_or_names_the_plugin(
        specs in prop::collection::vec(("[a-c]", 0usize..4, prop::option::of("[0-9a-z.]{0,4}")), 0..4),
        raw in prop::collection::vec("([pq]\\.)?[a-d]=[0-9a-z.]{0,4}", 0..4),
    ) {
        let kinds = [ParamKind::Integer, ParamKind::Boolean, ParamKind::Text, ParamKind::Duration];
        let specs: Vec<ParamSpec> = specs
            .into_iter()
            .map(|(name, k, default_value)| ParamSpec { name, kind: kinds[k], default_value, description: "d".into() })
            .collect();
        let raw: Vec<RawParam> = raw.iter().map(|r| r.parse().unwrap()).collect();
        match params::bind("p", &specs, &raw) {
            Ok(values) => {
                prop_assert_eq!(values.len(), specs.len());
                for (v, s) in values.iter().zip(&specs) {
                    prop_assert_eq!(&v.name, &s.name);
                    // Canonical values: integers and booleans as such, durations in nanoseconds.
                    let canonical = if s.kind == ParamKind::Duration { format!("{}ns", v.value) } else { v.value.clone() };
                    prop_assert_eq!(params::normalize(s.kind, &canonical), Some(v.value.clone()));
                }
            }
            Err(e) => prop_assert!(e.to_string().contains(" p") || e.to_string().contains("p needs"), "{e}"),
        }
    }

    #[test]
    fn any_probe_name_parses_or_is_named_in_the_error(name in prop_oneof![".{0,30}", "(syscall|tracepoint|t|uprobe|uretprobe|usdt|U|profile|p|software|s|interval|i|btf|kprobe|hardware):[a-z0-9:+x_*-]{0,20}"]) {
        if let Err(e) = probes::parse(&name) {
            prop_assert!(e.to_string().contains(&format!("`{name}`")), "{e}");
        }
    }

    #[test]
    fn probe_names_round_trip(nr in 0u32..462, hz in 1u64..=10_000, ms in 1u64..1_000_000, off in any::<u64>()) {
        if let Some(sys) = wasmtap_abi::syscall_name(i64::from(nr)) {
            prop_assert_eq!(probes::parse(&format!("syscall:{sys}:exit")), Ok(ProbeSpec::Syscall { kind: Kind::SysExit, nr: Some(nr) }));
        }
        prop_assert_eq!(probes::parse(&format!("profile:hz:{hz}")), Ok(ProbeSpec::Profile { hz }));
        prop_assert_eq!(probes::parse(&format!("interval:ms:{ms}")), Ok(ProbeSpec::Interval { period_ns: ms * 1_000_000 }));
        let at = probes::UprobeAt::Offset(off);
        prop_assert_eq!(probes::parse(&format!("uprobe:/bin/x:{off:#x}")), Ok(ProbeSpec::Uprobe { binary: "/bin/x".into(), at, ret: false }));
    }
}

// ---- USDT operands and notes ----

const REGISTERS: [(&str, u16); 12] = [
    ("rax", 80),
    ("ebx", 40),
    ("cx", 88),
    ("dl", 96),
    ("rsi", 104),
    ("edi", 112),
    ("rbp", 32),
    ("rsp", 152),
    ("rip", 128),
    ("r8", 72),
    ("r12d", 24),
    ("r15w", 0),
];

fn usdt_arg() -> impl Strategy<Value = (String, UsdtArg)> {
    let size = prop::sample::select(vec![1u8, 2, 4, 8]);
    let reg = prop::sample::select(REGISTERS.to_vec());
    let loc = prop_oneof![
        any::<i64>().prop_map(|v| (format!("${v}"), UsdtLoc::Const(v))),
        reg.clone().prop_map(|(r, off)| (format!("%{r}"), UsdtLoc::Reg { regs_off: off })),
        (reg, any::<i64>(), any::<bool>()).prop_map(|((r, off), disp, hex)| {
            let text = match (hex, disp) {
                (true, d) if d < 0 => format!("-{:#x}(%{r})", d.unsigned_abs()),
                (true, d) => format!("{d:#x}(%{r})"),
                (false, d) => format!("{d}(%{r})"),
            };
            (text, UsdtLoc::Mem { regs_off: off, disp })
        }),
    ];
    (size, any::<bool>(), loc).prop_map(|(size, signed, (operand, loc))| {
        let sign = if signed { "-" } else { "" };
        (format!("{sign}{size}@{operand}"), UsdtArg { size, signed, loc })
    })
}

/// A 64-bit ELF with the `.note.stapsdt` section a C compiler emits for one probe.
fn elf_with_notes() -> &'static [u8] {
    static ELF: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    ELF.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("wasmtap-props-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "#include <sys/sdt.h>\nint main(int c, char **v) { DTRACE_PROBE2(p, tick, c, v); return 0; }\n",
        )
        .unwrap();
        let out = dir.join("p");
        let status = std::process::Command::new("cc").arg("-O1").arg(&src).arg("-o").arg(&out).status();
        assert!(status.is_ok_and(|s| s.success()), "cc with <sys/sdt.h> is needed (apt-get install systemtap-sdt-dev)");
        let bytes = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_dir_all(dir);
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn usdt_operands_round_trip((text, arg) in usdt_arg()) {
        prop_assert_eq!(elf::parse_usdt_arg(&text).unwrap(), arg);
    }

    #[test]
    fn any_usdt_operand_parses_or_is_quoted_back(text in prop_oneof![".{0,16}", "-?[0-9]@[-$%(]?[-0-9a-z,x%]{0,10}\\)?"]) {
        if let Err(e) = elf::parse_usdt_arg(&text) {
            prop_assert!(e.to_string().starts_with(&format!("unsupported USDT operand `{text}`: ")), "{e}");
        }
    }

    #[test]
    fn corrupted_usdt_notes_are_an_error_or_probes(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let path = Path::new("/fuzzed/p");
        let mut data = elf_with_notes().to_vec();
        let probes = elf::usdt_probes_in(path, &data).unwrap();
        prop_assert_eq!(probes.iter().map(|p| (p.provider.as_str(), p.name.as_str(), p.args.len())).collect::<Vec<_>>(), [("p", "tick", 2)]);
        for (at, byte) in edits {
            let i = at.index(data.len());
            data[i] = byte;
        }
        match elf::usdt_probes_in(path, &data) {
            Ok(probes) => {
                for p in probes {
                    prop_assert!(p.pc_offset < data.len() as u64 && p.semaphore_offset.is_none_or(|o| o < data.len() as u64), "{p:?}");
                }
            }
            Err(e) => prop_assert!(e.to_string().contains("/fuzzed/p"), "{e}"),
        }
        let _ = elf::functions_in(path, &data);
    }

    #[test]
    fn any_bytes_as_an_elf_or_ld_cache_never_panic(mut data in prop::collection::vec(any::<u8>(), 0..512), elf_head in any::<bool>()) {
        if elf_head && data.len() >= 64 {
            data[..64].copy_from_slice(&elf_with_notes()[..64]);
        }
        let path = Path::new("/fuzzed/x");
        let _ = (elf::usdt_probes_in(path, &data), elf::functions_in(path, &data));
        let _ = elf::ld_cache_lookup(&data, "libc");
    }
}

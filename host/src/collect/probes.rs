//! Probe names: what they mean, which collector serves them, and what is unavailable
//! here and why. Parsing is pure; resolving a name against the system (tracefs formats,
//! ELF symbols, USDT notes) happens in [`super::table`].

use std::collections::BTreeSet;

use wasmtap_abi::Kind;

/// A collector object in `bpf/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collector {
    /// `bpf/syscalls.bpf.c`
    Syscalls,
    /// `bpf/proc.bpf.c`
    Proc,
    /// `bpf/tracepoint.bpf.c`
    Tracepoint,
    /// `bpf/user.bpf.c`
    User,
    /// `bpf/perf.bpf.c`
    Perf,
    /// `bpf/file.bpf.c`
    File,
    /// `bpf/agg.bpf.c`: kernel aggregations.
    Agg,
}

/// The collector emitting records of `kind`.
pub fn collector_of(kind: Kind) -> Collector {
    match kind {
        Kind::SysEnter | Kind::SysExit => Collector::Syscalls,
        Kind::Exec | Kind::Fork | Kind::Exit => Collector::Proc,
        Kind::Tracepoint => Collector::Tracepoint,
        Kind::User => Collector::User,
        Kind::Sample => Collector::Perf,
        Kind::Open => Collector::File,
    }
}

/// Where a uprobe goes in its binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UprobeAt {
    /// A function, plus a byte offset into it.
    Symbol(String, u64),
    /// A file offset.
    Offset(u64),
}

/// A probe name, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeSpec {
    /// `tracepoint:raw_syscalls:sys_enter|exit` (`nr` none) or `syscall:NAME:entry|exit`.
    Syscall { kind: Kind, nr: Option<u32> },
    /// `proc:exec|fork|exit`, `file:open`: a probe of one record kind.
    Proc(Kind),
    /// `tracepoint:CATEGORY:NAME`, any tracepoint.
    Tracepoint { category: String, name: String },
    /// `uprobe:BINARY:FUNCTION[+OFF]`, `uprobe:BINARY:0xOFFSET`, `uretprobe:…`.
    Uprobe { binary: String, at: UprobeAt, ret: bool },
    /// `usdt:BINARY:[PROVIDER:]NAME`.
    Usdt { binary: String, provider: Option<String>, name: String },
    /// `profile:hz:N`: cpu-clock sampling on every CPU, N times a second.
    Profile { hz: u64 },
    /// `software:EVENT[:PERIOD]`: a perf software event, one sample every PERIOD.
    Software { event: SoftwareEvent, period: u64 },
    /// `interval:ms:N`, `interval:s:N`, `interval:us:N`.
    Interval { period_ns: u64 },
    /// `begin`: once, after every probe is attached.
    Begin,
    /// `end`: once, before the plugins finish.
    End,
}

impl ProbeSpec {
    /// The record kind this probe's events have; timers have none.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            ProbeSpec::Syscall { kind, .. } | ProbeSpec::Proc(kind) => Some(*kind),
            ProbeSpec::Tracepoint { .. } => Some(Kind::Tracepoint),
            ProbeSpec::Uprobe { .. } | ProbeSpec::Usdt { .. } => Some(Kind::User),
            ProbeSpec::Profile { .. } | ProbeSpec::Software { .. } => Some(Kind::Sample),
            ProbeSpec::Interval { .. } | ProbeSpec::Begin | ProbeSpec::End => None,
        }
    }
}

/// A perf software event (`PERF_COUNT_SW_*`), with bpftrace's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct SoftwareEvent {
    pub config: u32,
    pub name: &'static str,
    /// bpftrace's short alias.
    pub alias: &'static str,
    pub default_period: u64,
    pub about: &'static str,
}

/// The software events this kernel offers.
pub const SOFTWARE_EVENTS: &[SoftwareEvent] = &[
    sw(0, "cpu-clock", "cpu", 1_000_000, "CPU wall-clock timer (period in ns); `profile:hz:N` samples with it"),
    sw(1, "task-clock", "", 1_000_000, "task clock (period in ns)"),
    sw(2, "page-faults", "faults", 100, "page faults, minor and major (`addr`: the faulting address)"),
    sw(3, "context-switches", "cs", 1000, "context switches"),
    sw(4, "cpu-migrations", "", 1, "migrations of a task to another CPU"),
    sw(5, "minor-faults", "", 100, "minor page faults (`addr`: the faulting address)"),
    sw(6, "major-faults", "", 1, "major page faults, served from disk (`addr`: the faulting address)"),
    sw(7, "alignment-faults", "", 1, "alignment faults"),
    sw(8, "emulation-faults", "", 1, "emulated instructions"),
    sw(11, "cgroup-switches", "", 1, "context switches to a task of another cgroup"),
];

const fn sw(config: u32, name: &'static str, alias: &'static str, period: u64, about: &'static str) -> SoftwareEvent {
    SoftwareEvent { config, name, alias, default_period: period, about }
}

/// The software event named `name` (or its alias, or `faults`-style short names).
pub fn software_event(name: &str) -> Option<SoftwareEvent> {
    SOFTWARE_EVENTS.iter().copied().find(|e| e.name == name || (!e.alias.is_empty() && e.alias == name))
}

/// Why a probe name was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProbeError {
    #[error("unknown probe `{name}`{hint}")]
    Unknown { name: String, hint: String },
    #[error("probe `{name}` is not available on this kernel: {reason}")]
    Unsupported { name: String, reason: &'static str },
    #[error("unknown syscall `{syscall}` in probe `{name}`")]
    UnknownSyscall { name: String, syscall: String },
    #[error("bad probe `{name}`: {reason}")]
    Bad { name: String, reason: String },
    #[error("probe `{name}`: {reason}")]
    Unresolved { name: String, reason: String },
}

/// One line of the probe catalog (`wasmtap list` and suggestions).
pub struct ProbeDoc {
    pub name: &'static str,
    pub kind: Option<Kind>,
    pub about: &'static str,
}

const HEADER_FIELDS: &[(&str, &str)] = &[
    ("ts_ns", "u64"),
    ("pid", "u32"),
    ("tid", "u32"),
    ("uid", "u32"),
    ("gid", "u32"),
    ("cgroup_id", "u64"),
    ("comm", "char[16]"),
];

/// The probe classes, with bpftrace-style names; `NAME`, `N`, `BINARY`... are placeholders.
pub const PROBES: &[ProbeDoc] = &[
    doc("tracepoint:raw_syscalls:sys_enter", Some(Kind::SysEnter), "every syscall entry"),
    doc("tracepoint:raw_syscalls:sys_exit", Some(Kind::SysExit), "every syscall return"),
    doc("syscall:NAME:entry", Some(Kind::SysEnter), "entry of syscall NAME (filtered in the kernel)"),
    doc("syscall:NAME:exit", Some(Kind::SysExit), "return of syscall NAME (filtered in the kernel)"),
    doc("proc:exec", Some(Kind::Exec), "execve/execveat, with argv and return value"),
    doc("proc:fork", Some(Kind::Fork), "fork/clone of a process or thread"),
    doc("proc:exit", Some(Kind::Exit), "exit of a thread (flag: last of its process), with CPU time"),
    doc("file:open", Some(Kind::Open), "a completed open/openat/openat2/creat: path, flags, fd or errno, latency"),
    doc("tracepoint:CATEGORY:NAME", Some(Kind::Tracepoint), "any kernel tracepoint, fields as its tracefs format says"),
    doc(
        "btf:NAME",
        Some(Kind::Tracepoint),
        "typed tracepoint arguments: sched_switch/wakeup tgids, block rq identity, slab cache name",
    ),
    doc("uprobe:BINARY:FUNCTION", Some(Kind::User), "entry of a user function (also FUNCTION+OFF or 0xOFFSET)"),
    doc("uretprobe:BINARY:FUNCTION", Some(Kind::User), "return of a user function, with its return value"),
    doc("usdt:BINARY:PROVIDER:NAME", Some(Kind::User), "a USDT (sys/sdt.h) probe, with its arguments"),
    doc("profile:hz:N", Some(Kind::Sample), "sample every CPU N times a second, with stacks"),
    doc("software:EVENT:PERIOD", Some(Kind::Sample), "a perf software event, one sample every PERIOD"),
    doc("interval:ms:N", None, "every N milliseconds (also interval:s:N, interval:us:N)"),
    doc("begin", None, "once, after every probe is attached"),
    doc("end", None, "once, at the end, before the final report"),
];

const fn doc(name: &'static str, kind: Option<Kind>, about: &'static str) -> ProbeDoc {
    ProbeDoc { name, kind, about }
}

/// Fields of records of `kind`, after the common header.
pub fn kind_fields(kind: Kind) -> &'static [(&'static str, &'static str)] {
    match kind {
        Kind::SysEnter => &[("id", "s64"), ("args", "u64[6]")],
        Kind::SysExit => &[("id", "s64"), ("ret", "s64")],
        Kind::Exec => {
            &[("ppid", "u32"), ("ret", "s32"), ("argc", "u32"), ("args", "string[] (NUL-separated, up to 2048 bytes)")]
        }
        Kind::Fork => &[("child_pid", "u32"), ("child_tid", "u32"), ("flags.thread", "bool")],
        Kind::Exit => &[
            ("exit_code", "s32 (wait status)"),
            ("ppid", "u32"),
            ("start_ns", "u64"),
            ("cpu_ns", "u64 (the process's CPU time so far)"),
            ("user_ns", "u64"),
            ("sys_ns", "u64"),
            ("flags.group_dead", "bool"),
        ],
        Kind::Open => &[
            ("nr", "s32 (open, openat, openat2, creat)"),
            ("dfd", "s32"),
            ("flags", "u64"),
            ("mode", "u64"),
            ("ret", "s64 (fd or -errno)"),
            ("latency_ns", "u64"),
            ("path", "string (up to 512 bytes)"),
            ("base", "string[] (a relative path's directory, innermost first)"),
        ],
        Kind::Tracepoint => &[("event_id", "u32"), ("data", "the tracepoint's entry (fields below)")],
        Kind::User => &[
            ("ip", "u64"),
            ("args", "u64[12] (uprobe: arg0-arg5; uretprobe: retval; usdt: its arguments)"),
            ("stacks", "kernel and user frames, if asked"),
        ],
        Kind::Sample => &[
            ("event", "u32"),
            ("cpu", "u32"),
            ("addr", "u64 (page faults: the faulting address)"),
            ("ip", "u64"),
            ("stacks", "kernel and user frames, if asked"),
        ],
    }
}

/// Fields every record carries.
pub fn header_fields() -> &'static [(&'static str, &'static str)] {
    HEADER_FIELDS
}

/// A filter's syscall names as the numbers of the machine the host runs on (x86_64); the
/// error names the first name it has no syscall for.
pub fn syscall_numbers(names: &[String]) -> Result<BTreeSet<u32>, String> {
    names
        .iter()
        .map(|name| {
            wasmtap_abi::syscall_number(name)
                .ok_or_else(|| format!("no syscall named `{}` on x86_64", crate::wit::printable(name)))
        })
        .collect()
}

/// Parse a probe name.
pub fn parse(name: &str) -> Result<ProbeSpec, ProbeError> {
    let bad = |reason: String| ProbeError::Bad { name: name.into(), reason };
    match name {
        "tracepoint:raw_syscalls:sys_enter" | "syscall:*:entry" => {
            return Ok(ProbeSpec::Syscall { kind: Kind::SysEnter, nr: None })
        }
        "tracepoint:raw_syscalls:sys_exit" | "syscall:*:exit" => {
            return Ok(ProbeSpec::Syscall { kind: Kind::SysExit, nr: None })
        }
        "proc:exec" => return Ok(ProbeSpec::Proc(Kind::Exec)),
        "proc:fork" => return Ok(ProbeSpec::Proc(Kind::Fork)),
        "proc:exit" => return Ok(ProbeSpec::Proc(Kind::Exit)),
        "file:open" => return Ok(ProbeSpec::Proc(Kind::Open)),
        "begin" | "BEGIN" => return Ok(ProbeSpec::Begin),
        "end" | "END" => return Ok(ProbeSpec::End),
        _ => {}
    }
    let (class, rest) = name.split_once(':').unwrap_or((name, ""));
    match class {
        "syscall" => {
            let (sys, dir) = rest.rsplit_once(':').unwrap_or((rest, ""));
            let kind = match dir {
                "entry" => Kind::SysEnter,
                "exit" => Kind::SysExit,
                _ => return Err(bad("expected `syscall:NAME:entry` or `syscall:NAME:exit`".into())),
            };
            let nr = wasmtap_abi::syscall_number(sys)
                .ok_or_else(|| ProbeError::UnknownSyscall { name: name.into(), syscall: sys.to_string() })?;
            Ok(ProbeSpec::Syscall { kind, nr: Some(nr) })
        }
        "btf" => match rest {
            "" => Err(bad("expected `btf:NAME`".into())),
            event => Ok(ProbeSpec::Tracepoint { category: "btf".into(), name: event.into() }),
        },
        "tracepoint" | "t" => match rest.split_once(':') {
            Some((category, event)) if !category.is_empty() && !event.is_empty() && !event.contains(':') => {
                Ok(ProbeSpec::Tracepoint { category: category.into(), name: event.into() })
            }
            _ => Err(bad("expected `tracepoint:CATEGORY:NAME`".into())),
        },
        "uprobe" | "uretprobe" | "u" | "ur" => {
            let ret = class.starts_with("ur");
            let (binary, target) =
                rest.rsplit_once(':').ok_or_else(|| bad("expected `uprobe:BINARY:FUNCTION`".into()))?;
            if binary.is_empty() || target.is_empty() {
                return Err(bad("expected `uprobe:BINARY:FUNCTION`".into()));
            }
            let at = if let Some(hex) = target.strip_prefix("0x") {
                UprobeAt::Offset(u64::from_str_radix(hex, 16).map_err(|_| bad(format!("bad offset `{target}`")))?)
            } else if let Some((func, off)) = target.split_once('+') {
                let off = parse_int(off).ok_or_else(|| bad(format!("bad offset `{off}`")))?;
                UprobeAt::Symbol(func.into(), off)
            } else {
                UprobeAt::Symbol(target.into(), 0)
            };
            Ok(ProbeSpec::Uprobe { binary: binary.into(), at, ret })
        }
        "usdt" | "U" => {
            let parts: Vec<&str> = rest.rsplitn(3, ':').collect();
            match parts.as_slice() {
                [probe, provider, binary] if !binary.is_empty() && !provider.is_empty() && !probe.is_empty() => {
                    Ok(ProbeSpec::Usdt {
                        binary: binary.to_string(),
                        provider: Some(provider.to_string()),
                        name: probe.to_string(),
                    })
                }
                [probe, binary] if !binary.is_empty() && !probe.is_empty() => {
                    Ok(ProbeSpec::Usdt { binary: binary.to_string(), provider: None, name: probe.to_string() })
                }
                _ => Err(bad("expected `usdt:BINARY:PROVIDER:NAME`".into())),
            }
        }
        "profile" | "p" => {
            let (unit, n) = rest.split_once(':').ok_or_else(|| bad("expected `profile:hz:N`".into()))?;
            let n = parse_int(n).filter(|n| *n > 0).ok_or_else(|| bad(format!("bad rate `{n}`")))?;
            let hz = match unit {
                "hz" => n,
                "s" | "ms" | "us" => {
                    let period_ns = n.saturating_mul(unit_ns(unit));
                    (1_000_000_000 / period_ns.max(1)).max(1)
                }
                _ => return Err(bad(format!("unknown unit `{unit}` (hz, s, ms, us)"))),
            };
            if hz > 10_000 {
                return Err(bad(format!("{hz} Hz is more than the 10000 Hz allowed")));
            }
            Ok(ProbeSpec::Profile { hz })
        }
        "software" | "s" => {
            let (event, period) = rest.split_once(':').unwrap_or((rest, ""));
            let Some(ev) = software_event(event) else {
                let hint = nearest(event, SOFTWARE_EVENTS.iter().map(|e| e.name))
                    .map(|n| format!(" (did you mean `software:{n}`?)"))
                    .unwrap_or_default();
                return Err(ProbeError::Unknown { name: name.into(), hint });
            };
            let period = if period.is_empty() {
                ev.default_period
            } else {
                parse_int(period).filter(|p| *p > 0).ok_or_else(|| bad(format!("bad period `{period}`")))?
            };
            Ok(ProbeSpec::Software { event: ev, period })
        }
        "interval" | "i" => {
            let (unit, n) = rest.split_once(':').ok_or_else(|| bad("expected `interval:ms:N`".into()))?;
            if !matches!(unit, "s" | "ms" | "us" | "hz") {
                return Err(bad(format!("unknown unit `{unit}` (s, ms, us, hz)")));
            }
            let n = parse_int(n).filter(|n| *n > 0).ok_or_else(|| bad(format!("bad interval `{n}`")))?;
            let period_ns = if unit == "hz" { 1_000_000_000 / n } else { n.saturating_mul(unit_ns(unit)) };
            if period_ns < 1_000_000 {
                return Err(bad("intervals shorter than 1 ms are not supported".into()));
            }
            Ok(ProbeSpec::Interval { period_ns })
        }
        "kprobe" | "kretprobe" | "k" | "kr" => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "kprobes are not configured (CONFIG_KPROBES is off); use a tracepoint",
        }),
        "fentry" | "fexit" | "kfunc" | "kretfunc" | "f" | "fr" => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "the kernel refuses fentry/fexit programs (EPERM); use a tracepoint",
        }),
        "hardware" | "h" => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "no hardware performance counters on this machine; use `software:` events",
        }),
        "watchpoint" | "w" | "asyncwatchpoint" => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "hardware breakpoints are not available on this machine",
        }),
        _ => Err(ProbeError::Unknown { name: name.into(), hint: suggest(name) }),
    }
}

fn unit_ns(unit: &str) -> u64 {
    match unit {
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        _ => 1_000,
    }
}

fn parse_int(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn suggest(name: &str) -> String {
    match nearest(name, PROBES.iter().map(|p| p.name)) {
        Some(near) => format!(" (did you mean `{near}`?)"),
        None => " (`wasmtap list` prints the probes this kernel offers)".to_string(),
    }
}

/// The candidate closest to `name`, if it is close enough to be a typo.
pub fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (edit_distance(name, c), c))
        .min()
        .filter(|(d, _)| *d <= name.chars().count().max(4) / 3)
        .map(|(_, c)| c)
}

/// Levenshtein distance.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_syscall_names_become_this_machines_numbers_and_unknown_ones_are_named() {
        let names = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(syscall_numbers(&names(&["read", "openat", "read"])), Ok(BTreeSet::from([0, 257])));
        assert_eq!(syscall_numbers(&names(&["read", "opne"])), Err("no syscall named `opne` on x86_64".into()));
        assert_eq!(syscall_numbers(&names(&["110"])), Err("no syscall named `110` on x86_64".into()));
        let long = format!("{}\n", "x".repeat(100));
        assert_eq!(syscall_numbers(&[long]).unwrap_err(), format!("no syscall named `{}` on x86_64", "x".repeat(64)));
    }

    #[test]
    fn syscall_probe_names_the_syscall() {
        assert_eq!(parse("syscall:openat:entry").unwrap(), ProbeSpec::Syscall { kind: Kind::SysEnter, nr: Some(257) });
        let e = parse("syscall:opneat:entry").unwrap_err();
        assert_eq!(e.to_string(), "unknown syscall `opneat` in probe `syscall:opneat:entry`");
    }

    #[test]
    fn typo_suggests_the_near_probe() {
        let e = parse("tracepont:raw_syscalls:sys_enter").unwrap_err();
        assert!(e.to_string().contains("did you mean `tracepoint:raw_syscalls:sys_enter`"), "{e}");
        let e = parse("software:minor-fault:1").unwrap_err();
        assert!(e.to_string().contains("did you mean `software:minor-faults`"), "{e}");
    }

    #[test]
    fn unavailable_classes_say_why() {
        let e = parse("kprobe:do_sys_open").unwrap_err();
        assert!(e.to_string().contains("kprobes are not configured"), "{e}");
        let e = parse("fentry:vfs_read").unwrap_err();
        assert!(e.to_string().contains("refuses fentry"), "{e}");
        assert!(parse("hardware:cycles:1000").unwrap_err().to_string().contains("no hardware performance counters"));
    }

    #[test]
    fn every_class_parses() {
        assert_eq!(
            parse("tracepoint:signal:signal_generate").unwrap(),
            ProbeSpec::Tracepoint { category: "signal".into(), name: "signal_generate".into() }
        );
        assert_eq!(
            parse("uprobe:/lib/x86_64-linux-gnu/libc.so.6:malloc").unwrap(),
            ProbeSpec::Uprobe {
                binary: "/lib/x86_64-linux-gnu/libc.so.6".into(),
                at: UprobeAt::Symbol("malloc".into(), 0),
                ret: false
            }
        );
        assert_eq!(
            parse("uretprobe:libc:0x1f00").unwrap(),
            ProbeSpec::Uprobe { binary: "libc".into(), at: UprobeAt::Offset(0x1f00), ret: true }
        );
        assert_eq!(
            parse("usdt:/tmp/x:prov:tick").unwrap(),
            ProbeSpec::Usdt { binary: "/tmp/x".into(), provider: Some("prov".into()), name: "tick".into() }
        );
        assert_eq!(parse("profile:hz:99").unwrap(), ProbeSpec::Profile { hz: 99 });
        assert_eq!(parse("profile:ms:10").unwrap(), ProbeSpec::Profile { hz: 100 });
        let ProbeSpec::Software { event, period } = parse("software:minor-faults:1").unwrap() else { panic!() };
        assert_eq!((event.config, period), (5, 1));
        assert_eq!(parse("interval:s:1").unwrap(), ProbeSpec::Interval { period_ns: 1_000_000_000 });
        assert_eq!(parse("interval:ms:250").unwrap(), ProbeSpec::Interval { period_ns: 250_000_000 });
        assert_eq!(parse("begin").unwrap(), ProbeSpec::Begin);
        assert!(parse("interval:us:10").unwrap_err().to_string().contains("shorter than 1 ms"));
        assert!(parse("profile:hz:0").unwrap_err().to_string().contains("bad rate"));
    }
}

//! Probe names, what serves them, and what they carry (`wasmtap list`).

use wasmtap_abi::Kind;

/// A collector object in `bpf/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collector {
    /// `bpf/syscalls.bpf.c`
    Syscalls,
    /// `bpf/proc.bpf.c`
    Proc,
}

/// A probe resolved to the records that serve it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The name as the plugin wrote it.
    pub name: String,
    pub kind: Kind,
    /// `syscall:NAME:…` probes imply a syscall filter.
    pub syscall: Option<u32>,
}

impl Probe {
    /// The collector that emits this probe's records.
    pub fn collector(&self) -> Collector {
        collector_of(self.kind)
    }
}

/// The collector emitting records of `kind`.
pub fn collector_of(kind: Kind) -> Collector {
    match kind {
        Kind::SysEnter | Kind::SysExit => Collector::Syscalls,
        Kind::Exec | Kind::Fork | Kind::Exit => Collector::Proc,
    }
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
}

/// One line of `wasmtap list`.
pub struct ProbeDoc {
    pub name: &'static str,
    pub kind: Kind,
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

/// The probes the collectors serve, with aliases in bpftrace's naming.
pub const PROBES: &[ProbeDoc] = &[
    ProbeDoc { name: "tracepoint:raw_syscalls:sys_enter", kind: Kind::SysEnter, about: "every syscall entry" },
    ProbeDoc { name: "tracepoint:raw_syscalls:sys_exit", kind: Kind::SysExit, about: "every syscall return" },
    ProbeDoc {
        name: "syscall:NAME:entry",
        kind: Kind::SysEnter,
        about: "entry of syscall NAME (filtered in the kernel)",
    },
    ProbeDoc {
        name: "syscall:NAME:exit",
        kind: Kind::SysExit,
        about: "return of syscall NAME (filtered in the kernel)",
    },
    ProbeDoc { name: "proc:exec", kind: Kind::Exec, about: "execve/execveat, with argv and return value" },
    ProbeDoc { name: "proc:fork", kind: Kind::Fork, about: "fork/clone of a process or thread" },
    ProbeDoc { name: "proc:exit", kind: Kind::Exit, about: "exit of a thread (flag: last of its process)" },
];

/// Fields of records of `kind`, after the common header.
pub fn kind_fields(kind: Kind) -> &'static [(&'static str, &'static str)] {
    match kind {
        Kind::SysEnter => &[("id", "s64"), ("args", "u64[6]")],
        Kind::SysExit => &[("id", "s64"), ("ret", "s64")],
        Kind::Exec => {
            &[("ppid", "u32"), ("ret", "s32"), ("argc", "u32"), ("args", "string[] (NUL-separated, up to 2048 bytes)")]
        }
        Kind::Fork => &[("child_pid", "u32"), ("child_tid", "u32"), ("flags.thread", "bool")],
        Kind::Exit => {
            &[("exit_code", "s32 (wait status)"), ("ppid", "u32"), ("start_ns", "u64"), ("flags.group_dead", "bool")]
        }
    }
}

/// Fields every record carries.
pub fn header_fields() -> &'static [(&'static str, &'static str)] {
    HEADER_FIELDS
}

/// Resolve a probe name.
pub fn resolve(name: &str) -> Result<Probe, ProbeError> {
    let probe = |kind, syscall| Ok(Probe { name: name.to_string(), kind, syscall });
    match name {
        "tracepoint:raw_syscalls:sys_enter" | "syscall:*:entry" => return probe(Kind::SysEnter, None),
        "tracepoint:raw_syscalls:sys_exit" | "syscall:*:exit" => return probe(Kind::SysExit, None),
        "proc:exec" => return probe(Kind::Exec, None),
        "proc:fork" | "tracepoint:sched:sched_process_fork" => return probe(Kind::Fork, None),
        "proc:exit" | "tracepoint:sched:sched_process_exit" => return probe(Kind::Exit, None),
        _ => {}
    }
    let parts: Vec<&str> = name.split(':').collect();
    match parts.as_slice() {
        ["syscall", sys, dir @ ("entry" | "exit")] => {
            let nr = wasmtap_abi::syscall_number(sys)
                .ok_or_else(|| ProbeError::UnknownSyscall { name: name.into(), syscall: sys.to_string() })?;
            probe(if *dir == "entry" { Kind::SysEnter } else { Kind::SysExit }, Some(nr))
        }
        [p, ..] if matches!(*p, "kprobe" | "kretprobe") => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "kprobes are not configured (CONFIG_KPROBES is off); use a tracepoint",
        }),
        [p, ..] if matches!(*p, "fentry" | "fexit" | "kfunc" | "kretfunc") => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "the kernel refuses fentry/fexit programs (EPERM); use a tracepoint",
        }),
        [p, ..] if matches!(*p, "hardware") => Err(ProbeError::Unsupported {
            name: name.into(),
            reason: "no hardware performance counters on this machine",
        }),
        _ => Err(ProbeError::Unknown { name: name.into(), hint: suggest(name) }),
    }
}

fn suggest(name: &str) -> String {
    let best =
        PROBES.iter().map(|p| (edit_distance(name, p.name), p.name)).min().filter(|(d, _)| *d <= name.len().max(4) / 3);
    match best {
        Some((_, near)) => format!(" (did you mean `{near}`?)"),
        None => " (`wasmtap list` prints the probes this kernel offers)".to_string(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
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
    fn syscall_probe_names_the_syscall() {
        let p = resolve("syscall:openat:entry").unwrap();
        assert_eq!((p.kind, p.syscall), (Kind::SysEnter, Some(257)));
        let e = resolve("syscall:opneat:entry").unwrap_err();
        assert_eq!(e.to_string(), "unknown syscall `opneat` in probe `syscall:opneat:entry`");
    }

    #[test]
    fn typo_suggests_the_near_probe() {
        let e = resolve("tracepoint:raw_syscalls:sys_entr").unwrap_err();
        assert!(e.to_string().contains("did you mean `tracepoint:raw_syscalls:sys_enter`"), "{e}");
    }

    #[test]
    fn kprobe_is_unsupported_with_reason() {
        let e = resolve("kprobe:do_sys_open").unwrap_err();
        assert!(e.to_string().contains("kprobes are not configured"), "{e}");
    }
}

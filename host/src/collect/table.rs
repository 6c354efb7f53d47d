//! The probe table: every probe the plugins of a run subscribe to, resolved against
//! the system (tracefs formats, ELF symbols, USDT notes), with what the collectors are
//! told per probe: stacks to take and comparisons to apply in the kernel. A recording
//! stores the table, so a replay decodes and matches exactly what the live run saw.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use wasmtap_abi::Kind;

use super::counter_rows;
use super::elf;
use super::probes::{ProbeError, ProbeSpec, UprobeAt};
use super::tracefs::{self, Format};
use crate::accounting::CounterRow;

/// Stacks to take: bit 0 kernel, bit 1 user (`WT_STACK_*`).
pub const STACK_KERNEL: u8 = 1;
pub const STACK_USER: u8 = 2;
/// Comparisons run in the kernel per probe (`WT_PREDS_MAX`).
pub const KERNEL_PREDS_MAX: usize = 4;
/// Strings a probe's records carry at most (`WT_STR_MAX`).
pub const STRINGS_MAX: usize = wasmtap_abi::strings::MAX;
/// uprobe/USDT attachments per run (`WT_USER_SLOTS`).
pub const USER_SLOTS_MAX: usize = 256;

/// Comparison operators (`enum wt_op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Eq = 1,
    Ne = 2,
    Lt = 3,
    Le = 4,
    Gt = 5,
    Ge = 6,
    MaskAny = 7,
    MaskNone = 8,
}

/// `value OP constant` on `size` bytes at `off` (`struct wt_pred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pred {
    pub off: u16,
    pub size: u8,
    pub signed: bool,
    pub op: Op,
    pub value: u64,
}

impl Pred {
    /// The comparison on the value in `bytes` at `self.off + base`; false if out of bounds.
    pub fn holds(&self, bytes: &[u8], base: usize) -> bool {
        let off = base + self.off as usize;
        let Some(raw) = bytes.get(off..off + self.size as usize) else { return false };
        let mut buf = [0u8; 8];
        buf[..raw.len()].copy_from_slice(raw);
        let v = u64::from_le_bytes(buf);
        let shift = 64 - 8 * self.size as u32;
        // Compare as the field's type says: sign-extended, or as is.
        let (a, b) = if self.signed && shift < 64 {
            ((((v << shift) as i64) >> shift) as i128, self.value as i64 as i128)
        } else {
            (v as i128, self.value as i128)
        };
        match self.op {
            Op::Eq => a == b,
            Op::Ne => a != b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::MaskAny => v & self.value != 0,
            Op::MaskNone => v & self.value == 0,
        }
    }
}

/// A tracepoint to attach.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracepointEntry {
    pub format: Format,
    pub stacks: u8,
    /// Run in the kernel: offsets into the entry.
    pub preds: Vec<Pred>,
    /// Offsets of the pointer fields whose strings the records carry (`str()`), at most
    /// [`STRINGS_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strings: Vec<u16>,
}

/// How the collector computes one USDT argument (`struct wt_usdt_arg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsdtArg {
    /// 1 constant, 2 register, 3 memory at register + value.
    pub loc: u8,
    pub size: u8,
    pub signed: bool,
    pub reg_off: u16,
    pub value: i64,
}

/// One uprobe, uretprobe or USDT attachment; its index is the attach cookie.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserSlot {
    /// The probe as subscribed.
    pub probe: String,
    pub path: PathBuf,
    pub offset: u64,
    pub ret: bool,
    /// USDT argument specs; none for uprobes.
    pub usdt: Option<Vec<UsdtArg>>,
    /// File offset of the USDT semaphore.
    pub semaphore: Option<u64>,
    pub stacks: u8,
    /// Run in the kernel: offsets into the record.
    pub preds: Vec<Pred>,
    /// Indices in `args` of the pointers whose strings the records carry (`str()`), at
    /// most [`STRINGS_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strings: Vec<u8>,
}

/// Where a uprobe or USDT probe attaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserSite {
    pub path: PathBuf,
    pub offset: u64,
    /// USDT argument specs; none for uprobes.
    pub usdt: Option<Vec<UsdtArg>>,
    pub semaphore: Option<u64>,
    /// Replay: the slot (attach cookie) the recorded records of this site carry.
    pub recorded_slot: Option<u32>,
}

/// A perf software event to open on every CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerfEntry {
    /// `PERF_COUNT_SW_*`.
    pub event: u32,
    pub name: String,
    /// Samples per second (`profile:hz:N`), or none for one sample per `period` events.
    pub freq: Option<u64>,
    pub period: u64,
    pub stacks: u8,
    pub preds: Vec<Pred>,
}

/// Everything the collectors need to know per probe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTable {
    pub tracepoints: Vec<TracepointEntry>,
    pub user: Vec<UserSlot>,
    pub perf: Vec<PerfEntry>,
    /// Kernel comparisons per syscall: key `nr` for entries (offsets into `args[6]`),
    /// `512 + nr` for exits (offset 0: the return value).
    pub syscall_preds: BTreeMap<u32, Vec<Pred>>,
    /// Argument names of the syscalls subscribed by name, from their tracefs formats.
    pub syscall_args: BTreeMap<u32, Vec<String>>,
}

impl ProbeTable {
    /// The kernel counter row a streamed record was counted in, as the collectors pick
    /// it: syscalls by id, tracepoints by their slot here (found by event id), user
    /// probes by the slot the record carries, samples by the slot of their perf event;
    /// none if the record is not one this table's collectors write.
    pub fn row_of(&self, rec: &wasmtap_abi::Record<'_>) -> Option<CounterRow> {
        use wasmtap_abi::{sample, sys_enter, tracepoint, user};
        let kind = rec.kind()?;
        Some(match kind {
            Kind::SysEnter | Kind::SysExit => {
                // The id sits at the same offset in entries and exits.
                let id = usize::try_from(rec.i64_at(sys_enter::ID)?).unwrap_or(usize::MAX);
                let row = if kind == Kind::SysEnter { CounterRow::SysEnter } else { CounterRow::SysExit };
                CounterRow::bounded(kind, id, counter_rows::NR_SYSCALLS, row)
            }
            Kind::Exec | Kind::Fork | Kind::Exit | Kind::Open => CounterRow::Kind(kind),
            Kind::Tracepoint => {
                let id = rec.u32_at(tracepoint::EVENT_ID)?;
                // The collector's config of an event id is the last one written.
                let slot = self.tracepoints.iter().rposition(|t| t.format.id == id)?;
                CounterRow::bounded(kind, slot, counter_rows::TP_SLOTS, CounterRow::Tracepoint)
            }
            Kind::User => {
                let slot = rec.u32_at(user::PROBE)? as usize;
                if slot >= self.user.len() {
                    return None;
                }
                CounterRow::bounded(kind, slot, counter_rows::USER_SLOTS, CounterRow::User)
            }
            Kind::Sample => {
                let event = rec.u32_at(sample::EVENT)?;
                let slot = self.perf.iter().rposition(|p| p.event == event)?;
                CounterRow::bounded(kind, slot, counter_rows::PERF_EVENTS, CounterRow::Perf)
            }
        })
    }

    /// A row as the probe a user would write: `syscall:getppid:entry`,
    /// `tracepoint:sched:sched_switch`, `uprobe:/bin/bash:readline`, `profile:hz:99`,
    /// `proc:exec`; the row's own name if the table does not know it.
    pub fn row_name(&self, row: CounterRow) -> String {
        let syscall =
            |nr: u32, end: &str| wasmtap_abi::syscall_name(i64::from(nr)).map(|name| format!("syscall:{name}:{end}"));
        let named = match row {
            CounterRow::Kind(Kind::SysEnter) => Some("tracepoint:raw_syscalls:sys_enter".to_string()),
            CounterRow::Kind(Kind::SysExit) => Some("tracepoint:raw_syscalls:sys_exit".to_string()),
            CounterRow::Kind(k @ (Kind::Exec | Kind::Fork | Kind::Exit)) => {
                Some(format!("proc:{}", crate::accounting::kind_name(k)))
            }
            CounterRow::Kind(Kind::Open) => Some("file:open".to_string()),
            CounterRow::Kind(_) => None,
            CounterRow::SysEnter(nr) => syscall(nr, "entry"),
            CounterRow::SysExit(nr) => syscall(nr, "exit"),
            CounterRow::Tracepoint(slot) => {
                self.tracepoints.get(slot as usize).map(|t| match t.format.category.as_str() {
                    "btf" => format!("btf:{}", t.format.name),
                    cat => format!("tracepoint:{cat}:{}", t.format.name),
                })
            }
            CounterRow::User(slot) => self.user.get(slot as usize).map(|u| u.probe.clone()),
            CounterRow::Perf(slot) => self.perf.get(slot as usize).map(|p| match p.freq {
                Some(hz) => format!("profile:hz:{hz}"),
                None => format!("software:{}:{}", p.name, p.period),
            }),
        };
        named.unwrap_or_else(|| row.to_string())
    }

    /// True if records may carry stacks or user addresses, which plugins symbolize.
    pub fn has_addresses(&self) -> bool {
        self.has_user_addresses()
            || self.tracepoints.iter().any(|t| t.stacks != 0)
            || self.perf.iter().any(|p| p.stacks != 0)
    }

    /// True if records may carry kernel stacks.
    pub fn has_kernel_stacks(&self) -> bool {
        self.tracepoints.iter().any(|t| t.stacks & STACK_KERNEL != 0)
            || self.perf.iter().any(|p| p.stacks & STACK_KERNEL != 0)
            || self.user.iter().any(|u| u.stacks & STACK_KERNEL != 0)
    }

    /// True if records may carry user addresses (user probes, user stacks), whose
    /// processes' memory maps the symbolizer must see while they run.
    pub fn has_user_addresses(&self) -> bool {
        !self.user.is_empty()
            || self.tracepoints.iter().any(|t| t.stacks & STACK_USER != 0)
            || self.perf.iter().any(|p| p.stacks & STACK_USER != 0)
    }
}

/// Syscall slots in `syscall_preds` (`WT_NR_SYSCALLS`).
pub const NR_SYSCALLS: u32 = 512;

/// Where probes are looked up: the live system, or a recording's table.
pub enum ProbeLookup<'a> {
    Live,
    Recorded(&'a ProbeTable),
    /// The live system, with tracepoint formats from `ask` (a tenant's executor asks the
    /// collectors' side: tracefs is root's).
    Asked(&'a dyn Fn(&str, &str) -> Result<Format, String>),
}

impl ProbeLookup<'_> {
    /// A tracepoint's format.
    pub fn tracepoint(&self, category: &str, name: &str) -> Result<Format, String> {
        if category == "btf" {
            return btf_format(name);
        }
        match self {
            ProbeLookup::Live => {
                tracefs::ensure_mounted();
                tracefs::lookup(std::path::Path::new(tracefs::ROOT), category, name).map_err(|e| e.to_string())
            }
            ProbeLookup::Recorded(t) => t
                .tracepoints
                .iter()
                .find(|e| e.format.category == category && e.format.name == name)
                .map(|e| e.format.clone())
                .ok_or_else(|| format!("tracepoint `{category}:{name}` is not in the recording")),
            ProbeLookup::Asked(ask) => ask(category, name),
        }
    }

    /// Where a uprobe or USDT probe attaches. From a recording, the sites the live run
    /// attached, with the slots its records carry; one per (file, offset), since two
    /// subscriptions to one probe recorded every event twice.
    pub fn user_sites(&self, probe: &str, spec: &ProbeSpec) -> Result<Vec<UserSite>, String> {
        if let ProbeLookup::Recorded(t) = self {
            let mut sites: Vec<UserSite> = Vec::new();
            for (slot, s) in t.user.iter().enumerate().filter(|(_, s)| s.probe == probe) {
                if !sites.iter().any(|u| u.path == s.path && u.offset == s.offset) {
                    sites.push(UserSite {
                        path: s.path.clone(),
                        offset: s.offset,
                        usdt: s.usdt.clone(),
                        semaphore: s.semaphore,
                        recorded_slot: Some(slot as u32),
                    });
                }
            }
            if sites.is_empty() {
                return Err(format!("probe `{probe}` is not in the recording"));
            }
            return Ok(sites);
        }
        match spec {
            ProbeSpec::Uprobe { binary, at, .. } => {
                let path = elf::find_binary(binary).map_err(|e| e.to_string())?;
                let offset = match at {
                    UprobeAt::Offset(off) => *off,
                    UprobeAt::Symbol(name, off) => elf::function_offset(&path, name).map_err(|e| e.to_string())? + off,
                };
                Ok(vec![UserSite { path, offset, usdt: None, semaphore: None, recorded_slot: None }])
            }
            ProbeSpec::Usdt { binary, provider, name } => {
                let path = elf::find_binary(binary).map_err(|e| e.to_string())?;
                let all = elf::usdt_probes(&path).map_err(|e| e.to_string())?;
                let found: Vec<_> = all
                    .iter()
                    .filter(|p| p.name == *name && provider.as_ref().is_none_or(|pr| *pr == p.provider))
                    .collect();
                if found.is_empty() {
                    let have: Vec<String> = all.iter().map(|p| format!("{}:{}", p.provider, p.name)).collect();
                    let have = if have.is_empty() { "no USDT probes".to_string() } else { have.join(", ") };
                    return Err(format!("no USDT probe `{name}` in {} (it has: {have})", path.display()));
                }
                let providers: std::collections::BTreeSet<&str> = found.iter().map(|p| p.provider.as_str()).collect();
                if providers.len() > 1 {
                    return Err(format!("`{name}` is a probe of several providers in {}; name one", path.display()));
                }
                Ok(found
                    .into_iter()
                    .map(|p| UserSite {
                        path: path.clone(),
                        offset: p.pc_offset,
                        usdt: Some(p.args.iter().map(usdt_arg).collect()),
                        semaphore: p.semaphore_offset,
                        recorded_slot: None,
                    })
                    .collect())
            }
            _ => Err("not a user-space probe".into()),
        }
    }

    /// Argument names of a syscall (from `syscalls:sys_enter_NAME`), `arg0`... if unknown.
    pub fn syscall_args(&self, nr: u32) -> Vec<String> {
        let generic = || (0..6).map(|i| format!("arg{i}")).collect();
        match self {
            ProbeLookup::Recorded(t) => t.syscall_args.get(&nr).cloned().unwrap_or_else(generic),
            ProbeLookup::Live | ProbeLookup::Asked(_) => {
                let Some(name) = wasmtap_abi::syscall_name(nr as i64) else { return generic() };
                let tracepoint = format!("sys_enter_{name}");
                // Read directly, live: a syscall without a tracepoint needs no nearest names.
                let format = match self {
                    ProbeLookup::Asked(ask) => ask("syscalls", &tracepoint),
                    _ => {
                        tracefs::ensure_mounted();
                        let root = std::path::Path::new(tracefs::ROOT);
                        tracefs::read_format(root, "syscalls", &tracepoint).map_err(|e| e.to_string())
                    }
                };
                match format {
                    Ok(f) => f
                        .fields
                        .iter()
                        .filter(|f| !f.common && f.name != "__syscall_nr")
                        .map(|f| f.name.clone())
                        .collect(),
                    Err(_) => generic(),
                }
            }
        }
    }
}

/// The BTF-typed events (`btf:NAME`): their record layouts, as the collector writes them
/// (`struct wt_btf_*` in bpf/tracepoint.bpf.c), in the tracefs format language.
pub const BTF_EVENTS: &[(&str, u32, &str, &str)] = &[
    (
        "sched_switch",
        0x10001,
        "a context switch, with the tgid of both tasks",
        "char prev_comm[16]:8:16:0 int prev_pid:24:4:1 int prev_tgid:28:4:1 int prev_prio:32:4:1 \
         unsigned int preempt:36:4:0 long prev_state:40:8:1 char next_comm[16]:48:16:0 int next_pid:64:4:1 \
         int next_tgid:68:4:1 int next_prio:72:4:1",
    ),
    (
        "sched_wakeup",
        0x10002,
        "a task woken up, with its tgid",
        "char comm[16]:8:16:0 int pid:24:4:1 int tgid:28:4:1 int prio:32:4:1 int target_cpu:36:4:1",
    ),
    (
        "block_rq_issue",
        0x10003,
        "a block request sent to the device; `rq` identifies it until completion",
        "u64 rq:8:8:0 unsigned int dev:16:4:0 unsigned int nr_sector:20:4:0 u64 sector:24:8:0 \
         unsigned int cmd_flags:32:4:0 int error:36:4:1 unsigned int bytes:40:4:0",
    ),
    (
        "block_rq_complete",
        0x10004,
        "a block request completed; `rq` is the pointer seen at issue",
        "u64 rq:8:8:0 unsigned int dev:16:4:0 unsigned int nr_sector:20:4:0 u64 sector:24:8:0 \
         unsigned int cmd_flags:32:4:0 int error:36:4:1 unsigned int bytes:40:4:0",
    ),
    (
        "kmem_cache_alloc",
        0x10005,
        "a slab allocation, with the cache's name",
        "unsigned long call_site:8:8:0 u64 ptr:16:8:0 char name[32]:24:32:0 unsigned int object_size:56:4:0 \
         unsigned int size:60:4:0 unsigned int gfp_flags:64:4:0 int node:68:4:1",
    ),
];

/// The format of a BTF-typed event.
pub fn btf_format(name: &str) -> Result<Format, String> {
    let Some((_, id, _, fields)) = BTF_EVENTS.iter().find(|(n, ..)| *n == name) else {
        let names: Vec<&str> = BTF_EVENTS.iter().map(|(n, ..)| *n).collect();
        return Err(format!("no BTF-typed event `{name}` (there are: {})", names.join(", ")));
    };
    let mut text = format!(
        "name: {name}\nID: {id}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    );
    // Fields are `TYPE NAME:OFFSET:SIZE:SIGNED`, separated by spaces; TYPE may have spaces.
    let words: Vec<&str> = fields.split_whitespace().collect();
    let mut decl = Vec::new();
    for w in words {
        match w.split_once(':') {
            Some((name, rest)) => {
                let parts: Vec<&str> = rest.split(':').collect();
                decl.push(name);
                text.push_str(&format!(
                    "\tfield:{};\toffset:{};\tsize:{};\tsigned:{};\n",
                    decl.join(" "),
                    parts[0],
                    parts[1],
                    parts[2]
                ));
                decl.clear();
            }
            None => decl.push(w),
        }
    }
    text.push_str("\nprint fmt: \"\"\n");
    tracefs::parse_format("btf", name, &text).map_err(|e| e.to_string())
}

fn usdt_arg(a: &elf::UsdtArg) -> UsdtArg {
    let (loc, reg_off, value) = match a.loc {
        elf::UsdtLoc::Const(v) => (1, 0, v),
        elf::UsdtLoc::Reg { regs_off } => (2, regs_off, 0),
        elf::UsdtLoc::Mem { regs_off, disp } => (3, regs_off, disp),
    };
    UsdtArg { loc, size: a.size, signed: a.signed, reg_off, value }
}

/// Wraps `e` as the probe error a plugin's subscription gets.
pub fn probe_error(probe: &str, reason: String) -> ProbeError {
    ProbeError::Unresolved { name: probe.into(), reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::tracefs::FieldKind;

    #[test]
    fn btf_event_layouts_parse_and_match_the_collector() {
        let f = btf_format("sched_switch").unwrap();
        assert_eq!(f.id, 0x10001);
        assert_eq!(f.fixed_size(), 76);
        let tgid = f.field("next_tgid").unwrap();
        assert_eq!((tgid.offset, tgid.size, tgid.kind), (68, 4, FieldKind::Signed));
        assert_eq!(f.field("prev_comm").unwrap().kind, FieldKind::Text);
        for (name, ..) in BTF_EVENTS {
            btf_format(name).unwrap();
        }
        assert!(btf_format("nope").unwrap_err().contains("sched_switch"));
    }

    /// A table with two tracepoints, two user slots and two perf events.
    fn table() -> ProbeTable {
        let tp = |category: &str, name: &str, id| {
            let mut format = btf_format("sched_switch").unwrap();
            (format.category, format.name, format.id) = (category.into(), name.into(), id);
            TracepointEntry { format, stacks: 0, preds: Vec::new(), strings: Vec::new() }
        };
        let user = |probe: &str| UserSlot {
            probe: probe.into(),
            path: "/bin/bash".into(),
            offset: 0x1000,
            ret: false,
            usdt: None,
            semaphore: None,
            stacks: 0,
            preds: Vec::new(),
            strings: Vec::new(),
        };
        let perf = |event, name: &str, freq, period| PerfEntry {
            event,
            name: name.into(),
            freq,
            period,
            stacks: 0,
            preds: Vec::new(),
        };
        ProbeTable {
            tracepoints: vec![tp("sched", "sched_switch", 316), tp("btf", "sched_wakeup", 0x10002)],
            user: vec![user("uprobe:/bin/bash:readline"), user("uretprobe:/bin/bash:readline")],
            perf: vec![perf(2, "page-faults", None, 100), perf(0, "cpu-clock", Some(99), 0)],
            ..ProbeTable::default()
        }
    }

    /// A record of `kind` and `size` bytes with `value` (4 or 8 bytes) at `off`.
    fn record(kind: Kind, size: usize, off: usize, value: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; size];
        b[0..2].copy_from_slice(&(kind as u16).to_le_bytes());
        b[2..4].copy_from_slice(&(size as u16).to_le_bytes());
        b[off..off + value.len()].copy_from_slice(value);
        b
    }

    #[test]
    fn records_are_counted_in_the_row_of_their_probe() {
        use wasmtap_abi::{exec, sample, sys_enter, sys_exit, tracepoint, user, Record};
        let t = table();
        let row = |b: Vec<u8>| t.row_of(&Record::new(&b));
        let sys = |kind, size, id: i64| row(record(kind, size, sys_enter::ID, &id.to_le_bytes()));
        assert_eq!(sys(Kind::SysEnter, sys_enter::SIZE, 110), Some(CounterRow::SysEnter(110)));
        assert_eq!(sys(Kind::SysExit, sys_exit::SIZE, 0), Some(CounterRow::SysExit(0)));
        assert_eq!(sys(Kind::SysEnter, sys_enter::SIZE, 512), Some(CounterRow::Kind(Kind::SysEnter)));
        assert_eq!(sys(Kind::SysExit, sys_exit::SIZE, -1), Some(CounterRow::Kind(Kind::SysExit)));
        assert_eq!(row(record(Kind::Exec, exec::ARGS, 0, &[])), Some(CounterRow::Kind(Kind::Exec)));
        let tp =
            |id: u32| row(record(Kind::Tracepoint, tracepoint::DATA + 80, tracepoint::EVENT_ID, &id.to_le_bytes()));
        assert_eq!(tp(316), Some(CounterRow::Tracepoint(0)));
        assert_eq!(tp(0x10002), Some(CounterRow::Tracepoint(1)));
        assert_eq!(tp(317), None, "not a tracepoint of this table");
        let probe = |slot: u32| row(record(Kind::User, user::SIZE, user::PROBE, &slot.to_le_bytes()));
        assert_eq!(probe(1), Some(CounterRow::User(1)));
        assert_eq!(probe(2), None);
        let sample = |event: u32| row(record(Kind::Sample, sample::SIZE, sample::EVENT, &event.to_le_bytes()));
        assert_eq!(sample(0), Some(CounterRow::Perf(1)));
        assert_eq!(sample(2), Some(CounterRow::Perf(0)));
        assert_eq!(sample(3), None);
        assert_eq!(row(vec![0u8; 8]), None, "too short for a header");
    }

    #[test]
    fn rows_are_named_as_probes_are_written() {
        let t = table();
        let names: Vec<String> = [
            CounterRow::SysEnter(110),
            CounterRow::SysExit(110),
            CounterRow::SysEnter(511),
            CounterRow::Kind(Kind::SysEnter),
            CounterRow::Kind(Kind::Exec),
            CounterRow::Kind(Kind::Fork),
            CounterRow::Kind(Kind::Exit),
            CounterRow::Tracepoint(0),
            CounterRow::Tracepoint(1),
            CounterRow::Tracepoint(2),
            CounterRow::User(1),
            CounterRow::Perf(0),
            CounterRow::Perf(1),
            CounterRow::Kind(Kind::Sample),
        ]
        .into_iter()
        .map(|r| t.row_name(r))
        .collect();
        assert_eq!(
            names,
            [
                "syscall:getppid:entry",
                "syscall:getppid:exit",
                "sys_enter:511",
                "tracepoint:raw_syscalls:sys_enter",
                "proc:exec",
                "proc:fork",
                "proc:exit",
                "tracepoint:sched:sched_switch",
                "btf:sched_wakeup",
                "tracepoint:2",
                "uretprobe:/bin/bash:readline",
                "software:page-faults:100",
                "profile:hz:99",
                "sample",
            ]
        );
    }

    #[test]
    fn predicates_compare_with_the_fields_signedness() {
        let bytes = (-5i32).to_le_bytes();
        let p = |op, value: i64, signed| Pred { off: 0, size: 4, signed, op, value: value as u64 };
        assert!(p(Op::Lt, 0, true).holds(&bytes, 0));
        assert!(!p(Op::Lt, 0, false).holds(&bytes, 0));
        assert!(p(Op::Eq, -5, true).holds(&bytes, 0));
        assert!(p(Op::MaskAny, 1, false).holds(&bytes, 0));
        assert!(p(Op::MaskNone, 4, false).holds(&bytes, 0), "-5 is ...11111011: bit 2 is clear");
        assert!(!p(Op::Eq, -5, true).holds(&bytes, 1), "out of bounds never holds");
        let big = 5000u64.to_le_bytes();
        let gt = Pred { off: 0, size: 8, signed: false, op: Op::Gt, value: 4096 };
        assert!(gt.holds(&big, 0));
    }
}

use super::*;
use crate::collect::table::ProbeTable;
use types::{AggSource, AggValue, Correlation, Filter, KernelAggregation, KernelFunction, StartEvent, Value};

fn filter() -> Filter {
    Filter::default()
}

fn agg(probe: &str, keys: Vec<AggSource>, function: KernelFunction, value: AggSource) -> KernelAggregation {
    KernelAggregation { name: "a".into(), probe: probe.into(), filter: filter(), keys, function, value, start: None }
}

/// A syscall record: `exit` ones carry `ret` in `arg`.
fn sys(exit: bool, ts: u64, tid: u32, comm: &str, id: i64, arg: i64) -> Vec<u8> {
    let size = if exit { 72 } else { 112 };
    let mut b = vec![0u8; size];
    b[0..2].copy_from_slice(&(if exit { 2u16 } else { 1u16 }).to_le_bytes());
    b[2..4].copy_from_slice(&(size as u16).to_le_bytes());
    b[8..16].copy_from_slice(&ts.to_le_bytes());
    b[16..20].copy_from_slice(&(tid / 10).to_le_bytes());
    b[20..24].copy_from_slice(&tid.to_le_bytes());
    b[40..40 + comm.len()].copy_from_slice(comm.as_bytes());
    b[56..64].copy_from_slice(&id.to_le_bytes());
    b[64..72].copy_from_slice(&arg.to_le_bytes());
    b
}

fn run(specs: &[Spec], records: &[Vec<u8>]) -> Aggregations {
    let mut e = Evaluator::new(specs, TaskFilter::default());
    for r in records {
        e.offer(&Record::new(r));
    }
    Aggregations { specs: specs.to_vec(), backend: Backend::Host(Box::new(e)) }
}

fn scalars(entries: &[types::AggEntry]) -> Vec<(String, i64)> {
    let key = |k: &[Value]| {
        k.iter()
            .map(|v| match v {
                Value::Int(i) => i.to_string(),
                Value::Text(s) => s.clone(),
                Value::Stack(_) => "stack".into(),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    entries
        .iter()
        .map(|e| match &e.value {
            AggValue::Scalar(v) => (key(&e.key), *v),
            other => panic!("not a scalar: {other:?}"),
        })
        .collect()
}

#[test]
fn counts_by_comm_and_syscall_like_the_kernel() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let by_comm = compile(
        &agg("tracepoint:raw_syscalls:sys_enter", vec![AggSource::Comm], KernelFunction::Count, AggSource::Pid),
        0,
        &source,
    )
    .unwrap();
    let by_nr = compile(
        &agg("tracepoint:raw_syscalls:sys_enter", vec![AggSource::Syscall], KernelFunction::Count, AggSource::Pid),
        1,
        &source,
    )
    .unwrap();
    let recs = vec![
        sys(false, 1, 11, "cat", 0, 0),
        sys(false, 2, 11, "cat", 1, 0),
        sys(false, 3, 22, "sh", 0, 0),
        sys(true, 4, 22, "sh", 0, 5),
    ];
    let mut store = run(&[by_comm, by_nr], &recs);
    let got = scalars(&store.read(0, false).unwrap());
    assert_eq!(got, vec![("cat".to_string(), 2), ("sh".to_string(), 1)]);
    let got = scalars(&store.read(1, true).unwrap());
    assert_eq!(got, vec![("0".to_string(), 2), ("1".to_string(), 1)]);
    assert!(store.read(1, false).unwrap().is_empty(), "a reset starts from zero");
}

#[test]
fn sums_filtered_by_syscall_and_comparison() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let mut wire =
        agg("syscall:write:entry", vec![AggSource::Pid], KernelFunction::Sum, AggSource::Field("arg2".into()));
    wire.filter.predicates.push(types::Predicate { field: "arg2".into(), op: types::CmpOp::Gt, value: 100 });
    let spec = compile(&wire, 0, &source).unwrap();
    let recs = vec![sys(false, 1, 11, "w", 1, 0), sys(false, 2, 11, "w", 0, 0)];
    // arg2 sits in args[2]: patch the records' third argument.
    let mut recs = recs;
    recs[0][80..88].copy_from_slice(&4096u64.to_le_bytes());
    recs[1][80..88].copy_from_slice(&4096u64.to_le_bytes());
    let mut small = sys(false, 3, 11, "w", 1, 0);
    small[80..88].copy_from_slice(&10u64.to_le_bytes());
    recs.push(small);
    let mut store = run(&[spec], &recs);
    assert_eq!(scalars(&store.read(0, false).unwrap()), vec![("1".to_string(), 4096)]);
}

/// The aggregations whose starts the exit program removes from the map of starts.
fn tid_keyed_aggs_of(spec: &Spec) -> Vec<u32> {
    let sites = sites(std::slice::from_ref(spec)).unwrap();
    crate::collect::agg_maps::tid_keyed_aggs(&sites)
}

/// syslatency's aggregation: each syscall timed from entry to exit on its thread, a log2
/// histogram by syscall; `start` filters the entries.
fn syscall_latency(start: Filter) -> KernelAggregation {
    let mut wire = agg(
        "tracepoint:raw_syscalls:sys_exit",
        vec![AggSource::Syscall],
        KernelFunction::Log2Histogram,
        AggSource::Latency,
    );
    wire.start = Some(StartEvent {
        probe: "tracepoint:raw_syscalls:sys_enter".into(),
        filter: start,
        key: Correlation::Tid,
        end_key: Correlation::Tid,
        more: Vec::new(),
    });
    wire
}

#[test]
fn latency_pairs_entry_and_exit_of_one_thread_into_log2_buckets() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let wire = syscall_latency(filter());
    let spec = compile(&wire, 0, &source).unwrap();
    assert_eq!(spec.actions.len(), 2);
    // Started and ended by the thread: its start is kept with it in the kernel, and the
    // buckets have a slot per syscall.
    assert!(spec.actions.iter().all(|(_, a)| a.kept == Kept::Current), "{:?}", spec.actions);
    assert_eq!(spec.slots, Slots::SyscallBuckets);
    assert!(tid_keyed_aggs_of(&spec).is_empty(), "the thread's exit takes its starts");
    assert!(compile(&wire, TASK_STARTS, &source).unwrap().actions.iter().all(|(_, a)| a.kept != Kept::Current));
    assert_eq!(tid_keyed_aggs_of(&compile(&wire, TASK_STARTS, &source).unwrap()), [TASK_STARTS]);
    let recs = vec![
        sys(false, 1_000, 11, "a", 0, 0),
        sys(false, 1_100, 22, "b", 0, 0),
        sys(true, 2_000, 11, "a", 0, 0), // 1000 ns: [512, 1024)
        sys(true, 1_105, 22, "b", 0, 0), // 5 ns: [4, 8)
        sys(true, 9_000, 33, "c", 0, 0), // no start: ignored
        sys(true, 9_500, 11, "a", 0, 0), // its start was used up
    ];
    let mut store = run(&[spec], &recs);
    let entries = store.read(0, false).unwrap();
    assert_eq!(entries.len(), 1);
    let AggValue::Histogram(h) = &entries[0].value else { panic!() };
    assert_eq!(h.sum, 1005);
    let used: Vec<(i64, i64, u64)> =
        h.buckets.iter().filter(|b| b.count > 0).map(|b| (b.low, b.high, b.count)).collect();
    assert_eq!(used, vec![(4, 8, 1), (512, 1024, 1)]);
    // Every bucket between the two is there, empty.
    assert_eq!(h.buckets.len(), 8);
    assert!(h.buckets.windows(2).all(|w| w[0].high == w[1].low));
}

#[test]
fn a_syscall_timed_alone_from_entry_to_exit_goes_to_the_per_cpu_record_and_no_other_shape_does() {
    use crate::collect::agg_maps::sys_interval;
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let sites_of = |specs: &[Spec]| sites(specs).unwrap();
    let only_read = Filter { syscalls: vec!["read".into()], ..filter() };
    // syslatency's shape, with or without a syscall filter, under any id with a task slot.
    for (id, f) in [(0, filter()), (3, only_read.clone()), (TASK_STARTS - 1, filter())] {
        let spec = compile(&syscall_latency(f), id, &source).unwrap();
        assert_eq!(sys_interval(&sites_of(&[spec])), Some(id));
    }
    // Its start kept in the map of starts (no task slot left): the general path.
    let spec = compile(&syscall_latency(filter()), TASK_STARTS, &source).unwrap();
    assert_eq!(sys_interval(&sites_of(&[spec])), None);
    // A condition on the entry's arguments: the general path, which reads them.
    let mut cond = filter();
    cond.predicates.push(types::Predicate { field: "arg2".into(), op: types::CmpOp::Gt, value: 100 });
    let spec = compile(&syscall_latency(cond), 0, &source).unwrap();
    assert_eq!(sys_interval(&sites_of(&[spec])), None);
    // Another aggregation on either syscall site: one program does both, the general way.
    let timed = compile(&syscall_latency(filter()), 0, &source).unwrap();
    for probe in ["tracepoint:raw_syscalls:sys_enter", "tracepoint:raw_syscalls:sys_exit"] {
        let count = compile(&agg(probe, vec![AggSource::Comm], KernelFunction::Count, AggSource::Pid), 1, &source);
        assert_eq!(sys_interval(&sites_of(&[timed.clone(), count.unwrap()])), None, "{probe}");
    }
    // Two intervals timed on the same syscalls: the general path.
    let other = compile(&syscall_latency(only_read), 1, &source).unwrap();
    assert_eq!(sys_interval(&sites_of(&[timed.clone(), other])), None);
    // A count alone: no interval at all.
    let count = compile(
        &agg("tracepoint:raw_syscalls:sys_enter", vec![AggSource::Syscall], KernelFunction::Count, AggSource::Pid),
        0,
        &source,
    );
    assert_eq!(sys_interval(&sites_of(&[count.unwrap()])), None);
}

#[test]
fn more_starts_open_the_same_intervals_each_under_its_own_filter() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let mut wire = agg("tracepoint:raw_syscalls:sys_exit", vec![], KernelFunction::Log2Histogram, AggSource::Latency);
    let only = |name: &str| Filter { syscalls: vec![name.into()], ..filter() };
    wire.start = Some(StartEvent {
        probe: "tracepoint:raw_syscalls:sys_enter".into(),
        filter: only("read"),
        key: Correlation::Tid,
        end_key: Correlation::Tid,
        more: vec![types::MoreStart {
            probe: "tracepoint:raw_syscalls:sys_enter".into(),
            filter: only("write"),
            key: Correlation::Tid,
        }],
    });
    let spec = compile(&wire, 0, &source).unwrap();
    let roles: Vec<Role> = spec.actions.iter().map(|(_, a)| a.role).collect();
    assert_eq!(roles, [Role::Start, Role::Start, Role::End]);
    let recs = vec![
        sys(false, 1_000, 11, "a", 0, 0), // read: the first start
        sys(true, 1_500, 11, "a", 0, 0),  // 500 ns
        sys(false, 2_000, 22, "b", 1, 0), // write: the other start
        sys(true, 2_100, 22, "b", 1, 0),  // 100 ns
        sys(false, 3_000, 33, "c", 2, 0), // neither
        sys(true, 3_050, 33, "c", 2, 0),  // no start: ignored
    ];
    let mut store = run(&[spec], &recs);
    let entries = store.read(0, false).unwrap();
    let AggValue::Histogram(h) = &entries[0].value else { panic!() };
    assert_eq!((h.sum, h.buckets.iter().map(|b| b.count).sum::<u64>()), (600, 2));
    // A start's pid, comm, uid or cgroup filter must be the aggregation's.
    if let Some(s) = wire.start.as_mut() {
        s.more[0].filter.pids = vec![7];
    }
    assert!(compile(&wire, 0, &source).unwrap_err().contains("must be those of the aggregation"));
}

#[test]
fn linear_histogram_buckets_match_lquantize() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let lin = types::LinearBuckets { min: 0, max: 100, step: 10 };
    let spec = compile(
        &agg(
            "tracepoint:raw_syscalls:sys_exit",
            vec![],
            KernelFunction::LinearHistogram(lin),
            AggSource::Field("ret".into()),
        ),
        0,
        &source,
    )
    .unwrap();
    let recs: Vec<Vec<u8>> = [-1i64, 0, 9, 10, 55, 99, 100, 5000].iter().map(|r| sys(true, 1, 1, "x", 0, *r)).collect();
    let mut store = run(&[spec], &recs);
    let entries = store.read(0, false).unwrap();
    let AggValue::Histogram(h) = &entries[0].value else { panic!() };
    let rows: Vec<(i64, i64, u64)> = h.buckets.iter().map(|b| (b.low, b.high, b.count)).collect();
    assert_eq!(rows.first(), Some(&(i64::MIN, 0, 1)));
    assert_eq!(rows[1], (0, 10, 2));
    assert_eq!(rows[2], (10, 20, 1));
    assert_eq!(rows[6], (50, 60, 1));
    assert_eq!(rows[10], (90, 100, 1));
    assert_eq!(rows.last(), Some(&(100, i64::MAX, 2)));
    assert_eq!(rows.len(), 12);
}

#[test]
fn bad_declarations_name_the_problem() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let err = |w: KernelAggregation| compile(&w, 0, &source).unwrap_err();
    assert!(err(agg("proc:exec", vec![], KernelFunction::Count, AggSource::Pid))
        .contains("syscall probes and tracefs tracepoints"));
    assert!(
        err(agg("syscall:read:exit", vec![], KernelFunction::Sum, AggSource::Field("count".into()))).contains("`ret`")
    );
    assert!(
        err(agg("syscall:read:entry", vec![], KernelFunction::Sum, AggSource::Latency)).contains("needs a start event")
    );
    assert!(err(agg(
        "syscall:read:entry",
        vec![AggSource::Comm, AggSource::Comm],
        KernelFunction::Count,
        AggSource::Pid
    ))
    .contains("one `comm`"));
    let lin = types::LinearBuckets { min: 10, max: 0, step: 1 };
    assert!(err(agg(
        "syscall:read:exit",
        vec![],
        KernelFunction::LinearHistogram(lin),
        AggSource::Field("ret".into())
    ))
    .contains("linear histogram"));
}

#[test]
fn keys_that_are_small_integers_get_array_slots_and_the_rest_the_hash() {
    let linear = |max| Func::Linear { min: 0, max, step: 1 };
    assert_eq!(slots(0, &[Src::Syscall], &Func::Count), Slots::Syscall);
    assert_eq!(slots(7, &[Src::Syscall], &Func::Sum), Slots::Syscall);
    assert_eq!(slots(7, &[Src::Syscall], &Func::Max), Slots::Hash, "a reset of max deletes keys");
    assert_eq!(slots(7, &[], &Func::Min), Slots::Hash);
    assert_eq!(slots(8, &[Src::Syscall], &Func::Count), Slots::Hash, "past the array's aggregations");
    assert_eq!(slots(0, &[Src::Syscall], &Func::Log2), Slots::SyscallBuckets);
    assert_eq!(slots(2, &[Src::Syscall], &Func::Log2), Slots::Hash, "past the syscall buckets' aggregations");
    assert_eq!(slots(0, &[Src::Syscall], &linear(20)), Slots::Hash);
    assert_eq!(slots(0, &[Src::Syscall, Src::Comm], &Func::Count), Slots::Hash);
    assert_eq!(slots(0, &[Src::Comm], &Func::Count), Slots::Comm);
    assert_eq!(slots(9, &[Src::Comm], &Func::Sum), Slots::Comm, "a hash of its own, whatever the id");
    assert_eq!(slots(0, &[Src::Comm], &Func::Max), Slots::Hash);
    assert_eq!(slots(1, &[], &Func::Sum), Slots::Single);
    assert_eq!(slots(1, &[], &Func::Log2), Slots::Buckets);
    assert_eq!(slots(1, &[], &linear(250)), Slots::Buckets);
    assert_eq!(slots(1, &[], &linear(300)), Slots::Hash, "more buckets than half the slots");
}

#[test]
fn actions_encode_as_struct_wt_agg_action() {
    let a = Action {
        agg: 7,
        role: Role::End,
        func: Func::Linear { min: -5, max: 95, step: 10 },
        keys: vec![Src::Comm, Src::Field(FieldLoc { off: 24, size: 4, signed: true })],
        value: Src::Latency,
        corr: Src::Tid,
        preds: Vec::new(),
        syscalls: Some(BTreeSet::from([0, 9, 511])),
        slots: Slots::Buckets,
        kept: Kept::Map,
    };
    let b = a.encode();
    assert_eq!(&b[0..8], &[7, 0, 0, 0, 2, 6, 1, 3]);
    assert_eq!(&b[8..16], &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&b[16..24], &[8, 4, 1, 0, 24, 0, 0, 0]);
    assert_eq!((b[40], b[48]), (9, 3));
    assert_eq!(i64::from_le_bytes(b[56..64].try_into().unwrap()), -5);
    assert_eq!(u64::from_le_bytes(b[64..72].try_into().unwrap()), 10);
    assert_eq!(u64::from_le_bytes(b[72..80].try_into().unwrap()), 10);
    assert_eq!((b[144], b[145], b[207]), (1, 2, 0x80));
}

#[test]
fn a_task_correlation_is_flagged_on_the_action_and_its_site() {
    let task = Src::Task(FieldLoc { off: 8, size: 4, signed: true });
    let end = Action {
        agg: 1,
        role: Role::End,
        func: Func::Log2,
        keys: Vec::new(),
        value: Src::Latency,
        corr: task,
        preds: Vec::new(),
        syscalls: None,
        slots: Slots::Hash,
        kept: Kept::Map,
    };
    // WT_SRC_FIELD, 4 bytes, signed | WT_SRC_TASK, at offset 8.
    assert_eq!(&end.encode()[48..56], &[8, 4, 1 | 2, 0, 8, 0, 0, 0]);
    let plain = Action { corr: Src::Field(FieldLoc { off: 8, size: 4, signed: true }), ..end.clone() };
    let attach = SiteAttach::Tracepoint { id: 1, name: "sched:sched_switch".into(), btf: None };
    // WT_SITE_TASKS when an action has such a correlation; WT_SITE_DATA when one reads a field.
    assert_eq!((end.site_flags(), plain.site_flags()), (SITE_TASKS | SITE_DATA, SITE_DATA));
    let count = Action { role: Role::Update, func: Func::Count, corr: Src::None, value: Src::None, ..end.clone() };
    assert_eq!(count.site_flags(), 0);
    let site = SiteConfig { site: 2, attach, actions: vec![plain.encode(), end.encode()], flags: SITE_TASKS };
    assert_eq!(&site.to_bytes()[0..8], &[2, 0, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn sites_number_syscalls_first_and_cap_actions() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let specs: Vec<Spec> = (0..9)
        .map(|i| {
            compile(
                &agg("tracepoint:raw_syscalls:sys_enter", vec![], KernelFunction::Count, AggSource::Pid),
                i,
                &source,
            )
            .unwrap()
        })
        .collect();
    let sites = super::sites(&specs[..2]).unwrap();
    assert_eq!((sites.len(), sites[0].site, sites[0].actions.len()), (1, 0, 2));
    assert!(super::sites(&specs).unwrap_err().contains("more than 8"));
}

#[test]
fn a_full_map_counts_what_it_cannot_keep() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let wire = agg(
        "tracepoint:raw_syscalls:sys_exit",
        vec![AggSource::Field("ret".into())],
        KernelFunction::Count,
        AggSource::Pid,
    );
    let spec = compile(&wire, 0, &source).unwrap();
    let extra = 10;
    let recs: Vec<Vec<u8>> = (0..VALUES_MAX as i64 + extra).map(|r| sys(true, 1, 1, "x", 0, r)).collect();
    let mut store = run(&[spec], &recs);
    assert_eq!(store.host_lost(), extra as u64);
    assert_eq!(store.read(0, false).unwrap().len(), VALUES_MAX as usize);
}

#[test]
fn a_replay_fills_the_kernels_stores_as_the_kernel_would() {
    let table = ProbeTable::default();
    let source = ProbeLookup::Recorded(&table);
    let probe = "tracepoint:raw_syscalls:sys_exit";
    // By comm: the comm hash holds COMMS_MAX keys. By syscall: a slot each, never full.
    let by_comm = compile(&agg(probe, vec![AggSource::Comm], KernelFunction::Count, AggSource::Pid), 0, &source);
    let by_nr = compile(&agg(probe, vec![AggSource::Syscall], KernelFunction::Count, AggSource::Pid), 1, &source);
    let (by_comm, by_nr) = (by_comm.unwrap(), by_nr.unwrap());
    assert_eq!((by_comm.slots, by_nr.slots), (Slots::Comm, Slots::Syscall));
    let comms: Vec<String> = (0..COMMS_MAX + 5).map(|i| format!("c{i}")).collect();
    let recs: Vec<Vec<u8>> = comms.iter().enumerate().map(|(i, c)| sys(true, 1, 1, c, (i % 400) as i64, 0)).collect();
    let mut store = run(&[by_comm, by_nr], &recs);
    assert_eq!(store.host_lost(), 5, "the comms past the comm hash's size");
    assert_eq!(store.read(0, false).unwrap().len(), COMMS_MAX as usize);
    assert_eq!(store.read(1, false).unwrap().len(), 400, "every syscall in its slot");
}

/// The tracefs formats of the scheduler's tracepoints as Linux 6.18 writes them, with
/// `extra` fields appended to sched_switch's.
fn sched_table(extra: &str) -> ProbeTable {
    const COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
";
    let switch = format!(
        "name: sched_switch\nID: 300\nformat:\n{COMMON}
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;
{extra}
print fmt: \"prev_comm=%s\", REC->prev_comm
"
    );
    let wakeup = |name: &str, id: u32| {
        format!(
            "name: {name}\nID: {id}\nformat:\n{COMMON}
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;

print fmt: \"comm=%s\", REC->comm
"
        )
    };
    let entry = |name: &str, text: &str| crate::collect::table::TracepointEntry {
        format: crate::collect::tracefs::parse_format("sched", name, text).unwrap(),
        stacks: 0,
        preds: Vec::new(),
        strings: Vec::new(),
    };
    ProbeTable {
        tracepoints: vec![
            entry("sched_switch", &switch),
            entry("sched_wakeup", &wakeup("sched_wakeup", 301)),
            entry("sched_wakeup_new", &wakeup("sched_wakeup_new", 302)),
        ],
        ..ProbeTable::default()
    }
}

/// runqlat's histogram: from a wakeup (or a new task's, or a preemption) of a thread to
/// the switch to it.
fn runqlat_wire() -> KernelAggregation {
    let mut wire = agg("tracepoint:sched:sched_switch", vec![], KernelFunction::Log2Histogram, AggSource::Latency);
    let preempted = Filter {
        predicates: vec![types::Predicate { field: "prev_state".into(), op: types::CmpOp::Eq, value: 0 }],
        ..filter()
    };
    wire.start = Some(StartEvent {
        probe: "tracepoint:sched:sched_wakeup".into(),
        filter: filter(),
        key: Correlation::Task("pid".into()),
        end_key: Correlation::Task("next_pid".into()),
        more: vec![
            types::MoreStart {
                probe: "tracepoint:sched:sched_wakeup_new".into(),
                filter: filter(),
                key: Correlation::Task("pid".into()),
            },
            types::MoreStart {
                probe: "tracepoint:sched:sched_switch".into(),
                filter: preempted,
                key: Correlation::Task("prev_pid".into()),
            },
        ],
    });
    wire
}

#[test]
fn the_schedulers_tracepoints_go_to_btf_sites_that_keep_starts_with_the_task_only_in_the_layout_they_build() {
    let table = sched_table("");
    let spec = compile(&runqlat_wire(), 0, &ProbeLookup::Recorded(&table)).unwrap();
    let btf: Vec<Option<SchedTp>> = spec
        .actions
        .iter()
        .map(|(site, _)| match site {
            SiteAttach::Tracepoint { btf, .. } => *btf,
            _ => None,
        })
        .collect();
    assert_eq!(btf, [Some(SchedTp::Wakeup), Some(SchedTp::WakeupNew), Some(SchedTp::Switch), Some(SchedTp::Switch)]);
    // Every start and end names a task the programs are handed: kept with it, so the
    // exit program has no starts to forget.
    assert!(spec.actions.iter().all(|(_, a)| a.kept == Kept::Named), "{:?}", spec.actions);
    assert!(spec.actions.iter().all(|(_, a)| a.encode()[50] & SRC_NAMED != 0));
    assert!(tid_keyed_aggs_of(&spec).is_empty());
    let sites = super::sites(std::slice::from_ref(&spec)).unwrap();
    let numbers: Vec<(u32, usize)> = sites.iter().map(|s| (s.site, s.actions.len())).collect();
    assert_eq!(numbers, [(2, 2), (3, 1), (4, 1)], "fixed sites; the switch ends one wait and starts another");
    // An id past the task's slots keeps its starts in the map, still on the BTF sites.
    let past = compile(&runqlat_wire(), TASK_STARTS, &ProbeLookup::Recorded(&table)).unwrap();
    assert!(past.actions.iter().all(|(_, a)| a.kept == Kept::Map));
    assert_eq!(tid_keyed_aggs_of(&past), [TASK_STARTS]);

    // A kernel whose sched_switch record has another layout gets the tracefs tracepoint,
    // and a start keyed by a field the program is not handed the task of stays in the map.
    let other = sched_table("\tfield:int next_cpu;\toffset:64;\tsize:4;\tsigned:1;\n");
    let spec = compile(&runqlat_wire(), 0, &ProbeLookup::Recorded(&other)).unwrap();
    assert!(spec.actions.iter().all(|(_, a)| a.kept == Kept::Map));
    let sites = super::sites(std::slice::from_ref(&spec)).unwrap();
    let mut numbers: Vec<u32> = sites.iter().map(|s| s.site).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [3, 4, TP_SITES]);
    let mut by_prio = runqlat_wire();
    by_prio.start.as_mut().unwrap().key = Correlation::Task("prio".into());
    let spec = compile(&by_prio, 0, &ProbeLookup::Recorded(&table)).unwrap();
    assert!(spec.actions.iter().all(|(_, a)| a.kept == Kept::Map));
}

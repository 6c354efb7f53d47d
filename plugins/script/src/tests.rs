use super::*;
use wasmtap_sdk::{test_records, CmpOp, Record};

fn script(src: &str) -> Script {
    match Script::new(src, Vec::new()) {
        Ok((s, _)) => s,
        Err(e) => panic!("{}", located(src, &e)),
    }
}

fn refused(src: &str) -> String {
    match Script::new(src, Vec::new()) {
        Ok(_) => panic!("accepted: {src}"),
        Err(e) => located(src, &e),
    }
}

/// A tracepoint event of subscription `sub` from process `pid` named `comm`.
fn event(pid: u32, comm: &[u8], sub: u16) -> Vec<u8> {
    let mut b = test_records::tracepoint(pid, sub, 7, &[0u8; 16]);
    test_records::put(&mut b, wasmtap_sdk::abi::header::COMM, &[0u8; 16]);
    test_records::put(&mut b, wasmtap_sdk::abi::header::COMM, comm);
    b
}

fn offer(s: &mut Script, recs: &[Vec<u8>]) -> String {
    let mut out = Output::new();
    for r in recs {
        let ev = Event::new(Record::new(r)).unwrap();
        s.on_event(&ev, &mut out);
    }
    out.text()
}

#[test]
fn probes_become_subscriptions_once_each() {
    let (s, plan) = Script::new(
        "BEGIN { printf(\"hi\\n\"); } t:syscalls:sys_enter_read, tracepoint:syscalls:sys_enter_write { @[comm] = count(); }
         tracepoint:syscalls:sys_enter_read /pid == 42/ { @r = count(); } interval:s:1 { print(@r); } END { clear(@r); }",
        Vec::new(),
    )
    .unwrap();
    let probes: Vec<&str> = plan.subscriptions.iter().map(|s| s.probe.as_str()).collect();
    assert_eq!(
        probes,
        ["begin", "tracepoint:syscalls:sys_enter_read", "tracepoint:syscalls:sys_enter_write", "interval:s:1", "end"]
    );
    assert_eq!(s.by_sub, vec![vec![0], vec![1, 2], vec![1], vec![3], vec![4]]);
}

#[test]
fn counts_by_comm_with_a_predicate_and_prints_like_bpftrace() {
    let mut s = script("t:a:b /pid != 3/ { @[comm] = count(); @total = sum(pid); @last[pid] = pid * 2; }");
    offer(&mut s, &[event(1, b"bash", 0), event(2, b"sshd", 0), event(2, b"sshd", 0), event(3, b"cron", 0)]);
    let (aggs, text) = s.interp.reports();
    assert_eq!(aggs.len(), 2);
    let counts: Vec<(String, i64)> = aggs[0]
        .entries
        .iter()
        .map(|e| match (&e.key[0], &e.value) {
            (wasmtap_sdk::Value::Text(k), wasmtap_sdk::AggValue::Scalar(v)) => (k.clone(), *v),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(counts, [("bash".to_string(), 1), ("sshd".to_string(), 2)]);
    assert_eq!(aggs[1].entries[0].value, wasmtap_sdk::AggValue::Scalar(5));
    assert_eq!(text, "@last[1]: 2\n@last[2]: 4\n\n");
}

#[test]
fn printf_formats_as_c_does() {
    let mut s =
        script(r#"t:a:b { printf("%-6s|%5d|%05d|%x|%#x|%u|%c|%%|%s\n", comm, pid, pid, 255, 255, -1, 65, "x"); }"#);
    let text = offer(&mut s, &[event(42, b"cat", 0)]);
    assert_eq!(text, "cat   |   42|00042|ff|0xff|18446744073709551615|A|%|x\n");
}

#[test]
fn variables_conditions_and_operators_compute_as_bpftrace() {
    let mut s = script(
        "t:a:b { $x = pid * 3 + 1; if ($x > 10 && comm == \"big\") { @big = count(); } else if ($x == 4) { @one++; } \
         else { @other += $x; } @t[pid % 2 == 0 ? \"even\" : \"odd\"] = count(); @d = 7 / 0; }",
    );
    offer(&mut s, &[event(1, b"a", 0), event(5, b"big", 0), event(6, b"small", 0)]);
    let (aggs, text) = s.interp.reports();
    assert_eq!(aggs[0].entries[0].value, wasmtap_sdk::AggValue::Scalar(1), "@big");
    assert_eq!(text, "@one: 1\n\n@other: 19\n\n@d: 0\n\n");
    let keys: Vec<String> = aggs[1].entries.iter().map(|e| format!("{:?}", e.key)).collect();
    assert_eq!(keys.len(), 2);
}

#[test]
fn histograms_bucket_as_bpftrace_hist_and_lhist() {
    // (A predicate on pid keeps the block in the interpreter; see the pushdown test.)
    let mut s = script("t:a:b /pid > 0/ { @h = hist(pid); @l = lhist(pid, 0, 100, 10); }");
    offer(&mut s, &[event(1, b"a", 0), event(3, b"a", 0), event(50, b"a", 0), event(200, b"a", 0)]);
    let (aggs, _) = s.interp.reports();
    let wasmtap_sdk::AggValue::Histogram(h) = &aggs[0].entries[0].value else { panic!() };
    let counts: Vec<(i64, i64, u64)> =
        h.buckets.iter().filter(|b| b.count > 0).map(|b| (b.low, b.high, b.count)).collect();
    assert_eq!(counts, [(1, 2, 1), (2, 4, 1), (32, 64, 1), (128, 256, 1)], "[low, high)");
    let wasmtap_sdk::AggValue::Histogram(l) = &aggs[1].entries[0].value else { panic!() };
    assert_eq!(l.buckets.iter().map(|b| b.count).sum::<u64>(), 4);
}

#[test]
fn positional_parameters_are_numbers_or_text() {
    let (mut s, _) =
        Script::new("t:a:b /pid == $1/ { @[str($2)] = count(); @n = $#; }", vec!["7".into(), "tag".into()]).unwrap();
    offer(&mut s, &[event(7, b"a", 0), event(8, b"a", 0)]);
    let (aggs, text) = s.interp.reports();
    assert_eq!(aggs[0].entries.len(), 1);
    assert_eq!(aggs[0].entries[0].key, vec![wasmtap_sdk::Value::Text("tag".into())]);
    assert_eq!(text, "@n: 2\n\n");
}

#[test]
fn ten_malformed_programs_each_name_the_line_and_column() {
    let cases: &[(&str, &str)] = &[
        ("t:a:b { @ = count( }", "program:1:20: syntax error, unexpected }"),
        ("t:a:b { @x = 1 @y = 2; }", "program:1:16: syntax error, unexpected map @y, expecting ; or }"),
        ("t:a:b /pid == / { }", "program:1:15: syntax error, unexpected /"),
        (
            "t:a:b { printf(\"%d %d\\n\", pid); }",
            "program:1:9: printf: the format has 2 conversions but 1 argument follow",
        ),
        ("t:a:b { @x = foo; }", "program:1:14: unknown identifier `foo`"),
        ("t:a:b { @x = \"abc; }", "program:1:14: unterminated string"),
        ("kprobe:vfs_read { @ = count(); }", "program:1:1: `kprobe:vfs_read`: kprobes and fentry are not available"),
        ("t:a:b { @x = count(); }\nt:c:d { @x = sum(pid); }", "program:2:9: @x is used as two kinds of map"),
        ("t:a:b { @h = lhist(pid, 10, 0, 1); }", "program:1:14: lhist(): needs min < max"),
        ("t:a:b { $ = 1; }", "program:1:9: a variable needs a name after `$`"),
        ("t:a:b { @x = sum(); }", "program:1:14: sum() takes 1 argument, not 0"),
        ("", "program:1:1: no probes"),
        ("u:/bin/sh:read* { @ = count(); }", "wildcards (`*`) are supported in tracepoint probes only"),
        ("profile:ms:10 { @ = count(); }", "program:1:1: `profile:ms:10`: a profile probe is profile:hz:N"),
        ("t:a:b { @x = kstacks; }", "program:1:14: unknown identifier `kstacks`"),
    ];
    for (src, want) in cases {
        let got = refused(src);
        assert!(got.contains(want), "{src}:\n{got}\nwanted: {want}");
        // The caret sits under the column named.
        let first = got.lines().next().unwrap();
        let col: usize = first.split(':').nth(2).unwrap().parse().unwrap();
        let caret = got.lines().nth(2).unwrap();
        assert_eq!(caret.len(), col, "{got}");
    }
}

#[test]
fn blocks_the_kernel_can_compute_are_pushed_down_whole_and_the_rest_streamed() {
    let (s, plan) = Script::new(
        "t:syscalls:sys_enter_write /args.count >= 4096 && 1 != args.fd/ { @w[comm, args.fd] = count(); @b = hist(args.count); }
         t:syscalls:sys_enter_read { @r = sum(args.count); @avg = avg(args.count); }
         t:syscalls:sys_enter_close /comm == \"cat\"/ { @c = count(); }
         t:syscalls:sys_enter_openat { @o[pid] = count(); }
         interval:s:1 { print(@o); }",
        Vec::new(),
    )
    .unwrap();
    let aggs: Vec<(&str, &str, usize, usize)> = plan
        .aggregations
        .iter()
        .map(|a| (a.name.as_str(), a.probe.as_str(), a.keys.len(), a.filter.predicates.len()))
        .collect();
    assert_eq!(
        aggs,
        [("@w", "tracepoint:syscalls:sys_enter_write", 2, 2), ("@b", "tracepoint:syscalls:sys_enter_write", 0, 2)]
    );
    let preds = &plan.aggregations[0].filter.predicates;
    assert_eq!((preds[1].field.as_str(), preds[1].op, preds[1].value), ("fd", CmpOp::Ne, 1), "1 != fd, flipped");
    // avg() in the block, a comm predicate, a map printed elsewhere: streamed.
    let probes: Vec<&str> = plan.subscriptions.iter().map(|s| s.probe.as_str()).collect();
    assert_eq!(
        probes,
        [
            "tracepoint:syscalls:sys_enter_read",
            "tracepoint:syscalls:sys_enter_close",
            "tracepoint:syscalls:sys_enter_openat",
            "interval:s:1"
        ]
    );
    assert!(matches!(s.interp.maps[0].1, Map::Kernel { .. }) && matches!(s.interp.maps[2].1, Map::Agg { .. }));
    // The streamed close block's comm predicate filters in the kernel.
    assert_eq!(plan.subscriptions[1].filter.comms, ["cat"]);
    assert!(plan.subscriptions[0].filter.comms.is_empty() && plan.subscriptions[2].filter.predicates.is_empty());
}

#[test]
fn the_latency_pattern_becomes_a_kernel_latency_and_anything_else_stays_here() {
    let pair = "t:syscalls:sys_enter_read /args.count > 10/ { @start[tid] = nsecs; }
                t:syscalls:sys_exit_read /@start[tid] && args.ret > 0/ {
                    @ns[comm] = hist(nsecs - @start[tid]); @most = max(nsecs - @start[tid]); delete(@start[tid]); }";
    let (s, plan) = Script::new(pair, Vec::new()).unwrap();
    assert!(plan.subscriptions.is_empty(), "{:?}", plan.subscriptions);
    let names: Vec<&str> = plan.aggregations.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["@ns", "@most"]);
    let ns = &plan.aggregations[0];
    let start = ns.start.as_ref().expect("a start event");
    assert_eq!(start.probe, "tracepoint:syscalls:sys_enter_read");
    assert_eq!((start.filter.predicates[0].field.as_str(), start.filter.predicates[0].value), ("count", 10));
    assert_eq!(ns.filter.predicates[0].field, "ret");
    assert!(matches!(s.interp.maps.iter().find(|(n, _)| n == "ns").unwrap().1, Map::Kernel { .. }));
    // Microseconds (a division), a start keyed by pid, or @start read elsewhere: streamed.
    for other in [
        "t:a:b { @start[tid] = nsecs; } t:a:c /@start[tid]/ { @us = hist((nsecs - @start[tid]) / 1000); }",
        "t:a:b { @start[pid] = nsecs; } t:a:c { @ns = hist(nsecs - @start[pid]); }",
        "t:a:b { @start[tid] = nsecs; } t:a:c { @ns = hist(nsecs - @start[tid]); } END { print(@start); }",
    ] {
        let (_, plan) = Script::new(other, Vec::new()).unwrap();
        assert!(plan.aggregations.is_empty(), "{other}");
    }
}

#[test]
fn exit_ends_the_action_and_only_end_blocks_run_after_it() {
    let mut s = script(
        "BEGIN { printf(\"a\\n\"); exit(); printf(\"b\\n\"); } t:a:b /pid > 0/ { @n = count(); } END { printf(\"end\\n\"); }",
    );
    let before = wasmtap_sdk::testing::exits();
    let mut out = Output::new();
    s.on_tick(0, 1, &mut out);
    assert_eq!(out.text(), "a\n");
    assert_eq!(wasmtap_sdk::testing::exits(), before + 1);
    // An event that arrives while the run ends is not counted.
    let mut out = Output::new();
    s.on_event(&Event::new(Record::new(&event(1, b"x", 1))).unwrap(), &mut out);
    s.on_tick(2, 2, &mut out);
    assert_eq!(out.text(), "end\n");
    assert!(s.interp.reports().0.is_empty());
}

#[test]
fn stats_print_count_average_and_total_as_bpftrace_does() {
    // bpftrace 0.17: @k[a]: count 1, average 5, total 5 / @k[b]: count 2, average 50,
    // total 101 / @k[c]: count 1, average 50, total 50 (by average, then key).
    let mut s = script("t:a:b /pid > 0/ { @k[comm] = stats(pid); @s = stats(pid); }");
    offer(&mut s, &[event(5, b"a", 0), event(1, b"b", 0), event(100, b"b", 0), event(50, b"c", 0)]);
    let (aggs, text) = s.interp.reports();
    assert!(aggs.is_empty());
    assert_eq!(
        text,
        "@k[a]: count 1, average 5, total 5\n@k[b]: count 2, average 50, total 101\n\
         @k[c]: count 1, average 50, total 50\n\n@s: count 4, average 39, total 156\n\n"
    );
    // Not computed in the kernel.
    let (_, plan) = Script::new("t:a:b { @s = stats(args.x); }", Vec::new()).unwrap();
    assert!(plan.aggregations.is_empty() && plan.subscriptions.len() == 1);
}

#[test]
fn stacks_are_recorded_for_the_probes_whose_blocks_use_them_and_never_counted_in_the_kernel() {
    let (_, plan) = Script::new(
        "profile:hz:99 { @[kstack] = count(); }
         t:sched:sched_switch { @s[kstack, comm] = count(); }
         t:sched:sched_switch /pid == 1/ { @n = count(); }
         u:/bin/true:main { @u[ustack, pid] = count(); }
         ur:/bin/true:main, U:/usr/bin/python3:python:function__entry { @r = count(); }
         t:raw_syscalls:sys_enter { @c[comm] = count(); }",
        Vec::new(),
    )
    .unwrap();
    let subs: Vec<(&str, StackMode)> = plan.subscriptions.iter().map(|s| (s.probe.as_str(), s.stacks)).collect();
    assert_eq!(
        subs,
        [
            ("profile:hz:99", StackMode::KERNEL),
            // One subscription for the two blocks: stacks, for the one that keys on them.
            ("tracepoint:sched:sched_switch", StackMode::KERNEL),
            ("uprobe:/bin/true:main", StackMode::USER),
            ("uretprobe:/bin/true:main", StackMode::empty()),
            ("usdt:/usr/bin/python3:python:function__entry", StackMode::empty()),
        ],
        "the count by comm runs in the kernel; a stack key does not"
    );
    assert_eq!(plan.aggregations.len(), 1);
}

#[test]
fn a_tracepoint_wildcard_subscribes_to_each_match_and_streams_its_block() {
    wasmtap_sdk::testing::set_tracepoints(&[
        "tracepoint:sched:sched_process_exec",
        "tracepoint:sched:sched_process_exit",
        "tracepoint:sched:sched_process_fork",
        "tracepoint:sched:sched_switch",
        "tracepoint:signal:signal_generate",
    ]);
    let (s, plan) = Script::new(
        "tracepoint:sched:sched_process_* { @[probe] = count(); } t:sched:sched_switch { @s = count(); }",
        Vec::new(),
    )
    .unwrap();
    let probes: Vec<&str> = plan.subscriptions.iter().map(|s| s.probe.as_str()).collect();
    assert_eq!(
        probes,
        [
            "tracepoint:sched:sched_process_exec",
            "tracepoint:sched:sched_process_exit",
            "tracepoint:sched:sched_process_fork"
        ]
    );
    assert_eq!(s.by_sub, vec![vec![0], vec![0], vec![0]]);
    // The single probe's count still runs in the kernel; the wildcard's block streams.
    assert_eq!(plan.aggregations.len(), 1);
    assert_eq!(plan.aggregations[0].probe, "tracepoint:sched:sched_switch");
    let e = refused("t:nosuch:* { @ = count(); }");
    assert!(e.contains("no tracepoint matches `tracepoint:nosuch:*`"), "{e}");
    // `*` across the parts too, as bpftrace matches it.
    let (_, plan) = Script::new("t:s*:sched_process_e* { @ = count(); }", Vec::new()).unwrap();
    assert_eq!(plan.subscriptions.len(), 2);
}

#[test]
fn strings_are_asked_for_where_the_pointer_is_read_and_str_gives_them() {
    use wasmtap_sdk::{testing, Field, FieldType, ProbeSchema};
    let program = r#"
        t:syscalls:sys_enter_openat { printf("%s %s\n", comm, str(args.filename)); @path[tid] = args.filename; }
        t:syscalls:sys_exit_openat /@path[tid]/ { printf("%d %s|%s\n", args.ret, str(@path[tid]), str(@path[tid], 5)); delete(@path[tid]); }
        t:syscalls:sys_enter_read { @n = count(); }
        u:/bin/sh:readline, ur:/bin/sh:readline { @u[str(arg1), str(retval)] = count(); }
    "#;
    testing::strings_asked();
    let (mut s, plan) = Script::new(program, Vec::new()).unwrap();
    assert_eq!(
        testing::strings_asked(),
        [
            ("tracepoint:syscalls:sys_enter_openat".to_string(), vec!["filename".to_string()]),
            ("uprobe:/bin/sh:readline".to_string(), vec!["arg1".to_string()]),
            ("uretprobe:/bin/sh:readline".to_string(), vec!["retval".to_string()]),
        ],
        "the entry's pointer, stored for the exit's str(); none for a probe that reads no string"
    );
    assert_eq!(plan.subscriptions.len(), 4, "sys_enter_read counts in the kernel");

    // The entry's record carries the path; the exit's does not, and prints what was stored.
    let filename = Field {
        name: "filename".into(),
        c_type: "const char *".into(),
        kind: FieldType::Unsigned,
        offset: 24,
        size: 8,
        count: 1,
        signed: false,
    };
    let ret = Field {
        name: "ret".into(),
        c_type: "long".into(),
        kind: FieldType::Signed,
        offset: 16,
        size: 8,
        count: 1,
        signed: true,
    };
    testing::set_schema(
        0,
        ProbeSchema { probe: plan.subscriptions[0].probe.clone(), fields: vec![filename], args: vec![] },
    );
    testing::set_schema(1, ProbeSchema { probe: plan.subscriptions[1].probe.clone(), fields: vec![ret], args: vec![] });
    let mut entry = vec![0u8; 32];
    test_records::put(&mut entry, 24, &0x7ffd_1000u64.to_le_bytes());
    let enter = test_records::with_strings(test_records::tracepoint(9, 0, 1, &entry), &[(24, Some(b"/etc/hosts"))]);
    let mut ex = vec![0u8; 24];
    test_records::put(&mut ex, 16, &(-2i64).to_le_bytes());
    let exit = test_records::tracepoint(9, 1, 2, &ex);
    let unreadable = test_records::with_strings(test_records::tracepoint(9, 0, 1, &entry), &[(24, None)]);
    let text = offer(&mut s, &[enter, exit.clone(), unreadable, exit]);
    assert_eq!(text, "kill /etc/hosts\n-2 /etc/hosts|/etc\nkill \n-2 |\n");
}

#[test]
fn time_formats_as_strftime_does() {
    let mut out = String::new();
    // 2026-12-01 19:36:26 UTC was a Tuesday, day 335 of the year.
    crate::printf::strftime("%H:%M:%S %Y-%m-%d %a %b %e %j %T %F %I%p %% %q", 1_796_153_786, 0, &mut out);
    assert_eq!(out, "19:36:26 2026-12-01 Tue Dec  1 335 19:36:26 2026-12-01 07PM % %q");
    out.clear();
    crate::printf::strftime("%F %T|%D", 951_782_400, 0, &mut out);
    assert_eq!(out, "2000-02-29 00:00:00|02/29/00", "a leap day");
    out.clear();
    crate::printf::strftime("%F %T", -1, 0, &mut out);
    assert_eq!(out, "1969-12-31 23:59:59");
}

#[test]
fn what_bpftraces_tools_are_written_with_parses_and_runs() {
    // The C preprocessor's lines, the headers' constants, scientific integers,
    // print(@m, N) and cpu.
    let program = "#!/usr/bin/env bpftrace\n#include <linux/sched.h>\n  #ifndef X\n#endif\n\
                   t:a:b { @m[pid] = count(); $s = 1e6 + 2e0 + TASK_RUNNING + TASK_UNINTERRUPTIBLE; \
                   printf(\"%d\\n\", $s); }\n\
                   END { print(@m, 2); }";
    let mut s = script(program);
    let text = offer(
        &mut s,
        &[
            event(1, b"a", 0),
            event(2, b"b", 0),
            event(2, b"b", 0),
            event(3, b"c", 0),
            event(3, b"c", 0),
            event(3, b"c", 0),
        ],
    );
    assert_eq!(text.lines().next(), Some("1000004"));
    let mut out = Output::new();
    s.on_tick(1, 0, &mut out);
    assert_eq!(out.text(), "@m[2]: 2\n@m[3]: 3\n\n", "the two largest");
    let e = refused("t:a:b { @c = lhist(cpu, 0, 8, 1); }");
    assert!(e.contains("cpu is recorded with profile and software events only, not with `tracepoint:a:b`"), "{e}");
    script("profile:hz:99 /pid/ { @cpu = lhist(cpu, 0, 1000, 1); }");
    let e = refused("t:a:b { $x = 1e99; }");
    assert!(e.contains("invalid integer `1e99`"), "{e}");
}

#[test]
fn a_tracepoints_layout_keeps_text_out_of_the_kernel_and_refuses_a_field_it_lacks() {
    use wasmtap_sdk::{testing, Field, FieldType, ProbeSchema};
    let field = |name: &str, kind, offset, size| Field {
        name: name.into(),
        c_type: String::new(),
        kind,
        offset,
        size,
        count: 1,
        signed: false,
    };
    testing::set_described(ProbeSchema {
        probe: "tracepoint:block:block_rq_issue".into(),
        fields: vec![
            field("common_type", FieldType::Unsigned, 0, 2),
            field("bytes", FieldType::Unsigned, 8, 4),
            field("comm", FieldType::Text, 12, 16),
        ],
        args: vec![],
    });
    let (_, plan) = Script::new("t:block:block_rq_issue { @[args->comm] = hist(args->bytes); }", Vec::new()).unwrap();
    assert!(plan.aggregations.is_empty(), "a text key is counted in the sandbox");
    let (_, plan) = Script::new("t:block:block_rq_issue { @[pid] = hist(args->bytes); }", Vec::new()).unwrap();
    assert_eq!(plan.aggregations.len(), 1, "numbers still in the kernel");
    let e = refused("t:block:block_rq_issue { @ = sum(args->byts); }");
    assert!(
        e.contains("program:1:40: tracepoint:block:block_rq_issue has no field `byts` (it has: bytes, comm)"),
        "{e}"
    );
}

#[test]
fn loops_run_with_break_and_continue_as_bpftrace_runs_them() {
    let mut s = script(
        r#"t:a:b {
            $i = 0; $sum = 0;
            while ($i < 10) { $i++; if ($i % 2 == 0) { continue; } if ($i > 7) { break; } $sum += $i; }
            unroll(3) { @u = count(); }
            for ($j : 2..5) { @f[$j] = $j * 10; if ($j == 3) { break; } }
            printf("%d %d\n", $sum, $i);
        }"#,
    );
    let text = offer(&mut s, &[event(1, b"a", 0)]);
    // 1 + 3 + 5 + 7, and the loop left at 9.
    assert_eq!(text, "16 9\n");
    let (aggs, plain) = s.interp.reports();
    assert_eq!(aggs[0].entries[0].value, wasmtap_sdk::AggValue::Scalar(3));
    assert_eq!(plain, "@f[2]: 20\n@f[3]: 30\n\n");
    let e = refused("t:a:b { break; }");
    assert!(e.contains("program:1:9: break outside a loop"), "{e}");
    let e = refused("t:a:b { unroll(0) { } }");
    assert!(e.contains("unroll takes a count from 1 to 100"), "{e}");
    let e = refused("t:a:b { for ($kv : @m) { } }");
    assert!(e.contains("for loops over maps are not supported yet"), "{e}");
}

#[test]
fn bpftrace_0_23s_tuples_delete_with_a_key_and_config_run_as_its_tools_use_them() {
    // biosnoop's `$key = (args.dev, args.sector)`: a tuple's parts are a map's key, the
    // same key `@m[a, b]` names; `delete(@m, key)` is `delete(@m[key])`.
    let mut s = script(
        "config = { print_maps_on_exit = true; max_strlen = 64 }
         t:a:b { $key = (pid, 7); @start[$key] = pid * 10; @n[pid] = count(); @seen[pid, 7] = 1; }
         t:c:d { $key = (pid, 7); printf(\"%d %d %s\\n\", @start[pid, 7], @start[$key], $key);
                 delete(@start, $key); delete(@n, pid); delete(@seen[pid, 7]); }",
    );
    let text = offer(&mut s, &[event(1, b"a", 0), event(2, b"b", 0), event(1, b"a", 1)]);
    assert_eq!(text, "10 10 (1, 7)\n");
    let (aggs, text) = s.interp.reports();
    assert_eq!(text, "@start[2, 7]: 20\n\n@seen[2, 7]: 1\n\n", "1's keys deleted");
    assert_eq!(aggs[0].entries.len(), 1);
    // print_maps_on_exit = false: nothing is printed at the end.
    let mut s = script("config = { print_maps_on_exit = false } t:a:b { @[pid] = count(); @x[pid] = 1; }");
    offer(&mut s, &[event(1, b"a", 0)]);
    let mut out = Output::new();
    assert!(s.finish(&mut out).is_empty());
    assert_eq!(out.text(), "");
    for (src, want) in [
        (
            "config = { missing_probes = \"maybe\" } BEGIN { }",
            "program:1:29: missing_probes is \"error\", \"warn\" or \"ignore\"",
        ),
        ("config = { print_maps_on_exit = 2 } BEGIN { }", "program:1:33: print_maps_on_exit is true or false"),
        ("t:a:b { $k = (1, ); }", "program:1:18: syntax error, unexpected )"),
        ("t:a:b { printf(\"%s\", usym()); }", "program:1:22: usym() takes 1 argument, not 0"),
    ] {
        let got = refused(src);
        assert!(got.contains(want), "{src}:\n{got}\nwanted: {want}");
    }
}

#[test]
fn missing_probes_ignore_leaves_out_what_the_host_cannot_describe() {
    // The host describes what can attach: here only tracepoint:a:b.
    wasmtap_sdk::testing::set_described(wasmtap_sdk::ProbeSchema {
        probe: "tracepoint:a:b".into(),
        fields: Vec::new(),
        args: Vec::new(),
    });
    let src = |missing: &str| {
        format!(
            "config = {{ missing_probes = \"{missing}\" }}
             uprobe:libnothere:f, t:a:b {{ @[probe] = count(); }}
             uretprobe:/bin/sh:nothere {{ @r = count(); }}"
        )
    };
    let (s, plan) = Script::new(&src("ignore"), Vec::new()).unwrap();
    let probes: Vec<&str> = plan.subscriptions.iter().map(|s| s.probe.as_str()).collect();
    assert_eq!(probes, ["tracepoint:a:b"]);
    assert_eq!(s.by_sub, vec![vec![0]]);
    // By default a probe that cannot attach fails the run, at attach time, as bpftrace's does.
    let plan = Script::new(&src("error"), Vec::new()).unwrap().1;
    assert_eq!(plan.subscriptions.len(), 3);
}

#[test]
fn strftime_prints_a_timestamps_wall_clock_time_to_the_microsecond() {
    let mut out = String::new();
    crate::printf::strftime("%H:%M:%S.%f", 1_796_153_786, 123_456_789, &mut out);
    assert_eq!(out, "19:36:26.123456");
    // As an expression: the monotonic timestamp moved onto the wall clock.
    let mut s = script("t:a:b { printf(\"%s|%s\\n\", strftime(\"%S.%f\", 1500000), strftime(\"%Y\", nsecs)); }");
    s.interp.wall_offset_ns = Some(1_796_153_786_000_000_000);
    let text = offer(&mut s, &[event(1, b"a", 0)]);
    assert_eq!(text, "26.001500|2026\n");
}

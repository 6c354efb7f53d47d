//! One-liners: bpftrace's language run by the `script` plugin (`wasmtap -e`, `wasmtap
//! script FILE`, `wasmtap FILE` as a `#!` interpreter), against workloads with known
//! counts. Live tests need root and BPF: in CI they run and must pass.

use wasmtap_tests::*;

#[test]
fn a_count_by_comm_one_liner_counts_every_getppid_of_the_command() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 200000", workload("getppid_loop").display());
    let o = run(wasmtap().args([
        "-e",
        "tracepoint:syscalls:sys_enter_getppid { @[comm] = count(); @calls = count(); }",
        "-c",
        &cmd,
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("@[getppid_loop]: 200000\n"), "{out}");
    assert!(out.contains("@calls: 200000\n"), "{out}");

    // The same maps in JSON, as every plugin's aggregations.
    let o =
        run(wasmtap().args(["-e", "t:syscalls:sys_enter_getppid { @[comm] = count(); }", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let map = lines.iter().find(|v| v["type"] == "map").expect("a map record");
    assert_eq!(map["data"]["@"]["getppid_loop"], 200000, "{map}");
}

#[test]
fn predicates_printf_and_histograms_over_tracepoint_fields_match_the_workload() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 300 writes of 100 bytes, then 200 of 8192, to /dev/null.
    let cmd = workload("write_sizes").display().to_string();
    let program = r#"
        tracepoint:syscalls:sys_enter_write /args.count == 100 || args->count == 8192/ {
            @sizes = hist(args.count);
            @by[args.count > 1000 ? "large" : "small"] = count();
            @total = sum(args.count);
            @st = stats(args.count);
            $kib = args.count / 1024;
            if ($kib == 8) { printf("%s wrote %d KiB\n", comm, $kib); }
        }
        END { printf("writes: %d\n", @by["small"] + @by["large"]); }
    "#;
    let o = run(wasmtap().args(["-e", program, "-c", &cmd]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert_eq!(out.matches("write_sizes wrote 8 KiB\n").count(), 200, "{out}");
    assert!(out.contains("writes: 500\n"), "{out}");
    assert!(out.contains("@by[large]: 200\n@by[small]: 300\n"), "by value, as bpftrace: {out}");
    assert!(out.contains(&format!("@total: {}\n", 300 * 100 + 200 * 8192)), "{out}");
    assert!(out.contains("@st: count 500, average 3336, total 1668400\n"), "{out}");
    assert!(out.contains("[64, 128)            300 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"), "{out}");
    assert!(out.contains("[8K, 16K)            200 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |"), "{out}");
}

#[test]
fn a_script_file_takes_positional_parameters_and_runs_as_a_hashbang_interpreter() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("wasmtap-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("calls.bt");
    std::fs::write(
        &path,
        "#!/usr/bin/env wasmtap\n// Count a command's getppid calls above a threshold.\n\
         tracepoint:syscalls:sys_enter_getppid /comm == str($1)/ { @[comm] = count(); }\n\
         END { printf(\"$2 is %d\\n\", $2); }\n",
    )
    .unwrap();
    let cmd = format!("{} 1000", workload("getppid_loop").display());
    for how in [vec!["script", path.to_str().unwrap()], vec![path.to_str().unwrap()]] {
        let mut c = wasmtap();
        c.args(&how).args(["getppid_loop", "42", "-c", &cmd]);
        let o = run(&mut c);
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{how:?}: {out}\n{err}");
        assert!(out.contains("@[getppid_loop]: 1000\n") && out.contains("$2 is 42\n"), "{how:?}: {out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn twelve_malformed_programs_each_exit_2_with_one_message_and_a_caret_under_its_column() {
    // Parsed when the plugin starts: no root needed.
    let cases = [
        ("t:syscalls:sys_enter_read { @ = count( }", "program:1:40: syntax error, unexpected }", 39),
        ("t:syscalls:sys_enter_read /pid == / { }", "program:1:35: syntax error, unexpected /", 34),
        ("kprobe:vfs_read { @ = count(); }", "program:1:1: `kprobe:vfs_read`: kprobes and fentry are not available", 0),
        (
            "t:syscalls:sys_enter_read { @x = 1 @y = 2; }",
            "program:1:36: syntax error, unexpected map @y, expecting ; or }",
            35,
        ),
        (
            r#"t:syscalls:sys_enter_read { printf("%d %d\n", pid); }"#,
            "program:1:29: printf: the format has 2 conversions but 1 argument follow",
            28,
        ),
        ("t:syscalls:sys_enter_read { @x = foo; }", "program:1:34: unknown identifier `foo`", 33),
        (r#"t:syscalls:sys_enter_read { @x = "abc; }"#, "program:1:34: unterminated string", 33),
        (
            "t:syscalls:sys_enter_read { @h = lhist(pid, 10, 0, 1); }",
            "program:1:34: lhist(): needs min < max and a step above 0",
            33,
        ),
        ("t:syscalls:sys_enter_read { @x = sum(); }", "program:1:34: sum() takes 1 argument, not 0", 33),
        (
            "config = { max_cpus = 1 } t:syscalls:sys_enter_read { @ = count(); }",
            "program:1:12: config key `max_cpus` is not supported here",
            11,
        ),
        (
            r#"t:syscalls:sys_enter_read { printf("%s\n", strftime(1, nsecs)); }"#,
            "program:1:44: strftime(): the format must be a string",
            43,
        ),
        ("t:syscalls:sys_enter_read { @x[(1, 2] = 1; }", "program:1:37: syntax error, unexpected ], expecting )", 36),
    ];
    for (program, want, caret) in cases {
        let o = run(wasmtap().args(["-e", program, "-d", "1s"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{program}: {err}");
        assert!(err.contains(want), "{program}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("wasmtap: ")).count(), 1, "one message: {err}");
        let line = err.lines().position(|l| l == program).unwrap_or_else(|| panic!("the program is shown: {err}"));
        assert_eq!(err.lines().nth(line + 1), Some(format!("{}^", " ".repeat(caret)).as_str()), "{err}");
    }
    let o = run(wasmtap().arg("-e"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("-e needs a program"), "{}", stderr(&o));
}

/// `str()` of pointers read at another probe than the one that prints them (a path
/// stored at a syscall's entry, printed at its exit, as bpftrace's opensnoop does), of a
/// uprobe's argument and a uretprobe's return value, and `str(s, n)`.
#[test]
fn strings_of_pointers_are_read_in_the_kernel_where_the_pointer_is_read() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // A missing path at its open's entry, its errno at the exit.
    let program = r#"
        tracepoint:syscalls:sys_enter_openat /comm == "markers"/ { @path[tid] = args.filename; }
        tracepoint:syscalls:sys_exit_openat /@path[tid]/ {
            $ret = args.ret;
            printf("%d %s %s\n", $ret >= 0 ? 0 : -$ret, str(@path[tid]), str(@path[tid], 15));
            delete(@path[tid]);
        }
        END { clear(@path); }
    "#;
    let cmd = format!("{} strs 0 200 0", workload("markers").display());
    let o = run(wasmtap().args(["-e", program, "-c", &cmd]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // ENOENT is 2; 14 bytes of the path and the NUL.
    assert_eq!(out.matches("2 /tmp/wt-marker-strs-").count(), 200, "{out}");
    assert_eq!(out.matches(" /tmp/wt-marker\n").count(), 200, "{out}");
    assert!(out.contains("2 /tmp/wt-marker-strs-199 /tmp/wt-marker\n"), "{out}");
    // The strings are in the records: a recording replays them, without root.
    let rec = std::env::temp_dir().join(format!("wasmtap-strings-{}.wtrec", std::process::id()));
    let _ = std::fs::remove_file(&rec);
    let param = format!("script.program={program}");
    let o = run(wasmtap().args(["record", "script", "--param", &param, "-o"]).arg(&rec).args(["-c", &cmd]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(wasmtap().arg("replay").arg(&rec).args(["script", "--param", &param]));
    let _ = std::fs::remove_file(&rec);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).matches("2 /tmp/wt-marker-strs-").count(), 200, "{}", stdout(&o));

    // A user function's string argument and the string it returns, counted by content.
    let greet = workload("greet");
    let program = format!(
        "uprobe:{0}:wasmtap_greet {{ @names[str(arg0)] = count(); }} \
         uretprobe:{0}:wasmtap_greet {{ @said[str(retval)] = count(); }}",
        greet.display()
    );
    let cmd = format!("{} 250 ada grace", greet.display());
    let o = run(wasmtap().args(["-e", &program, "-c", &cmd]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (map, key) in [("names", "ada"), ("names", "grace"), ("said", "hello ada"), ("said", "hello grace")] {
        assert_eq!(map_value(&out, map, key), Some(250), "@{map}[{key}]: {out}");
    }

    // A field that is not a pointer is refused before anything attaches, naming it.
    let o = run(wasmtap().args(["-e", r#"t:sched:sched_process_exec { printf("%s\n", str(args.pid)); }"#, "-d", "1s"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("field `pid` (pid_t) is not a pointer"), "{}", stderr(&o));
}

/// `program` run by the script plugin beside syscount over 1,000,000 getppid calls paced
/// over 4 s, with more `args`: the run's JSON lines and its stderr.
fn script_beside_syscount(program: &str, args: &[&str]) -> (Vec<serde_json::Value>, String, Option<i32>) {
    let cmd = format!("{} 40 25000 100", workload("getppid_paced").display());
    let mut c = wasmtap();
    c.args(["run", "syscount", "script", "--param", &format!("script.program={program}"), "-c", &cmd, "-o", "json"]);
    c.args(args);
    let o = run(&mut c);
    (json_lines(&stdout(&o)), stderr(&o), o.status.code())
}

/// syscount counted every getppid and lost nothing, whatever its neighbour did.
fn assert_syscount_exact(lines: &[serde_json::Value], err: &str) {
    let map = lines.iter().find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some()).expect("@syscall map");
    assert_eq!(u(&map["data"]["@syscall"]["getppid"]), 1_000_000, "{err}");
    let good = plugin(accounting(lines), "syscount");
    assert!(good["disabled"].is_null() && u(&good["dropped"]) == 0 && u(&good["faults"]) == 0, "{good}");
}

#[test]
fn hostile_scripts_are_stopped_by_the_sandbox_while_syscount_beside_them_stays_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // A map growing without bound: a new key for every event.
    let (lines, err, code) = script_beside_syscount(
        "tracepoint:syscalls:sys_enter_getppid { @[nsecs, tid] = count(); }",
        &["--memory-mib", "script=16"],
    );
    assert_eq!(code, Some(1), "the disabled plugin makes the run end with problems\n{err}");
    assert_syscount_exact(&lines, &err);
    let p = plugin(accounting(&lines), "script");
    let why = p["disabled"].as_str().unwrap_or_else(|| panic!("the script is disabled: {p}"));
    assert!(why.contains("exceeded its memory limit of 16 MiB"), "{why}");
    assert!(err.contains("plugin `script` disabled in on-batch: exceeded its memory limit of 16 MiB"), "{err}");

    // An infinite loop: stopped at its call's deadline, like any plugin's.
    let (lines, err, code) =
        script_beside_syscount("tracepoint:syscalls:sys_enter_getppid { $i = 0; while (1) { $i++; } }", &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_syscount_exact(&lines, &err);
    let p = plugin(accounting(&lines), "script");
    let why = p["disabled"].as_str().unwrap_or_else(|| panic!("the script is disabled: {p}"));
    assert!(why.starts_with("in on-batch: ran past its deadline of 250 ms"), "{why}");
    assert!(err.contains("plugin `script` disabled in on-batch: ran past its deadline of 250 ms"), "{err}");

    // A printf flood: 100-byte lines for each event, against an output budget of 1 MiB/s.
    let flood = r#"tracepoint:syscalls:sys_enter_getppid { printf("%s %d %d %-60s\n", comm, pid, tid, "flood"); }"#;
    let (lines, err, code) = script_beside_syscount(flood, &["--output-budget", "script=1024"]);
    assert_eq!(code, Some(1), "{err}");
    assert_syscount_exact(&lines, &err);
    let p = plugin(accounting(&lines), "script");
    let why = "over its output budget (1024 KiB per second) for 3 seconds in a row";
    assert_eq!(p["disabled"], why, "{p}");
    assert!(err.contains(&format!("plugin `script` disabled: {why}")), "{err}");
}

#[test]
fn explain_shows_the_blocks_pushed_into_the_kernel_and_their_counts_are_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd =
        format!("sh -c '{} 1000000 && {}'", workload("getppid_loop").display(), workload("write_sizes").display());
    let program = r#"
        tracepoint:syscalls:sys_enter_getppid { @[comm] = count(); }
        tracepoint:syscalls:sys_enter_write /args.count >= 100 && args.count <= 8192/ {
            @writes = count(); @bytes = sum(args.count); @least = min(args.count); @most = max(args.count);
            @sizes = lhist(args.count, 0, 10000, 1000);
        }
        tracepoint:syscalls:sys_enter_openat /comm == "write_sizes"/ { printf("open by %s\n", comm); }
        tracepoint:syscalls:sys_enter_read { @avg = avg(args.count); }
    "#;
    let o = run(wasmtap().args(["-e", program, "--explain", "-c", &cmd, "--stats"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    for said in [
        "block 1: in the kernel: tracepoint:syscalls:sys_enter_getppid: @\n",
        "block 2: in the kernel: tracepoint:syscalls:sys_enter_write: @writes, @bytes, @least, @most, @sizes\n",
        "block 3: streamed: tracepoint:syscalls:sys_enter_openat: a predicate on something but a field\n",
        "block 3: its predicate filters in the kernel\n",
        "block 4: streamed: tracepoint:syscalls:sys_enter_read: avg() is computed in the sandbox\n",
    ] {
        assert!(err.contains(said), "{said}{err}");
    }
    assert!(out.contains("@[getppid_loop]: 1000000\n"), "{out}");
    // write_sizes: 300 writes of 100 bytes and 200 of 8192 (the others write less).
    assert!(out.contains("@writes: 500\n"), "{out}");
    assert!(out.contains(&format!("@bytes: {}\n", 300 * 100 + 200 * 8192)), "{out}");
    assert!(out.contains("@least: 100\n") && out.contains("@most: 8192\n"), "{out}");
    assert!(out.contains("[0, 1000)            300 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"), "{out}");
    assert!(out.contains("[8000, 9000)         200 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |"), "{out}");
    // write_sizes opens /dev/null (and its libraries, as the loader opens them).
    assert!(out.contains("open by write_sizes\n"), "{out}");
    assert!(!out.contains("open by sh\n") && !out.contains("open by getppid_loop\n"), "{out}");
    // Counted in the kernel: every getppid and write of the command reached the
    // aggregation collector (the writes' predicate runs there), and none was streamed:
    // the plugin subscribes to neither probe.
    let agg = err.lines().find(|l| l.trim_start().starts_with("kernel-agg aggregated")).expect("kernel-agg row");
    let aggregated: u64 = agg.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(aggregated >= 1_000_000 + 500, "{agg}");
    for probe in ["sys_enter_getppid", "sys_enter_write"] {
        assert!(!err.contains(&format!("tracepoint:syscalls:{probe}: kernel ")), "{probe} streamed:\n{err}");
    }
    assert!(err.contains("tracepoint:syscalls:sys_enter_openat: kernel "), "{err}");
}

#[test]
fn timer_blocks_run_once_per_tick_and_the_accounting_counts_every_tick() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let program = "BEGIN { @begins = count(); } interval:ms:100 { @ticks = count(); } END { @ends = count(); }";
    let o = run(wasmtap().args(["-e", program, "-d", "1050ms", "--stats"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("@begins: 1\n") && out.contains("@ends: 1\n"), "{out}");
    let ticks: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("@ticks: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!((9..=11).contains(&ticks), "{out}");
    let want = format!("    interval:ms:100: ticks {ticks}; host: filtered 0, delivered {ticks}, dropped 0");
    assert!(err.contains(&want), "{want}\n{err}");
    assert!(err.contains("    begin: ticks 1; host: filtered 0, delivered 1,"), "{err}");

    // exit() ends the run, as Ctrl-C would: END runs and the maps print.
    let program = "interval:ms:100 { @ticks = count(); if (@ticks == 3) { exit(); } } END { printf(\"bye\\n\"); }";
    let started = std::time::Instant::now();
    let o = run(wasmtap().args(["-e", program]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert_eq!(out, "bye\n@ticks: 3\n\n", "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "ended by exit(): {:?}", started.elapsed());
}

#[test]
fn the_start_and_latency_pattern_runs_in_the_kernel_and_times_every_call() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 1000000", workload("getppid_loop").display());
    let program = "tracepoint:syscalls:sys_enter_getppid { @start[tid] = nsecs; }
        tracepoint:syscalls:sys_exit_getppid /@start[tid]/ { @ns[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }";
    let o = run(wasmtap().args(["-e", program, "--explain", "-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    let said = "blocks 1 and 2: in the kernel: the latency from tracepoint:syscalls:sys_enter_getppid to \
                tracepoint:syscalls:sys_exit_getppid: @ns";
    assert!(err.contains(said), "{err}");
    let lines = json_lines(&out);
    let hist = lines.iter().find(|v| v["type"] == "hist").unwrap_or_else(|| panic!("{out}"));
    let timed: u64 = hist["data"]["@ns"]["getppid_loop"].as_array().unwrap().iter().map(|b| u(&b["count"])).sum();
    assert_eq!(timed, 1_000_000, "every getppid timed: {hist}");
    // Nothing was streamed: the plugin subscribed to no probe.
    let acct = &lines.iter().find(|v| v["type"] == "accounting").unwrap()["data"];
    let script = acct["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "script").unwrap();
    assert_eq!(script["probes"].as_array().map(Vec::len), Some(0), "{script}");
}

/// `ksym()` names the kernel function an address is in (kmalloc's call sites, by the
/// host's symbolizer; threadsnoop's test has `usym()`), and a tuple keys a map as its
/// parts do.
#[test]
fn ksym_names_the_kernel_functions_addresses_are_in() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let program = "t:kmem:kmalloc { @site[ksym(args.call_site)] = count(); @n = count();
                   $k = (comm, ksym(args.call_site)); @pair[$k] = count(); }";
    let o = run(wasmtap().args(["-e", program, "-c", "ls /usr"]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let entries = |map: &str| -> Vec<(String, i64)> {
        out.lines()
            .filter_map(|l| l.strip_prefix(&format!("@{map}["))?.split_once("]: "))
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    };
    let (sites, pairs) = (entries("site"), entries("pair"));
    assert!(!sites.is_empty(), "{out}");
    // Every call site named (a function's name, not an address), and each call counted.
    assert!(sites.iter().all(|(k, _)| !k.starts_with("0x") && !k.is_empty() && !k.contains(' ')), "{out}");
    let n: i64 = out.lines().find_map(|l| l.strip_prefix("@n: ")).unwrap().parse().unwrap();
    assert_eq!(sites.iter().map(|(_, v)| v).sum::<i64>(), n, "{out}");
    // (comm, site): two parts a key, the same calls.
    assert!(pairs.iter().all(|(k, _)| k.split(", ").count() == 2), "{out}");
    assert!(pairs.iter().any(|(k, _)| k.starts_with("ls, ")), "{out}");
    assert_eq!(pairs.iter().map(|(_, v)| v).sum::<i64>(), n, "{out}");
}

/// The lessons of bpftrace's one-liner tutorial that this kernel class can run, as written
/// there (docs/one-liners.md has the whole table).
#[test]
fn the_tutorials_one_liners_run_unchanged() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 2. hello world.
    let o = run(wasmtap().args(["-e", r#"BEGIN { printf("hello world\n"); }"#, "-d", "500ms"]));
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "hello world\n"), "{}", stderr(&o));

    // 3. file opens: every path the command opens, read in the kernel as the call enters.
    let cmd = format!("{} lesson3 0 300 0", workload("markers").display());
    let o = run(wasmtap().args([
        "-e",
        r#"tracepoint:syscalls:sys_enter_openat { printf("%s %s\n", comm, str(args.filename)); }"#,
        "-c",
        &cmd,
    ]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for i in [0, 1, 150, 299] {
        assert_eq!(out.matches(&format!("markers /tmp/wt-marker-lesson3-{i}\n")).count(), 1, "{out}");
    }
    assert_eq!(out.matches("markers /tmp/wt-marker-lesson3-").count(), 300, "{out}");

    // 4. syscall counts by process: every getppid of the command, and its other syscalls.
    let cmd = format!("{} 100000", workload("getppid_loop").display());
    let o = run(wasmtap().args(["-e", "tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }", "-c", &cmd]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let n = map_value(&out, "", "getppid_loop").unwrap_or_else(|| panic!("{out}"));
    assert!((100_000..100_200).contains(&n), "{out}");

    // 5. distribution of read() bytes of one pid: dd reads 1,000 blocks of 4 KiB.
    let mut dd = std::process::Command::new("sh")
        .args(["-c", "sleep 1; exec dd if=/dev/zero of=/dev/null bs=4096 count=1000 status=none"])
        .spawn()
        .unwrap();
    let program = format!("tracepoint:syscalls:sys_exit_read /pid == {}/ {{ @bytes = hist(args.ret); }}", dd.id());
    let o = run(wasmtap().args(["-e", &program, "-d", "3s"]));
    dd.wait().unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.contains("@bytes:\n") && out.contains("[4K, 8K)            1000 |"), "{out}");

    // 8. count process-level events: the wildcard is every sched tracepoint, and under
    // -c the command's own events: a shell that runs /bin/true three times forks three
    // times, and four programs exec and exit (their exits too: the last thread's exit
    // is still the target's after the target set lets it go).
    let o = run(wasmtap().args([
        "-e",
        "tracepoint:sched:sched* { @[probe] = count(); } interval:s:5 { exit(); }",
        "-c",
        "sh -c '/bin/true; /bin/true; /bin/true; exit 0'",
    ]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("Attached "), "{}", stderr(&o));
    for (probe, n) in [("fork", 3), ("exec", 4), ("exit", 4)] {
        let key = format!("tracepoint:sched:sched_process_{probe}");
        assert_eq!(map_value(&out, "", &key), Some(n), "{key}: {out}");
    }

    // 9. profile on-CPU kernel stacks: the getppid storm's samples are in the syscall path,
    // each stack a key of named frames as bpftrace prints it.
    let cmd = format!("{} 3000000", workload("getppid_loop").display());
    let o = run(wasmtap().args(["-e", "profile:hz:99 { @[kstack] = count(); }", "-c", &cmd]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.starts_with("@[\n        "), "{out}");
    assert!(out.contains("\n        entry_SYSCALL_64"), "kernel frames named: {out}");
    let samples: u64 = out.lines().filter_map(|l| l.strip_prefix("]: ")?.parse::<u64>().ok()).sum();
    assert!(samples > 0, "{out}");

    // 10. scheduler tracing: every switch of a command that sleeps 20 times is a stack
    // through the scheduler, and its user stacks name its own frames.
    let o = run(wasmtap().args([
        "-e",
        "tracepoint:sched:sched_switch { @[kstack] = count(); } tracepoint:sched:sched_switch { @u[ustack, comm] = count(); }",
        "-c",
        "sh -c 'for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sleep 0.01; done'",
    ]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.contains("\n        __schedule+") || out.contains("\n        schedule+"), "{out}");
    let switches: u64 = out
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("]: ")?.parse::<u64>().ok())
        .sum();
    assert!(switches >= 20, "at least one switch per sleep: {out}");
    assert!(out.contains("@u[\n        ") && out.contains("\n, sh]: "), "{out}");

    // 11. block I/O: direct writes of 1 MiB reach the disk as requests.
    let file = std::env::temp_dir().join(format!("wasmtap-block-{}", std::process::id()));
    let cmd = format!("dd if=/dev/zero of={} bs=1M count=8 oflag=direct status=none", file.display());
    let o = run(wasmtap().args(["-e", "tracepoint:block:block_rq_issue { @ = hist(args.bytes); }", "-c", &cmd]));
    let _ = std::fs::remove_file(&file);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.starts_with("@:\n") && out.contains("|@"), "{out}");
}

//! bpftrace's own tools, run unchanged: the `tools/*.bt` of Debian's bpftrace packages
//! (Debian 12's 0.17 and Debian 13's 0.23, unpacked by `./x setup`), each as `wasmtap
//! script TOOL.bt` over a workload with a known outcome, each version of a tool that
//! both ship. Live: they need root and BPF, and in CI they run and must pass.
//! docs/one-liners.md lists every tool of those packages with its status here.

use wasmtap_tests::*;

/// The bpftrace versions whose tools are run: Debian 12's and Debian 13's.
const VERSIONS: [&str; 2] = ["0.17", "0.23"];

/// bpftrace `version`'s `tool` run by `wasmtap script` under `-c cmd`; its stdout, after
/// its exit code 0.
fn tool(version: &str, name: &str, cmd: &str) -> String {
    eprintln!("bpftrace {version}'s {name}.bt");
    let o = run(wasmtap().arg("script").arg(bpftrace_tool_of(version, name)).args(["-c", cmd]));
    assert_eq!(o.status.code(), Some(0), "{version} {name}: {}\n{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// `tool` run system-wide, as the tool traces, for `duration` while `sh -c cmd` runs
/// beside it (its output discarded); the tool's stdout, after its exit code 0.
fn tool_beside(version: &str, name: &str, cmd: &str, duration: &str) -> String {
    eprintln!("bpftrace {version}'s {name}.bt");
    let mut bg = std::process::Command::new("sh")
        .args(["-c", cmd])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let o = run(wasmtap().arg("script").arg(bpftrace_tool_of(version, name)).args(["-d", duration]));
    bg.wait().unwrap();
    assert_eq!(o.status.code(), Some(0), "{version} {name}: {}\n{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// bpftrace `version`'s `tool`, system-wide for 2.5 s while 8 direct writes of 1 MiB
/// (dd's, to a scratch file in the temporary directory, removed after) reach the disk:
/// its stdout.
fn beside_direct_writes(version: &str, tool: &str) -> String {
    let file = std::env::temp_dir().join(format!("wasmtap-{tool}-{}", std::process::id()));
    let cmd = format!("sleep 0.5; dd if=/dev/zero of={} bs=1M count=8 oflag=direct status=none", file.display());
    let out = tool_beside(version, tool, &cmd, "2500ms");
    let _ = std::fs::remove_file(&file);
    out
}

/// The whitespace-separated columns of `out`'s lines that have `n` of them.
fn rows(out: &str, n: usize) -> Vec<Vec<&str>> {
    out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).filter(|r| r.len() == n).collect()
}

/// The counts of the histogram buckets (`[lo, hi)   N |@@@|`, `[n]   N |@|`) in `out`,
/// added up.
fn hist_total(out: &str) -> u64 {
    let count = |l: &str| l.split([')', ']']).nth(1)?.split('|').next()?.trim().parse::<u64>().ok();
    out.lines().filter(|l| l.starts_with('[')).filter_map(count).sum()
}

/// A `HH:MM:SS` column, as `time("%H:%M:%S")` prints it, or `HH:MM:SS.ffffff`, as
/// `strftime("%H:%M:%S.%f", nsecs)` does (bpftrace 0.23's tools).
fn is_time(s: &str) -> bool {
    let (hms, micros) = s.split_once('.').unwrap_or((s, "000000"));
    hms.len() == 8
        && hms.bytes().enumerate().all(|(i, b)| if i == 2 || i == 5 { b == b':' } else { b.is_ascii_digit() })
        && micros.len() == 6
        && micros.bytes().all(|b| b.is_ascii_digit())
}

#[test]
fn opensnoop_shows_every_open_with_its_fd_errno_and_path() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let out = tool(v, "opensnoop", &format!("{} tools 0 120 0", workload("markers").display()));
        assert!(
            out.starts_with("Tracing open syscalls... Hit Ctrl-C to end.\nPID    COMM               FD ERR PATH\n"),
            "{out}"
        );
        let opens: Vec<_> = rows(&out, 5).into_iter().filter(|r| r[4].starts_with("/tmp/wt-marker-tools-")).collect();
        assert_eq!(opens.len(), 120, "{out}");
        for (i, r) in opens.iter().enumerate() {
            assert_eq!(&r[1..], ["markers", "-1", "2", &format!("/tmp/wt-marker-tools-{i}")], "{out}");
        }
        // The loader's opens succeed: a descriptor and errno 0.
        assert!(rows(&out, 5)
            .iter()
            .any(|r| r[1] == "markers" && r[3] == "0" && r[2].parse::<i32>().unwrap_or(-1) >= 0));
    }
}

#[test]
fn statsnoop_shows_the_stat_family_by_path() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let out = tool(v, "statsnoop", &format!("{} stat 25", workload("tool_calls").display()));
        let stats: Vec<_> =
            rows(&out, 4).into_iter().filter(|r| r[1] == "tool_calls" && r[3].starts_with("/tmp/wt-stat-")).collect();
        // stat, lstat, statfs and statx of each path, each ENOENT.
        assert_eq!(stats.len(), 100, "{out}");
        for i in 0..25 {
            let path = format!("/tmp/wt-stat-{i}");
            assert_eq!(stats.iter().filter(|r| r[3] == path && r[2] == "2").count(), 4, "{path}: {out}");
        }
    }
}

#[test]
fn killsnoop_shows_each_signal_its_target_and_result() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let o = run(wasmtap()
            .arg("script")
            .arg(bpftrace_tool_of(v, "killsnoop"))
            .args(["-c", &format!("{} kill 30", workload("tool_calls").display())]));
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{err}");
        let pid = err.split_whitespace().skip_while(|w| *w != "kill").nth(1).expect("the workload's pid");
        let kills: Vec<_> = rows(&out, 6).into_iter().filter(|r| r[2] == "tool_calls").collect();
        assert_eq!(kills.len(), 60, "{out}");
        assert!(kills.iter().all(|r| is_time(r[0]) && r[1] == pid && r[3] == "0"), "{out}");
        assert_eq!(kills.iter().filter(|r| r[4] == pid && r[5] == "0").count(), 30, "{out}");
        assert_eq!(kills.iter().filter(|r| r[4] == "4194303" && r[5] == "-3").count(), 30, "ESRCH: {out}");
    }
}

#[test]
fn syncsnoop_shows_every_sync_call_by_probe() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let out = tool(v, "syncsnoop", &format!("{} sync 5", workload("tool_calls").display()));
        let calls: Vec<_> = rows(&out, 4).into_iter().filter(|r| r[2] == "tool_calls" && is_time(r[0])).collect();
        for call in ["sync", "syncfs", "fsync", "fdatasync", "sync_file_range", "msync"] {
            let probe = format!("tracepoint:syscalls:sys_enter_{call}");
            assert_eq!(calls.iter().filter(|r| r[3] == probe).count(), 5, "{probe}: {out}");
        }
        assert_eq!(calls.len(), 30, "{out}");
    }
}

#[test]
fn setuids_shows_each_call_with_its_arguments_and_result() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let out = tool(v, "setuids", &format!("{} setuid 7", workload("tool_calls").display()));
        for line in ["setuid    uid=0 (0)", "setfsuid  uid=0 (prevuid=0)", "setresuid ruid=0 euid=0 suid=0 (0)"] {
            let n = out.lines().filter(|l| l.contains(" tool_calls ") && l.ends_with(line)).count();
            assert_eq!(n, 7, "{line}: {out}");
        }
    }
}

#[test]
fn gethostlatency_shows_each_lookup_with_the_name_asked_for() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let out = tool(v, "gethostlatency", &format!("{} resolve 10", workload("tool_calls").display()));
        let lookups: Vec<_> = rows(&out, 5).into_iter().filter(|r| r[2] == "tool_calls").collect();
        // getaddrinfo, gethostbyname and gethostbyname2, each 10 times; /etc/hosts answers in
        // well under a second.
        assert_eq!(lookups.len(), 30, "{out}");
        assert!(lookups
            .iter()
            .all(|r| is_time(r[0]) && r[4] == "localhost" && r[3].parse::<u64>().is_ok_and(|ms| ms < 1000)));
    }
}

#[test]
fn pidpersec_counts_the_forks_of_each_second() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        // 40 children at once, then 1.5 s alive: at least one second's line sees them.
        let out = tool(v, "pidpersec", &format!("{} fork 40 1500", workload("tool_calls").display()));
        let per_second: Vec<u64> = out
            .lines()
            .filter_map(|l| {
                let (time, n) = l.split_once(" PIDs/sec: @: ")?;
                assert!(is_time(time), "{l}");
                n.parse().ok()
            })
            .collect();
        assert_eq!(per_second.iter().sum::<u64>(), 40, "{out}");
    }
}

#[test]
fn syscount_counts_syscalls_by_id_and_process_and_prints_the_top_ten() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let out = tool(v, "syscount", &format!("{} 100000", workload("getppid_loop").display()));
        let (ids, procs) = out.split_once("Top 10 processes:\n").unwrap_or_else(|| panic!("{out}"));
        let ids = ids.split_once("Top 10 syscalls IDs:\n").map(|(_, t)| t).unwrap_or_else(|| panic!("{out}"));
        // getppid is syscall 110 on x86_64; the top ten are printed, the largest last.
        assert_eq!(map_value(ids, "syscall", "110"), Some(100000), "{out}");
        assert_eq!(ids.lines().filter(|l| l.starts_with("@syscall[")).count(), 10, "{out}");
        assert!(ids.trim_end().ends_with("@syscall[110]: 100000"), "{out}");
        let n = map_value(procs, "process", "getppid_loop").unwrap_or_else(|| panic!("{out}"));
        assert!((100_000..100_200).contains(&n), "{out}");
        // clear() in END: nothing more is printed after the top tens.
        assert_eq!(out.matches("@syscall[110]").count(), 1, "{out}");
    }
}

#[test]
fn runqlat_histograms_the_run_queue_latency_of_every_wakeup() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        // System-wide, as the tool is: a command that sleeps 100 times is woken 100 times.
        let out =
            tool_beside(v, "runqlat", &format!("sleep 0.5; exec {} 100 1", workload("slices").display()), "2500ms");
        assert!(out.starts_with("Tracing CPU scheduler... Hit Ctrl-C to end.\n") && out.contains("@usecs:\n"), "{out}");
        let samples = hist_total(&out);
        assert!(samples >= 100, "{samples} latencies: {out}");
    }
}

#[test]
fn cpuwalk_samples_the_cpus_a_command_runs_on() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        // One second of CPU at 99 samples a second.
        let out = tool(v, "cpuwalk", &format!("{} 1000", workload("spin_func").display()));
        assert!(out.contains("@cpu:\n"), "{out}");
        let samples = hist_total(&out);
        assert!((85..=115).contains(&samples), "{samples} samples: {out}");
    }
}

#[test]
fn bashreadline_shows_the_commands_typed_into_bash() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        // An interactive bash on a terminal of script(1)'s, typed into.
        let typed =
            r#"printf 'echo wt-typed-1\necho wt-typed-2\nexit\n' | script -qfc 'bash --norc --noprofile -i' /dev/null"#;
        let out = tool(v, "bashreadline", &format!("sh -c \"sleep 0.3; {} >/dev/null\"", typed.replace('"', "\\\"")));
        let lines: Vec<_> = rows(&out, 4).into_iter().filter(|r| is_time(r[0])).collect();
        for cmd in ["wt-typed-1", "wt-typed-2"] {
            assert_eq!(lines.iter().filter(|r| r[2] == "echo" && r[3] == cmd).count(), 1, "{cmd}: {out}");
        }
    }
}

#[test]
fn writeback_shows_the_writeback_a_sync_starts() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        let file = std::env::temp_dir().join(format!("wasmtap-writeback-{}", std::process::id()));
        let cmd = format!("sleep 0.5; dd if=/dev/zero of={} bs=1M count=16 status=none; sync", file.display());
        let out = tool_beside(v, "writeback", &cmd, "3s");
        let _ = std::fs::remove_file(&file);
        // TIME DEVICE PAGES REASON ms: the sync's writeback of the file's dirty pages.
        let synced: Vec<_> = rows(&out, 5).into_iter().filter(|r| is_time(r[0]) && r[3] == "sync").collect();
        assert!(!synced.is_empty(), "{out}");
        assert!(
            synced.iter().all(|r| r[1].contains(':') && r[2].parse::<u64>().is_ok() && r[4].contains('.')),
            "{out}"
        );
    }
}

#[test]
fn bitesize_histograms_the_request_sizes_by_process() {
    if !require_root() {
        return;
    }
    let _g = serial();
    for v in VERSIONS {
        // 8 direct writes of 1 MiB reach the disk as requests (split as the device takes
        // them), system-wide as the tool traces: issued by dd, or by a kernel worker when the
        // device's queue was busy. Each process's histogram keyed by the tracepoint's text
        // field `comm`.
        let out = beside_direct_writes(v, "bitesize");
        assert!(out.contains("\nI/O size (bytes) histograms by process name:\n@["), "{out}");
        // Each request counted at its bucket's low end, at least half its size: at least half
        // the 8 MiB written.
        let bytes: u64 = out
            .lines()
            .filter_map(|l| {
                let lo = l.strip_prefix('[')?.split(',').next()?;
                let lo: u64 = match lo.strip_suffix('K') {
                    Some(k) => k.parse::<u64>().ok()? << 10,
                    None => match lo.strip_suffix('M') {
                        Some(m) => m.parse::<u64>().ok()? << 20,
                        None => lo.parse().ok()?,
                    },
                };
                Some(lo * l.split([')', ']']).nth(1)?.split('|').next()?.trim().parse::<u64>().ok()?)
            })
            .sum();
        assert!(bytes >= 4 << 20, "{bytes} bytes: {out}");
    }
}

/// The major number of the device `path`'s filesystem is on.
fn major_of(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)
}

/// bpftrace 0.23's tools that 0.17's could not run here (kprobes then, tracepoints now).
#[test]
fn biolatency_histograms_the_latency_of_every_block_io() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 8 direct writes of 1 MiB, system-wide as the tool traces: each reaches the disk as
    // one or more requests, each of whose latencies is counted.
    let out = beside_direct_writes("0.23", "biolatency");
    assert!(out.starts_with("Tracing block device I/O... Hit Ctrl-C to end.\n"), "{out}");
    assert!(out.contains("\n@usecs:\n["), "{out}");
    let ios = hist_total(&out);
    assert!(ios >= 8, "{ios} latencies: {out}");
    // END clears @start: it is not printed.
    assert!(!out.contains("@start"), "{out}");
}

#[test]
fn biosnoop_shows_each_block_io_with_its_disk_process_and_latency() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let major = major_of(&std::env::temp_dir());
    let out = beside_direct_writes("0.23", "biosnoop");
    assert!(
        out.contains("TIME(ms)     DISK ID        COMM             PID    LAT(ms)\n             MAJOR MINOR\n"),
        "{out}"
    );
    // TIME MAJOR MINOR COMM PID LAT: dd's requests, on the disk the file is on, keyed by
    // (device, sector) from their start to their end.
    let dd: Vec<_> = rows(&out, 6).into_iter().filter(|r| r[3] == "dd").collect();
    assert!(dd.len() >= 8, "{out}");
    for r in &dd {
        assert_eq!(r[1].parse::<u64>().ok(), Some(major), "{out}");
        assert!(r[0].parse::<u64>().is_ok() && r[4].parse::<u32>().is_ok() && r[5].parse::<u64>().is_ok(), "{out}");
    }
    // One dd wrote them all.
    assert!(dd.iter().all(|r| r[4] == dd[0][4]), "{out}");
}

#[test]
fn threadsnoop_names_the_function_each_new_thread_starts_in() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // libpthread has no pthread_create since glibc 2.34: `missing_probes = "ignore"`
    // leaves that probe out and libc's fires; usym() names the start routine.
    let o = run(wasmtap()
        .arg("script")
        .arg(bpftrace_tool_of("0.23", "threadsnoop"))
        .args(["-c", &format!("{} thread 12", workload("tool_calls").display())]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let pid = err.split_whitespace().skip_while(|w| *w != "thread").nth(1).expect("the workload's pid");
    assert!(out.contains("TIME                PID COMM             FUNC\n"), "{out}");
    let threads: Vec<_> = rows(&out, 4).into_iter().filter(|r| r[2] == "tool_calls").collect();
    assert_eq!(threads.len(), 12, "{out}");
    assert!(threads.iter().all(|r| is_time(r[0]) && r[1] == pid && r[3] == "wt_thread_main"), "{out}");
}

#[test]
fn biostacks_histograms_the_issue_latency_by_the_stack_that_started_each_io() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // The kernel stack each request started on, kept in a map as a value and used as a
    // key when the request is issued: dd's direct writes start in write(2).
    let out = beside_direct_writes("0.23", "biostacks");
    assert!(out.starts_with("Tracing block I/O with init stacks. Hit Ctrl-C to end.\n@usecs[\n"), "{out}");
    let writes: u64 = out
        .split("@usecs[\n")
        .filter(|entry| entry.split("]:\n").next().is_some_and(|stack| stack.contains("\n        vfs_write+")))
        .map(hist_total)
        .sum();
    assert!(writes >= 8, "{writes} requests started by write(2): {out}");
    assert!(!out.contains("@reqstack") && !out.contains("@reqts"), "cleared in END: {out}");
}

//! Every probe class against workloads with known ground truth: uprobes and uretprobes,
//! USDT (with a semaphore), cpu-clock profiling with symbols, page faults, any
//! tracepoint with its fields decoded, predicates run in the kernel, and `list`. Needs
//! root and BPF: in CI these run and must pass.

use wasmtap_tests::*;

/// `wasmtap run probe --param probe=PROBE [--param K=V]... -c CMD`, checked for success.
fn probe_run(probe: &str, params: &[&str], cmd: &str, extra: &[&str]) -> (String, String) {
    let mut c = wasmtap();
    c.args(["run", wasm("probe").to_str().unwrap(), "--param", &format!("probe={probe}"), "-c", cmd]);
    for p in params {
        c.args(["--param", p]);
    }
    c.args(extra);
    let o = run(&mut c);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{probe}\nstdout:\n{out}\nstderr:\n{err}");
    (out, err)
}

/// Rows of the fixture's `args` table: (pid, a0, a1, a2).
fn arg_rows(out: &str) -> Vec<[i64; 4]> {
    out.lines()
        .filter_map(|l| {
            let v: Vec<i64> = l.split_whitespace().map(|w| w.parse().ok()).collect::<Option<_>>()?;
            v.try_into().ok()
        })
        .collect()
}

#[test]
fn uprobe_on_malloc_counts_exactly_the_programs_calls() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 1000", workload("malloc_calls").display());
    let (out, _) = probe_run("uprobe:libc:malloc", &[], &cmd, &[]);
    assert_eq!(map_value(&out, "events", "uprobe:libc:malloc"), Some(1000), "{out}");
}

#[test]
fn uretprobe_on_malloc_returns_the_pointers_the_program_printed() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 200", workload("malloc_calls").display());
    let (out, _) = probe_run("uretprobe:libc:malloc", &["mode=args"], &cmd, &[]);
    let printed: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("0x"))
        .map(|h| u64::from_str_radix(h.trim(), 16).expect("hex pointer"))
        .collect();
    assert_eq!(printed.len(), 200, "{out}");
    let returned: Vec<u64> = arg_rows(&out).iter().map(|r| r[1] as u64).collect();
    assert_eq!(returned, printed, "uretprobe values must be the pointers malloc returned, in order");
}

#[test]
fn usdt_probe_fires_as_often_as_the_program_says_with_its_arguments_and_semaphore() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let bin = workload("usdt_ticks");
    let cmd = format!("{} 500", bin.display());
    let probe = format!("usdt:{}:wtest:tick", bin.display());
    let (out, _) = probe_run(&probe, &["mode=args"], &cmd, &[]);
    assert!(out.contains("ticks 500 "), "{out}");
    let rows = arg_rows(&out);
    assert_eq!(rows.len(), 500, "{out}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!((r[1], r[2]), (i as i64, 3 * i as i64), "arguments of tick {i}");
    }
    // `guarded` fires only while its semaphore says a tracer is attached.
    let probe = format!("usdt:{}:wtest:guarded", bin.display());
    let (out, _) = probe_run(&probe, &[], &cmd, &[]);
    assert!(out.contains("guarded 500"), "the kernel must raise the semaphore:\n{out}");
    assert_eq!(map_value(&out, "events", &probe), Some(500), "{out}");
}

#[test]
fn profile_attributes_a_spinning_programs_samples_to_its_hot_function() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 2000", workload("spin_func").display());
    let (out, _) = probe_run("profile:hz:99", &["mode=symbols"], &cmd, &[]);
    let total = map_value(&out, "events", "profile:hz:99").expect("sample count");
    let hot = map_value(&out, "samples", "wasmtap_hot_loop").unwrap_or(0);
    // 2 s of CPU at 99 Hz is ~198 samples; the process exited before symbolization.
    assert!(total >= 150, "too few samples ({total}):\n{out}");
    assert!(hot * 100 >= total * 90, "{hot} of {total} samples in wasmtap_hot_loop (< 90 %):\n{out}");
}

#[test]
fn minor_fault_events_agree_with_the_kernels_own_count() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 20000", workload("touch_pages").display());
    let (out, _) = probe_run("software:minor-faults:1", &[], &cmd, &[]);
    let minflt: i64 = out
        .lines()
        .find_map(|l| l.strip_prefix("touched 20000 minflt "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("workload output missing:\n{out}"));
    let seen = map_value(&out, "events", "software:minor-faults:1").expect("event count");
    assert!(minflt >= 20000, "{out}");
    assert!((seen - minflt).abs() * 50 <= minflt, "{seen} fault events vs {minflt} minflt (more than 2 % apart)");
}

#[test]
fn signal_generate_fields_are_decoded_from_the_format_file() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = workload("signals").display().to_string();
    let (out, _) = probe_run("tracepoint:signal:signal_generate", &["mode=fields"], &cmd, &[]);
    let pid: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("workload output missing:\n{out}"));
    let count = |sig: u32| {
        let want = format!("sig={sig} errno=0 code=0 comm=signals pid={pid} group=1 result=0 ");
        out.lines().filter(|l| *l == want).count()
    };
    assert_eq!(count(10), 5, "five SIGUSR1 to itself:\n{out}");
    assert_eq!(count(12), 3, "three SIGUSR2 to itself:\n{out}");
}

#[test]
fn a_write_size_predicate_is_applied_in_the_kernel() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = workload("write_sizes").display().to_string();
    for probe in ["syscall:write:entry", "tracepoint:syscalls:sys_enter_write"] {
        let (out, _) = probe_run(probe, &["where=count>4096"], &cmd, &["-o", "json"]);
        // The workload shares stdout; keep wasmtap's JSON lines.
        let ours: String = out.lines().filter(|l| l.starts_with('{')).map(|l| format!("{l}\n")).collect();
        let lines = json_lines(&ours);
        let map = lines.iter().find(|v| v["type"] == "map").expect("map record");
        assert_eq!(map["data"]["@events"][probe], 200, "only the 200 large writes: {out}");
        let acct = &lines.iter().find(|v| v["type"] == "accounting").expect("accounting")["data"];
        let kind = if probe.starts_with("syscall") { "sys_enter" } else { "tracepoint" };
        let k = &acct["kernel"]["kinds"][kind];
        assert_eq!(k["emitted"], 200, "{acct}");
        assert!(k["filtered"].as_u64().unwrap() >= 300, "the 300 small writes are filtered in the kernel: {acct}");
        assert_eq!(acct["plugins"][0]["filtered"], 0, "nothing reached the host to be filtered there: {acct}");
        assert_eq!(acct["plugins"][0]["delivered"], 200, "{acct}");
    }
}

#[test]
fn list_shows_a_tracepoints_fields_as_its_format_file_declares_them() {
    if !require_root() {
        return;
    }
    for event in ["signal/signal_generate", "sched/sched_switch", "syscalls/sys_enter_openat"] {
        let format = std::fs::read_to_string(format!("/sys/kernel/tracing/events/{event}/format"))
            .unwrap_or_else(|e| panic!("{event}: {e}"));
        let declared: Vec<String> = format
            .lines()
            .filter_map(|l| l.trim().strip_prefix("field:"))
            .filter_map(|l| l.split_once(';').map(|(decl, _)| format!("{decl};")))
            .filter(|d| !d.contains(" common_"))
            .collect();
        let name = format!("tracepoint:{}", event.replace('/', ":"));
        let o = run(wasmtap().args(["list", &name]));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some(name.as_str()));
        let listed: Vec<String> = lines.map(|l| l.trim().to_string()).collect();
        assert_eq!(listed, declared, "{name}");
    }
}

#[test]
fn unknown_and_unsupported_probes_name_the_probe_and_the_reason() {
    let cases = [
        ("tracepoint:signal:signal_generat", "did you mean `signal:signal_generate`"),
        ("kprobe:do_sys_openat2", "kprobes are not configured"),
        ("fentry:vfs_read", "refuses fentry"),
        ("uprobe:libc:mallok", "did you mean `malloc`"),
        ("usdt:/bin/true:nope:nothing", "no USDT probe"),
    ];
    for (probe, want) in cases {
        let o = run(wasmtap().args([
            "run",
            wasm("probe").to_str().unwrap(),
            "--param",
            &format!("probe={probe}"),
            "-d",
            "1",
        ]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{probe}: {err}");
        assert!(err.contains(probe) || err.contains(want), "{probe}: {err}");
        assert!(err.contains(want), "{probe}: expected `{want}` in: {err}");
        assert_eq!(err.lines().count(), 1, "{probe}: one line: {err}");
    }
}

#[test]
fn a_cgroup_filter_keeps_only_the_tasks_in_that_cgroup() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .find(|r| {
            std::path::Path::new(r).join("cgroup.procs").exists()
                && std::path::Path::new(r).join("cgroup.subtree_control").exists()
        })
        .expect("a cgroup v2 mount");
    let name = format!("wasmtap-test-{}", std::process::id());
    let dir = std::path::Path::new(root).join(&name);
    std::fs::create_dir_all(&dir).expect("create a cgroup");
    let w = workload("write_sizes");
    let tracer = wasmtap()
        .args(["run", wasm("probe").to_str().unwrap(), "--param", "probe=syscall:write:entry"])
        .args(["--param", "where=count>4096", "--param", &format!("cgroup={name}"), "-d", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start wasmtap");
    std::thread::sleep(std::time::Duration::from_millis(2000));
    // One run inside the cgroup, one outside: only the first may be counted.
    let inside = format!("echo $$ > {}/cgroup.procs && exec {}", dir.display(), w.display());
    assert!(std::process::Command::new("sh").args(["-c", &inside]).status().unwrap().success());
    assert!(std::process::Command::new(&w).status().unwrap().success());
    let o = tracer.wait_with_output().expect("wasmtap ends");
    let _ = std::fs::remove_dir(&dir);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    assert_eq!(map_value(&out, "events", "syscall:write:entry"), Some(200), "{out}");
}

#[test]
fn interval_begin_and_end_fire_in_order() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let (out, _) = probe_run("syscall:getppid:entry", &["every=300ms"], "sleep 1.1", &[]);
    let marks: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| matches!(*w, "begin" | "tick" | "end"))
        .collect();
    assert_eq!(marks, ["begin", "tick", "tick", "tick", "end"], "{out}");
}

#[test]
fn recorded_tracepoints_stacks_and_uprobes_replay_without_privileges() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("wasmtap-probes-rr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (probe, mode, cmd) in [
        ("tracepoint:signal:signal_generate", "fields", workload("signals").display().to_string()),
        ("profile:hz:99", "symbols", format!("{} 1000", workload("spin_func").display())),
        ("uprobe:libc:malloc", "count", format!("{} 300", workload("malloc_calls").display())),
    ] {
        let file = dir.join(format!("probes-{mode}.wtrec"));
        let plugin = wasm("probe");
        let params = ["--param", &format!("probe={probe}"), "--param", &format!("mode={mode}")];
        let o = run(wasmtap().arg("record").arg(&plugin).args(params).args(["-c", &cmd, "-o"]).arg(&file));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let live: String =
            stdout(&o).lines().filter(|l| l.contains('=') || l.starts_with('@')).map(|l| format!("{l}\n")).collect();
        std::process::Command::new("chmod").args(["-R", "a+rX"]).arg(&dir).status().unwrap();
        let replay = run(std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(wasmtap_bin())
            .arg("replay")
            .arg(&file)
            .arg(&plugin)
            .args(params));
        assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
        let replayed: String = stdout(&replay)
            .lines()
            .filter(|l| l.contains('=') || l.starts_with('@'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(replayed, live, "{probe}: replay as nobody must print what the live run printed");
        assert!(live.contains("wasmtap_hot_loop") || mode != "symbols", "{live}");
        assert!(live.contains("@events[uprobe:libc:malloc]: 300") || mode != "count", "{live}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_optional_probe_the_kernel_lacks_is_skipped_with_a_warning() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let o = run(wasmtap().args([
        "run",
        wasm("probe").to_str().unwrap(),
        "--param",
        "probe=kprobe:do_sys_openat2",
        "--param",
        "optional=true",
        "--param",
        "every=100ms",
        "-d",
        "1",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(err.contains("optional probe skipped") && err.contains("kprobes are not configured"), "{err}");
    assert!(out.contains("begin 0") && out.contains("end 0"), "the rest of the plan still runs:\n{out}");
}

#[test]
fn btf_sched_switch_carries_the_tgid_of_a_thread_switched_out() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = workload("thread_sleep").display().to_string();
    let (out, _) = probe_run("btf:sched_switch", &["mode=fields"], &cmd, &[]);
    let (pid, tid) = out
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.strip_prefix("pid ")?.split_whitespace().collect();
            Some((w.first()?.parse::<u32>().ok()?, w.get(2)?.parse::<u32>().ok()?))
        })
        .unwrap_or_else(|| panic!("workload output missing:\n{out}"));
    assert_ne!(pid, tid);
    let want = format!("prev_pid={tid} prev_tgid={pid} ");
    let switches = out.lines().filter(|l| l.contains(&want)).count();
    assert!(switches >= 5, "the sleeping thread is switched out at least 5 times with its tgid ({switches}):\n{out}");
}

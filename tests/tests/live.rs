//! Live tracing against workloads with known ground truth. Needs root and BPF: in CI
//! these run and must pass; elsewhere without root they skip with a message.

use wasmtap_tests::*;

#[test]
fn syscount_counts_exactly_one_million_getppid_under_c() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("getppid_loop");
    let cmd = format!("{} 1000000", w.display());
    let o = run(wasmtap().args(["run", "syscount", "-c", &cmd, "--stats"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(1_000_000), "{out}");
    assert_eq!(map_value(&out, "process", "getppid_loop").map(|n| n >= 1_000_000), Some(true), "{out}");
    assert!(err.contains(", 0 lost"), "accounting must report no loss:\n{err}");

    let o = run(wasmtap().args(["run", "syscount", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let map = lines
        .iter()
        .find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some())
        .expect("a @syscall map record");
    assert_eq!(map["data"]["@syscall"]["getppid"], 1_000_000);
    let lost = lines.iter().find(|v| v["type"] == "lost_events").expect("lost_events record");
    assert_eq!(lost["data"]["events"], 0);
}

/// The `kernel` object of the accounting record of a JSON run.
fn kernel_accounting(lines: &[serde_json::Value]) -> &serde_json::Value {
    &lines.iter().find(|v| v["type"] == "accounting").expect("accounting record")["data"]["kernel"]
}

#[test]
fn kernel_counts_every_getppid_of_a_streamed_run_in_its_own_row() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("getppid_loop");
    let cmd = format!("{} 200000", w.display());
    let syscount = |params: &[&str]| {
        let mut args = vec!["run", "syscount", "-c", &cmd, "-o", "json", "--stats", "--param", "mode=stream"];
        for p in params {
            args.extend(["--param", p]);
        }
        let o = run(wasmtap().args(&args));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        json_lines(&stdout(&o))
    };

    // Every syscall streamed: getppid (110 on x86_64) has its own row, and every call
    // of the workload was written to the ring, none lost.
    let lines = syscount(&[]);
    let kernel = kernel_accounting(&lines);
    let row = &kernel["probes"]["sys_enter:110"];
    assert_eq!(row["emitted"], 200_000, "{kernel}");
    assert_eq!(row["dropped"], 0, "{kernel}");
    let seen = ["filtered", "emitted", "dropped"].map(|s| row[s].as_u64().unwrap()).iter().sum::<u64>();
    assert!(seen >= 200_000, "{kernel}");
    let map = lines.iter().find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some()).expect("@syscall map");
    assert_eq!(map["data"]["@syscall"]["getppid"], 200_000, "the plugin got what the kernel emitted");
    // syscount streams sys_enter only, and aggregates nothing in the kernel; the rows
    // add up to the per-kind totals.
    let probes = kernel["probes"].as_object().expect("probe rows");
    assert!(probes.keys().all(|k| k.starts_with("sys_enter:")), "{kernel}");
    assert!(kernel.get("aggregated").is_none(), "{kernel}");
    for slot in ["filtered", "emitted", "dropped"] {
        let sum: u64 = probes.values().map(|r| r[slot].as_u64().unwrap()).sum();
        assert_eq!(kernel["kinds"]["sys_enter"][slot], sum, "{slot}: {kernel}");
    }
    assert_eq!(kernel["pipeline_dropped"], 0);

    // Only getppid: the kernel rejects every other syscall by its number, and counts
    // each rejection in that syscall's row, not in getppid's.
    let lines = syscount(&["syscall=getppid"]);
    let kernel = kernel_accounting(&lines);
    let probes = kernel["probes"].as_object().expect("probe rows");
    assert_eq!(probes["sys_enter:110"]["emitted"], 200_000, "{kernel}");
    for (name, row) in probes.iter().filter(|(k, _)| *k != "sys_enter:110") {
        assert_eq!(row["emitted"], 0, "{name}: {kernel}");
        assert!(row["filtered"].as_u64().unwrap() > 0, "{name}: {kernel}");
    }
    assert!(probes.len() > 1, "the workload's other syscalls were filtered by number: {kernel}");
}

#[test]
fn execsnoop_reports_every_exec_of_a_burst_with_pids_and_argv() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("exec_burst");
    let cmd = format!("{} 200", w.display());
    let o = run(wasmtap().args(["run", "execsnoop", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let err = stderr(&o);
    let parent: i64 =
        err.lines().find_map(|l| l.strip_prefix("parent ")).and_then(|p| p.trim().parse().ok()).expect("workload pid");
    let parent_row =
        lines.iter().find(|v| v["type"] == "row" && v["data"]["PID"] == parent).expect("the workload's own exec");
    assert!(parent_row["data"]["ARGS"].as_str().unwrap().ends_with("exec_burst 200"), "{parent_row}");
    let rows: Vec<_> = lines
        .iter()
        .filter(|v| v["type"] == "row" && v["data"]["ARGS"].as_str().is_some_and(|a| a.starts_with("/bin/true burst-")))
        .collect();
    assert_eq!(rows.len(), 200, "every exec of /bin/true must be reported");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["data"]["ARGS"], format!("/bin/true burst-{i}"));
        assert_eq!(r["data"]["PPID"], parent, "ppid of {r}");
        assert_eq!(r["data"]["RET"], 0);
        assert_ne!(r["data"]["PID"], parent);
    }
    let pids: std::collections::BTreeSet<_> = rows.iter().map(|r| r["data"]["PID"].as_i64().unwrap()).collect();
    assert_eq!(pids.len(), 200, "each exec is its own child process");
    // The workload printed each child's pid: they must be the pids reported.
    let printed: std::collections::BTreeSet<i64> =
        err.lines().filter_map(|l| l.strip_prefix("child ").and_then(|p| p.trim().parse().ok())).collect();
    assert_eq!(printed, pids);
}

#[test]
fn pid_filter_keeps_a_busier_process_out_in_the_kernel() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let busy = workload("busy_getppid");
    let mut quiet = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    let mut noisy = std::process::Command::new(&busy).arg("30").spawn().expect("spawn busy workload");
    let pid = quiet.id().to_string();
    let o = run(wasmtap().args(["run", "syscount", "-p", &pid, "-d", "2", "-o", "json", "--param", "syscall=getppid"]));
    let _ = noisy.kill();
    let _ = quiet.kill();
    let _ = (noisy.wait(), quiet.wait());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let acct = lines.iter().find(|v| v["type"] == "accounting").expect("accounting record");
    // syscount counts in the kernel: the aggregation collector saw the busy process's
    // syscalls and filtered every one of them before aggregating.
    let agg = &acct["data"]["kernel"]["aggregated"];
    assert_eq!(agg["emitted"], 0, "no event of another process may be aggregated: {acct}");
    assert_eq!(agg["dropped"], 0, "{acct}");
    assert!(agg["filtered"].as_u64().unwrap() > 100_000, "the busy process's syscalls are counted as filtered: {acct}");
    assert_eq!(acct["data"]["kernel"]["kinds"], serde_json::json!({}), "nothing streamed: {acct}");
    assert_eq!(acct["data"]["plugins"][0]["delivered"], 0);
    assert!(!lines.iter().any(|v| v["type"] == "map" && v["data"]["@syscall"].get("getppid").is_some()), "{lines:?}");
}

#[test]
fn record_then_replay_is_byte_identical_and_matches_the_live_run() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("getppid_loop");
    let cmd = format!("{} 300000", w.display());
    let dir = std::env::temp_dir().join(format!("wasmtap-rr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.wtrec");
    let live = run(wasmtap().args(["record", "syscount", "-c", &cmd, "-o"]).arg(&file));
    assert_eq!(live.status.code(), Some(0), "{}", stderr(&live));
    assert_eq!(map_value(&stdout(&live), "syscall", "getppid"), Some(300_000));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "a recording is private");
    // World-readable so an unprivileged user can replay it.
    std::process::Command::new("chmod").args(["-R", "a+rX"]).arg(&dir).status().unwrap();
    let replay = || {
        run(std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(wasmtap_bin())
            .args(["replay"])
            .arg(&file)
            .arg(wasm("syscount")))
    };
    let (a, b) = (replay(), replay());
    assert_eq!(a.status.code(), Some(0), "replay as nobody: {}", stderr(&a));
    assert_eq!(a.stdout, b.stdout, "two replays differ");
    let live_out = stdout(&live);
    let live_results = &live_out[live_out.find("Top ").unwrap()..];
    assert_eq!(stdout(&a), live_results, "replay must print what the live run printed");
    std::fs::remove_dir_all(dir).unwrap();
}

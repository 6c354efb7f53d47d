//! The vetted plugins on the live system, each against a workload that knows what it did
//! (tests/workloads: opener, forker, writer). Root (BPF); CI runs these as root.

use std::collections::BTreeMap;

use serde_json::Value;
use wasmtap_tests::*;

/// `key VALUE` from the workload's stderr report, e.g. `pid 123`.
fn reported<T: std::str::FromStr>(err: &str, key: &str) -> T {
    err.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("the workload did not report `{key}`: {err}"))
}

/// The rows of `plugin` (optionally only those of process `pid`).
fn rows<'a>(lines: &'a [Value], plugin: &str, pid: Option<i64>) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|v| v["type"] == "row" && v["plugin"] == plugin)
        .map(|v| &v["data"])
        .filter(|d| pid.is_none_or(|p| d["PID"] == p))
        .collect()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not text: {v}"))
}

/// `name value name value…` on one line, as a map.
fn fields(line: &str) -> BTreeMap<String, i64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.chunks(2).filter_map(|kv| Some((kv[0].to_string(), kv.get(1)?.parse().ok()?))).collect()
}

#[test]
fn open_plugins_report_every_open_of_the_opener_as_it_happened() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("opener");
    let cmd = format!("{} 20 6 5 300", w.display());
    let o = run(wasmtap()
        .args(["run", "opensnoop", "opentrace", "openaggr", "--param", "openaggr.interval=100ms"])
        .args(["-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    let lines = json_lines(&out);
    let pid: i64 = reported(&err, "pid ");
    let dir: String = reported(&err, "dir ");
    let truth = fields(err.lines().find(|l| l.starts_with("create ")).expect("totals"));

    // opensnoop: exactly the opens of paths under the workload's directory, as it made them.
    let snoop = rows(&lines, "opensnoop", Some(pid));
    let mine: Vec<_> = snoop.iter().filter(|r| text(&r["PATH"]).starts_with(&dir)).collect();
    let creates = mine.iter().filter(|r| text(&r["FLAGS"]).contains("O_CREAT")).count() as i64;
    let failed: Vec<_> = mine.iter().filter(|r| r["FD"] == -1).collect();
    assert_eq!(creates, truth["create"], "{mine:#?}");
    assert_eq!(mine.len() as i64 - creates, truth["open"]);
    assert_eq!(failed.len() as i64, truth["fail"]);
    assert!(failed.iter().all(|r| r["ERR"] == "ENOENT"), "{failed:?}");
    let count = |path: &str, flags: &str| {
        mine.iter().filter(|r| text(&r["PATH"]) == format!("{dir}{path}") && r["FLAGS"] == flags).count()
    };
    // 20 opens, open(2), the relative open after chdir, the one relative to a dir fd.
    assert_eq!(count("/exists", "O_RDONLY"), 20 + 3);
    assert_eq!(count("/exists", "O_WRONLY|O_CREAT|O_TRUNC"), 1, "creat(2)");
    assert_eq!(count("/new-0", "O_WRONLY|O_CREAT|O_APPEND"), 1, ">>");
    assert_eq!(count("/new-4", "O_WRONLY|O_CREAT|O_TRUNC"), 1);
    assert_eq!(count("", "O_RDONLY|O_DIRECTORY"), 1);
    assert_eq!(count("/missing-2x", "O_RDONLY"), 1, "openat2 of a relative path, made absolute");
    assert!(mine.iter().filter(|r| r["FD"] != -1).all(|r| r["ERR"] == "-" && r["FD"].as_i64() >= Some(3)));

    // opentrace: one line per open of the process, in the book's format.
    let printed: String = lines
        .iter()
        .filter(|v| v["type"] == "printf" && v["plugin"] == "opentrace")
        .map(|v| text(&v["data"]).to_string())
        .collect();
    let head = format!("opener[{pid}(0:0)] ");
    let traced: Vec<&str> = printed.lines().filter(|l| l.starts_with(&head)).collect();
    assert_eq!(traced.len(), snoop.len(), "{printed}");
    for want in [
        format!("creat(\"{dir}/exists\", O_WRONLY|O_CREAT|O_TRUNC) = 3"),
        format!("open(\"{dir}/exists\", O_RDONLY) = 3"),
        format!("openat(\"{dir}/missing-5\", O_RDONLY) = -2 ENOENT"),
        format!("openat(\"{dir}/new-0\", O_WRONLY|O_CREAT|O_APPEND) = 3"),
        "openat(\"exists\", O_RDONLY) = 3".to_string(),
        "openat2(\"missing-2x\", O_RDONLY) = -2 ENOENT".to_string(),
    ] {
        assert!(traced.contains(&format!("{head}{want}").as_str()), "no `{want}` in\n{printed}");
    }

    // openaggr: the intervals add up to what opensnoop saw of the process, all of it.
    let aggr = rows(&lines, "openaggr", Some(pid));
    let sum = |col: &str| aggr.iter().map(|r| r[col].as_i64().unwrap()).sum::<i64>();
    let all_creates = snoop.iter().filter(|r| text(&r["FLAGS"]).contains("O_CREAT")).count() as i64;
    let all_failed = snoop.iter().filter(|r| r["FD"] == -1).count() as i64;
    assert_eq!(sum("CREATE"), all_creates);
    assert_eq!(sum("OPEN"), snoop.len() as i64 - all_creates);
    assert_eq!(sum("FAIL"), all_failed);
    assert_eq!(sum("SUCCESS"), snoop.len() as i64 - all_failed);
    assert!(aggr.len() >= 2, "the 300 ms pause splits the opens over intervals: {aggr:?}");
    let dates = lines.iter().filter(|v| v["plugin"] == "openaggr" && v["type"] == "printf").count();
    assert!(dates >= 3, "a date line per interval");
}

/// A wait status as exitsnoop and proclife print it.
fn status_text(status: i64) -> String {
    match status & 0x7f {
        0 => format!("exit {}", status >> 8),
        15 => "killed by SIGTERM".into(),
        sig => panic!("the workload does not make signal {sig}"),
    }
}

/// The forker's children: (pid, what, wait status), and the burner's CPU time.
fn children(err: &str) -> (Vec<(i64, String, i64)>, i64, i64) {
    let kids = err
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.strip_prefix("child ")?.split(' ').collect();
            Some((w[0].parse().ok()?, w[1].to_string(), w[2].parse().ok()?))
        })
        .collect();
    let burner = err.lines().find_map(|l| l.strip_prefix("burner ")).expect("burner line");
    let b: Vec<&str> = burner.split(' ').collect();
    (kids, b[0].parse().unwrap(), b[2].parse().unwrap())
}

#[test]
fn exitsnoop_reports_each_childs_fate_lifetime_and_cpu_time() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("forker");
    let cmd = format!("{} 8 200", w.display());
    let o = run(wasmtap().args(["run", "exitsnoop", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let lines = json_lines(&stdout(&o));
    let parent: i64 = reported(&err, "parent ");
    let (kids, burner, burner_cpu_ns) = children(&err);
    assert_eq!(kids.len(), 10);
    for (pid, what, status) in &kids {
        let mine = rows(&lines, "exitsnoop", Some(*pid));
        assert_eq!(mine.len(), 1, "one exit of {pid} ({what}), not its threads: {mine:?}");
        assert_eq!(mine[0]["PPID"], parent);
        assert_eq!(text(&mine[0]["EXIT"]), status_text(*status), "{what}");
    }
    let b = rows(&lines, "exitsnoop", Some(burner))[0];
    let (cpu_ms, age_ms) = (b["CPU_MS"].as_i64().unwrap(), b["AGE_MS"].as_i64().unwrap());
    let measured_ms = burner_cpu_ns / 1_000_000;
    // cpu_ns is the scheduler's runtime, brought up to date at the last tick or switch:
    // at most a tick (4 ms at HZ=250) behind, plus the printf and _exit after measuring.
    assert!((measured_ms - 5..=measured_ms + 10).contains(&cpu_ms), "cpu {cpu_ms} ms vs measured {measured_ms} ms");
    assert!(age_ms >= cpu_ms, "a process cannot use more CPU than it lived on one thread");
    // user + system are sampled per tick: right to a few ticks.
    let sampled = b["USER_MS"].as_i64().unwrap() + b["SYS_MS"].as_i64().unwrap();
    assert!((measured_ms - 40..=measured_ms + 40).contains(&sampled), "user+sys {sampled} ms vs {measured_ms} ms");
    let me = rows(&lines, "exitsnoop", Some(parent));
    assert_eq!((me.len(), text(&me[0]["EXIT"])), (1, "exit 0"));

    // With threads, the threaded child's thread exit shows too, under its own tid.
    let o = run(wasmtap().args(["run", "exitsnoop", "--param", "threads=true", "-c", &cmd, "-o", "json"]));
    let err = stderr(&o);
    let (kids, _, _) = children(&err);
    let threaded = kids.iter().find(|k| k.1 == "threads").unwrap().0;
    let lines = json_lines(&stdout(&o));
    let exits = rows(&lines, "exitsnoop", Some(threaded));
    assert_eq!(exits.len(), 2, "{exits:?}");
    assert_eq!(exits.iter().filter(|r| r["TID"] != threaded).count(), 1);
}

#[test]
fn proclife_shows_each_childs_fork_exec_exit_and_wait_in_order() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("forker");
    let cmd = format!("{} 8 20", w.display());
    let o = run(wasmtap().args(["run", "proclife", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let lines = json_lines(&stdout(&o));
    let parent: i64 = reported(&err, "parent ");
    let (kids, _, _) = children(&err);
    let all = rows(&lines, "proclife", None);
    let times: Vec<u64> = all.iter().map(|r| r["TIME"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "lines in time order");
    let at = |pred: &dyn Fn(&Value) -> bool| all.iter().position(|r| pred(r));
    let mut last = 0;
    for (pid, what, status) in &kids {
        let fork = at(&|r| r["PID"] == parent && r["EVENT"] == "fork" && r["DETAIL"] == format!("child {pid}"));
        let exit = at(&|r| r["PID"] == *pid && r["EVENT"] == "exit");
        let wait = at(&|r| {
            r["PID"] == parent && r["EVENT"] == "wait4" && text(&r["DETAIL"]).starts_with(&format!("reaped {pid}:"))
        });
        let (fork, exit, wait) = (fork.expect("fork"), exit.expect("exit"), wait.expect("wait"));
        assert!(last <= fork && fork < exit && exit < wait, "{what} {pid}: fork {fork} exit {exit} wait {wait}");
        assert_eq!(text(&all[exit]["DETAIL"]), status_text(*status));
        assert_eq!(text(&all[wait]["DETAIL"]), format!("reaped {pid}: {}", status_text(*status)));
        let execs: Vec<_> = all.iter().filter(|r| r["PID"] == *pid && r["EVENT"] == "exec").collect();
        match what.as_str() {
            "true" => assert_eq!(text(&execs[0]["DETAIL"]), "true = 0"),
            "sh" => assert_eq!(text(&execs[0]["DETAIL"]), "sh -c exit 3 = 0"),
            _ => assert!(execs.is_empty()),
        }
        last = wait;
    }
}

#[test]
fn forktime_times_every_exec_of_each_command() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("forker");
    let cmd = format!("{} 8 20", w.display());
    let o = run(wasmtap().args(["run", "forktime", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let all = rows(&lines, "forktime", None);
    for (comm, args) in [("true", "true"), ("sh", "sh -c exit 3")] {
        let r = all.iter().find(|r| r["EXECNAME"] == comm && r["ARGS"] == args).unwrap_or_else(|| panic!("{all:?}"));
        assert_eq!(r["COUNT"], 2, "{r}");
        for phase in ["FORK", "SETUP", "EXEC", "RUN"] {
            let (avg, max) =
                (r[format!("{phase}_AVG_US")].as_i64().unwrap(), r[format!("{phase}_MAX_US")].as_i64().unwrap());
            assert!(avg >= 0 && avg <= max, "{phase}: {r}");
        }
        assert!(r["EXEC_AVG_US"].as_i64() > Some(0), "an exec takes time: {r}");
    }
}

#[test]
fn wstat_counts_each_fds_writes_and_bytes_exactly_across_intervals() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("writer");
    let cmd = format!("{} 100 1000 5 300", w.display());
    let o = run(wasmtap().args(["run", "wstat", "--param", "interval=100ms", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let lines = json_lines(&stdout(&o));
    let pid: i64 = reported(&err, "pid ");
    let mine = rows(&lines, "wstat", Some(pid));
    let truth: Vec<_> = err.lines().filter(|l| l.starts_with("fd ")).map(fields).collect();
    assert_eq!(truth.len(), 4);
    for t in &truth {
        let of_fd: Vec<_> = mine.iter().filter(|r| r["FD"] == t["fd"]).collect();
        let sum = |c: &str| of_fd.iter().map(|r| r[c].as_i64().unwrap()).sum::<i64>();
        assert_eq!((sum("OPS"), sum("BYTES"), sum("ERRORS")), (t["ops"], t["bytes"], t["errors"]), "fd {}", t["fd"]);
        assert!(of_fd.iter().all(|r| r["KBYTES"] == r["BYTES"].as_i64().unwrap() / 1024));
    }
    let file_rows = mine.iter().filter(|r| r["FD"] == truth[0]["fd"]).count();
    assert!(file_rows >= 2, "the pause splits the file's writes over two intervals");
}

#[test]
fn syscount_counts_the_writers_failures_by_errno_and_times_its_calls() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("writer");
    let cmd = format!("{} 50 100 7 0", w.display());
    let params = ["errors=true", "latency=true", "syscall=write,pwrite64", "top=0"];
    let o =
        run(wasmtap().arg("run").arg("syscount").args(params.iter().flat_map(|p| ["--param", p])).args(["-c", &cmd]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(map_value(&out, "errors", "write, EBADF"), Some(7), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("@errors[")).count(), 1, "no other failures: {out}");
    // write: 50 to the file, 50 to the pipe, 7 failing, 5 report lines to stderr.
    let writes = 50 + 50 + 7 + 5;
    assert_eq!(map_value(&out, "syscall", "write"), Some(writes), "{out}");
    assert_eq!(map_value(&out, "calls", "write"), Some(writes), "every write timed: {out}");
    assert_eq!(map_value(&out, "calls", "pwrite64"), Some(50));
    let avg = map_value(&out, "avg_ns", "write").expect("average");
    assert!(avg > 0 && map_value(&out, "total_us", "write") >= Some(0));
}

#[test]
fn plugin_help_shows_and_checks_parameters() {
    // No root needed: --help reads the plugin, and a bad value stops the start.
    let o = run(wasmtap().args(["run", "opensnoop", "--help"]));
    let text = stdout(&o) + &stderr(&o);
    for p in ["failed", "name", "path", "flags", "full", "latency"] {
        assert!(text.contains(p), "--help lacks `{p}`: {text}");
    }
    // The plugin's parameters come first, then run's options.
    assert!(stdout(&o).starts_with("Plugin opensnoop "), "{text}");
    let (params, options) = text.split_once("Options of wasmtap run:").unwrap_or_else(|| panic!("{text}"));
    assert!(params.contains("--param failed=") && options.contains("Usage: wasmtap run"), "{text}");
    // Each subcommand has its own help: record's -o is the recording's file.
    let o = run(wasmtap().args(["record", "--help"]));
    let help = stdout(&o);
    assert!(help.contains("Usage: wasmtap record") && help.contains("-o, --output <FILE>"), "{help}");
    assert!(help.contains("The recording to write") && !help.contains("Output format"), "{help}");
    // A recording named like a format is refused before anything starts.
    let o = run(wasmtap().args(["record", "syscount", "-o", "json", "-d", "1s"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`json` looks like an output format"), "{}", stderr(&o));
    assert!(!std::path::Path::new("json").exists());
    let o = run(wasmtap()
        .args(["replay", "golden/files.wtrec", "opensnoop", "--param", "flags=O_CRAET"])
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))));
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("flags: `O_CRAET` is not an open flag"), "{}", stderr(&o));
    let o = run(wasmtap()
        .args(["replay", "golden/procs.wtrec", "exitsnoop", "--param", "min-age=soon"])
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))));
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("min-age"), "{}", stderr(&o));
}

#[test]
fn runqlat_times_each_wait_of_the_ping_pong_and_no_one_elses() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("pingpong");
    // `-c` keeps the events whose current task is the workload's: at a wakeup the waker,
    // at a switch the task leaving the CPU. In a ping-pong both are the workload.
    let o = run(wasmtap()
        .args(["run", "runqlat", "-o", "json", "-d", "30s"])
        .arg("-c")
        .arg(format!("{} 20000", w.display())));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The workload's own stdout line ("ops N ns_per_op X") shares the stream.
    let out: String = stdout(&o).lines().filter(|l| !l.starts_with("ops ")).map(|l| format!("{l}\n")).collect();
    let lines = json_lines(&out);
    let hist = lines.iter().find(|v| v["type"] == "hist").unwrap_or_else(|| panic!("no histogram: {lines:?}"));
    let samples: u64 =
        hist["data"]["@nsecs"].as_array().expect("buckets").iter().map(|b| b["count"].as_u64().unwrap()).sum();
    // Each round trip blocks the parent in read until the child writes, and the child
    // likewise: every one ends with a wakeup and a switch to the woken task, usually
    // two. Waking a task on an idle CPU runs in that CPU's idle task, and the switch to
    // it leaves the idle task: the scope is the woken thread's, so these count.
    assert!(samples >= 20_000, "{samples} waits timed for 20000 round trips");
    // And the scope holds: the rest of the system's waits are not in it, only a few
    // preemptions of the workload beside its two waits per round trip.
    assert!(samples <= 41_000, "{samples} waits timed for 20000 round trips of two processes");
}

#[test]
fn cpudist_adds_a_commands_slices_up_to_its_own_cpu_time() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 40 rounds of 5 ms of CPU and a 2 ms sleep: at least 40 slices, whose total is the
    // workload's on-CPU time as the kernel keeps it (`/proc/self/schedstat`).
    // And one round of 40 ms: the command's first slice, from the moment -c lets it run,
    // is all of its time; it was switched in by a task outside the scope, before the
    // command had run under the collectors' eyes.
    let w = workload("slices");
    for (by, rounds, ms) in [("all", 40, 5), ("process", 40, 5), ("all", 1, 40)] {
        let o = run(wasmtap()
            .args(["run", "cpudist", "-o", "json", "-d", "30s", "--param"])
            .arg(format!("by={by}"))
            .arg("-c")
            .arg(format!("{} {rounds} {ms}", w.display())));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = stdout(&o);
        let truth = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("slices {rounds} cpu_ns ")))
            .unwrap_or_else(|| panic!("{text}"));
        let truth: f64 = truth.trim().parse().unwrap();
        let lines =
            json_lines(&text.lines().filter(|l| l.starts_with('{')).map(|l| format!("{l}\n")).collect::<String>());
        let hist = lines.iter().find(|v| v["type"] == "hist").unwrap_or_else(|| panic!("no histogram: {lines:?}"));
        let total =
            lines.iter().find(|v| v["data"].get("@total_nsecs").is_some()).unwrap_or_else(|| panic!("{lines:?}"));
        let (buckets, total) = if by == "all" {
            (
                hist["data"]["@nsecs"].clone(),
                total["data"]["@total_nsecs"].as_f64().unwrap_or_else(|| panic!("{total}")),
            )
        } else {
            // One process, keyed by pid and comm: the workload's, and its pid under
            // wasmtap's name for the moments between the fork and the exec.
            let per = hist["data"]["@nsecs"].as_object().unwrap_or_else(|| panic!("{hist}"));
            let key = per.keys().find(|k| k.ends_with(",slices")).unwrap_or_else(|| panic!("{hist}"));
            let pid = key.split(',').next().unwrap().to_string();
            assert!(per.keys().all(|k| k.starts_with(&format!("{pid},"))), "only the workload's process: {hist}");
            let totals = total["data"]["@total_nsecs"].as_object().unwrap_or_else(|| panic!("{total}"));
            (per[key].clone(), totals.values().map(|v| v.as_f64().unwrap()).sum())
        };
        let slices: u64 = buckets.as_array().expect("buckets").iter().map(|b| b["count"].as_u64().unwrap()).sum();
        assert!(slices >= rounds, "{slices} slices for {rounds} rounds (by={by})");
        // Apart from the command's last slice (after its read of schedstat), counted here
        // only, and its first moments after the fork, before it waited to be let run.
        // Short of the kernel's figure by at most 2 %: no slice lost. Past it by at most
        // 2 % and 10 ms: a fresh-clone CI run once saw 7.9 ms more than schedstat (+3.9 %,
        // by=all, 40 rounds), not seen here in dozens of runs and not explained yet: about
        // one round's slice and sleep, which a start kept past its slice's end would add
        // (or a slow exit after the read). Open in issue 24's cpudist.
        assert!(
            total >= truth * 0.98 && total <= truth * 1.02 + 10e6,
            "slices add up to {total} ns, the kernel says {truth} (by={by}, {rounds} rounds of {ms} ms)"
        );
    }
}

/// A loop device over a scratch file, detached when dropped.
struct LoopDevice {
    path: String,
    /// `MAJOR:MINOR`, as /sys/block/NAME/dev says.
    disk: String,
    file: std::path::PathBuf,
}

impl LoopDevice {
    /// Backed by a file in memory where there is a tmpfs (/dev/shm): writes to it are
    /// never held back by the machine's other disk traffic.
    fn new(name: &str) -> LoopDevice {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() { shm.to_path_buf() } else { target_dir() };
        let file = dir.join(format!("wasmtap-{name}-{}.img", std::process::id()));
        std::fs::File::create(&file).and_then(|f| f.set_len(16 << 20)).expect("scratch file");
        let o = run(std::process::Command::new("losetup").args(["-f", "--show"]).arg(&file));
        assert!(o.status.success(), "losetup: {}", stderr(&o));
        let path = stdout(&o).trim().to_string();
        let name = path.trim_start_matches("/dev/");
        let disk = std::fs::read_to_string(format!("/sys/block/{name}/dev")).expect("its dev").trim().to_string();
        LoopDevice { path, disk, file }
    }

    /// `count` direct (uncached) 4 KiB writes, then as many reads: one request each.
    fn write_and_read(&self, count: u32) {
        for (dir, ifile, ofile) in
            [("oflag=direct", "/dev/zero", self.path.as_str()), ("iflag=direct", self.path.as_str(), "/dev/null")]
        {
            let o = run(std::process::Command::new("dd").arg(format!("if={ifile}")).arg(format!("of={ofile}")).args([
                "bs=4096",
                &format!("count={count}"),
                dir,
            ]));
            assert!(o.status.success(), "dd: {}", stderr(&o));
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = run(std::process::Command::new("losetup").args(["-d", &self.path]));
        let _ = std::fs::remove_file(&self.file);
    }
}

#[test]
fn biosnoop_and_biolatency_see_every_request_made_to_a_loop_device() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let dev = LoopDevice::new("bio");
    let dir = target_dir().join("bio-test");
    std::fs::create_dir_all(&dir).unwrap();
    // Requests complete in another task's context (the loop device's worker, an
    // interrupt): both plugins trace the whole system while 150 writes and 150 reads
    // are made, and until interrupted after.
    let mut cmd = wasmtap();
    cmd.args(["run", "biosnoop", "biolatency", "-o", "json"]).args([
        "--param",
        &format!("biosnoop.disk={}", dev.disk),
        "--param",
        "biolatency.by=disk",
    ]);
    let session = Session::start(cmd, &dir, "bio");
    dev.write_and_read(150);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = session.child.id().to_string();
    assert!(run(std::process::Command::new("kill").args(["-INT", &pid])).status.success());
    let (code, out, err) = session.finish();
    assert_eq!(code, 0, "{err}");
    let lines = json_lines(&out);
    let rows: Vec<_> = lines.iter().filter(|v| v["type"] == "row").map(|v| &v["data"]).collect();
    let ops = |op: char| {
        rows.iter().filter(|r| r["T"].as_str().is_some_and(|t| t.starts_with(op)) && r["BYTES"] == 4096).count()
    };
    let missing = |op: char| -> Vec<i64> {
        let seen: Vec<i64> = rows
            .iter()
            .filter(|r| r["T"].as_str().is_some_and(|t| t.starts_with(op)))
            .filter_map(|r| r["SECTOR"].as_i64())
            .collect();
        (0..150).map(|i| i * 8).filter(|s| !seen.contains(s)).collect()
    };
    // Every request is a row, or counted: a completion that comes in an interrupt taken
    // while another BPF program runs on that CPU (a test suite tracing beside this one)
    // is not run by the kernel, which counts it for the program (`bpf_busy`).
    let acct = accounting(&lines);
    let busy = acct["kernel"]["losses"]["bpf_busy"].as_u64().unwrap_or(0);
    let (writes, reads) = (ops('W') as u64, ops('R') as u64);
    assert!(
        writes <= 150 && reads <= 150 && 300 - writes - reads <= busy,
        "{writes} writes and {reads} reads of 150 each, {busy} counted busy; sectors missing: writes {:?}, \
         reads {:?}; {acct}",
        missing('W'),
        missing('R')
    );
    assert!(rows.iter().all(|r| r["DISK"] == dev.disk.as_str()), "only the loop device: {rows:?}");
    let dd = rows.iter().filter(|r| r["COMM"] == "dd").count();
    assert!(dd >= 150, "the requests issued by dd are its own: {dd} of {}", rows.len());
    // biolatency: the same 300 requests in the loop device's histogram.
    let hist = lines.iter().find(|v| v["type"] == "hist").unwrap_or_else(|| panic!("{lines:?}"));
    let per_disk = hist["data"]["@nsecs"].as_object().unwrap_or_else(|| panic!("{hist}"));
    assert!(per_disk.len() <= 8, "{hist}");
    let buckets = per_disk.get(&dev.disk).unwrap_or_else(|| panic!("{} not in {hist}", dev.disk));
    let count: u64 = buckets.as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert!(count.abs_diff(rows.len() as u64) <= busy, "biolatency times what biosnoop lists ({busy} busy): {hist}");
}

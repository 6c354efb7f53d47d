//! The run-wide guards: the overload guard, which stops a run whose collectors cost the
//! traced system more than `--max-kernel-cpu`, and the watchdog, which ends a run that
//! makes no progress for `--watchdog`. Live tests need root and BPF: in CI they run and
//! must pass.

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use wasmtap_tests::*;

const PROBE: &str = "tracepoint:raw_syscalls:sys_enter";

/// The probe fixture counting every syscall of a command that makes 1,000,000 getppid
/// calls in 400 rounds with 10 ms pauses (about 5 s): each call runs a collector
/// program that streams a record, a few percent of one CPU.
fn costly_run(extra: &[&str]) -> std::process::Output {
    let cmd = format!("{} 400 2500 10", workload("getppid_paced").display());
    let mut c = wasmtap();
    c.arg("run").arg(wasm("probe")).args(["--param", &format!("probe={PROBE}"), "-c", &cmd, "--stats"]);
    run(c.args(extra))
}

#[test]
fn collectors_over_max_kernel_cpu_stop_the_run_saying_so() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let o = costly_run(&["--max-kernel-cpu", "1", "-o", "json"]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "an overload ends the run with problems\n{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("wasmtap: overload:")).collect();
    assert_eq!(said.len(), 1, "one line says why\n{err}");
    assert!(said[0].starts_with("wasmtap: overload: the collectors used "), "{err}");
    assert!(said[0].contains("% of one CPU over "), "{err}");
    assert!(said[0].contains("more than --max-kernel-cpu 1%: "), "{err}");
    assert!(said[0].ends_with("; stopping the run"), "{err}");

    // Then the normal end-of-run reports: the plugin's count and the accounting.
    let lines = json_lines(&out);
    let counted =
        lines.iter().find(|v| v["type"] == "map").expect("the plugin's report")["data"]["@events"][PROBE].clone();
    // The first window opens 1 s after the probes are attached, long before the command ends.
    assert!(u(&counted) > 0 && u(&counted) < 1_000_000, "the run stopped before the command ended: {counted}");
    let acct = &lines.iter().find(|v| v["type"] == "accounting").expect("an accounting record")["data"];
    let cost = &acct["collectors"];
    assert_eq!(cost["tripped"], true, "{cost}");
    assert_eq!((u(&cost["limit_percent"]), u(&cost["windows"])), (1, 1), "{cost}");
    assert!(cost["peak_percent"].as_f64().unwrap() > 1.0, "{cost}");
    // The line names every program that ran in the window, with its runs.
    let ran: Vec<&Json> = cost["programs"].as_array().unwrap().iter().filter(|p| u(&p["runs"]) > 0).collect();
    assert!(!ran.is_empty(), "{cost}");
    for p in ran {
        let named = format!("{} ", p["name"].as_str().unwrap());
        assert!(said[0].contains(&named) && said[0].contains(&format!("({} runs, ", u(&p["runs"]))), "{p}\n{err}");
    }
}

#[test]
fn the_default_kernel_cpu_limit_lets_the_same_run_finish_and_stats_show_the_cost() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let o = costly_run(&[]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("overload"), "{err}");
    let counted = map_value(&out, "events", PROBE).expect("the plugin's count");
    assert!(counted >= 1_000_000, "every getppid call of the command was counted: {counted}\n{err}");
    let cost = err.lines().find(|l| l.starts_with("  collectors' cost: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(cost.contains("limit 100%)") && !cost.contains("exceeded"), "{cost}");
    // About 5 s of run: windows at 1 s and 6 s after attaching, at least the first.
    assert!(cost.contains("windows 1 ") || cost.contains("windows 2 "), "{cost}");
    assert!(
        err.lines().any(|l| l.starts_with("    wt_") && l.contains(" runs, ")),
        "a line per program that ran\n{err}"
    );
}

#[test]
fn a_system_wide_trace_never_shows_the_runs_own_processes() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 7 s: the overload guard's measuring process (`/proc/self/exe __collector-stats`,
    // so named `exe`) starts before the collectors and measures at 1 s and 6 s.
    let o = run(wasmtap().args(["run", "syscount", "-d", "7", "--param", "by=process", "--param", "top=0", "--stats"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    let cost = err.lines().find(|l| l.starts_with("  collectors' cost: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(cost.contains("(windows 2 "), "the measuring process ran twice: {cost}");
    let processes: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("@process[")?.split(']').next()).collect();
    assert!(!processes.is_empty(), "something on the system made a syscall in 7 s\n{out}");
    for ours in ["exe", "wasmtap", "wasmtap-symbols"] {
        assert!(!processes.contains(&ours), "the run traced its own process `{ours}`:\n{out}");
    }
}

/// Wait for `child` to end, up to `limit`; kill it and fail if it does not.
fn wait_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for wasmtap") {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("wasmtap still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes whose command line is exactly `argv`.
fn running(argv: &[String]) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> =
            cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect();
        if args == argv {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn a_stdout_nobody_reads_ends_the_run_and_its_command_after_the_watchdog_timeout() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // A command that runs for 57 s unless ended, each of its calls a row of snoop.
    let argv = vec![workload("busy_getppid").display().to_string(), "57".to_string()];
    let mut c = wasmtap();
    c.arg("run").arg(wasm("snoop")).args(["--param", "probe=syscall:getppid:entry", "-c", &argv.join(" ")]);
    c.args(["--watchdog", "2s"]).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().expect("spawn wasmtap");
    // Held open and never read: the pipe fills with rows within milliseconds.
    let unread = child.stdout.take();
    let status = wait_within(&mut child, Duration::from_secs(30));
    let took = started.elapsed();
    let left = running(&argv);
    for pid in &left {
        // Clean up a leak this test is about to report.
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read stderr");
    drop(unread);
    assert!(left.is_empty(), "the -c command was left running: {left:?}\n{err}");
    assert_eq!(status.code(), Some(1), "{err}");
    // Startup (plugin compile, BPF load) takes a second or two, then 2 s of stall.
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(10), "ended after {took:?}\n{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("wasmtap: watchdog:")).collect();
    assert_eq!(said.len(), 1, "{err}");
    let line = said[0];
    assert!(line.starts_with("wasmtap: watchdog: no progress for 2."), "{line}");
    assert!(line.contains(" s while writing output (is anyone reading it?)"), "{line}");
    assert!(line.contains("; ending the run (--watchdog 2s); the -c command (pid "), "{line}");
    assert!(line.ends_with(") was ended"), "{line}");
}

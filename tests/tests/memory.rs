//! Memory that follows the work: a streaming run at full speed stays within a bound,
//! because records wait in the rings (counted if they do not fit) rather than in an
//! unbounded heap, and `--stats` tells the host's peak by part. Live: needs root and
//! BPF; in CI it runs and must pass.

use std::process::Stdio;

use serde_json::Value as Json;
use wasmtap_tests::*;

/// The bound on the host's peak resident memory for a stream at full rate.
const PEAK_MIB: u64 = 56;
const OPENS: u64 = 200_000;
const GETPPIDS: u64 = 3_000_000;
/// The bound of the queue between the drain thread and the plugins, and one chunk over.
const QUEUE_MAX: u64 = (12 << 20) + (260 << 10);

/// Run `wasmtap run ARGS -o json -c CMD` with the output in a file; its stderr, the
/// output's text, and its accounting.
/// The bound is on streaming: the plugin's code is compiled (and cached) by a short run
/// first, since compiling a plugin the first time costs memory of its own, whichever test
/// happens to run it first (docs/benchmarks.md, "Where the time goes").
fn run_to_file(name: &str, args: &[&str], cmd: &str) -> (String, String, Json) {
    let warm = run(wasmtap().arg("run").arg(args[0]).args(["-o", "json", "-c", "true"]));
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));
    let path = target_dir().join(format!("memory-{name}.json"));
    let out = std::fs::File::create(&path).expect("output file");
    let o = wasmtap()
        .arg("run")
        .args(args)
        .args(["-o", "json", "-c", cmd])
        .stdout(Stdio::from(out))
        .stderr(Stdio::piped())
        .output()
        .expect("spawn wasmtap");
    let text = std::fs::read_to_string(&path).expect("output");
    let _ = std::fs::remove_file(&path);
    let acct = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .find(|v| v["type"] == "accounting")
        .expect("accounting");
    (stderr(&o), text, acct["data"].clone())
}

/// What a stream at full rate must show: the host's peak under the bound, its parts as
/// `--stats` names them (a ring of `ring_mib` mapped once, the queue under its bound,
/// the plugin's memory), nothing lost in the host, and every one of the `expected`
/// events a row (rows found by `needle`) or counted as ring-full in the kernel's `kind`.
fn assert_bounded_and_accounted(
    acct: &Json,
    text: &str,
    err: &str,
    kind: &str,
    ring_mib: u64,
    needle: &str,
    expected: u64,
) {
    let host = &acct["host"];
    let peak = u(&host["peak_rss_bytes"]);
    assert!(peak <= PEAK_MIB << 20, "peak RSS {} MiB over {PEAK_MIB} MiB: {host}\n{err}", peak >> 20);
    assert_eq!(u(&host["ring_bytes"]), (ring_mib << 20) + 2 * 4096, "the ring, its data mapped once: {host}");
    assert!(u(&host["queue_peak_bytes"]) <= QUEUE_MAX, "the queue's bound: {host}");
    let plugins = u(&host["plugin_memory_peak_bytes"]);
    assert!(plugins > 0 && plugins <= 64 << 20, "the plugin's memory: {host}");

    // Nothing lost in the host; what the ring could not hold, if anything, is counted.
    let counts = &acct["kernel"]["kinds"][kind];
    let (emitted, ring_full) = (u(&counts["emitted"]), u(&counts["dropped"]));
    let plugin = &acct["plugins"][0];
    assert_eq!(u(&plugin["delivered"]), emitted, "{plugin}");
    assert_eq!(u(&plugin["dropped"]), 0, "{plugin}");
    let rows = text.lines().filter(|l| l.contains("\"type\":\"row\"") && l.contains(needle)).count() as u64;
    if ring_full == 0 {
        assert_eq!(rows, expected, "every event a row");
    } else {
        assert!(
            rows <= expected && rows + ring_full >= expected,
            "rows {rows} + ring-full {ring_full} account for {expected}"
        );
    }
}

#[test]
fn a_streaming_open_storm_stays_within_its_memory_bound_and_loses_nothing_unsaid() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} {OPENS} /etc/hostname", workload("open_storm").display());
    // Budgets lifted as a user streaming at full rate would, and a deadline long
    // enough for a loaded machine: only the pipeline's memory is under test.
    let args = ["opensnoop", "--cpu-budget", "100", "--output-budget", "4194304", "--deadline", "5s"];
    let (err, text, acct) = run_to_file("open-storm", &args, &cmd);
    assert!(err.contains(&format!("opens {OPENS}")), "the workload ran: {err}");
    assert_bounded_and_accounted(&acct, &text, &err, "open", 8, "/etc/hostname", OPENS);
}

#[test]
fn a_streaming_syscall_storm_stays_within_its_memory_bound_and_loses_nothing_unsaid() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // getppid as fast as one CPU makes it, each one a row: the syscall collector's
    // stream at its fastest.
    let cmd = format!("{} {GETPPIDS}", workload("getppid_loop").display());
    let snoop = wasm("snoop").display().to_string();
    let args = [snoop.as_str(), "--cpu-budget", "100", "--output-budget", "4194304", "--deadline", "5s"];
    let (err, text, acct) = run_to_file("syscall-storm", &args, &cmd);
    assert_bounded_and_accounted(&acct, &text, &err, "sys_enter", 16, "getppid_loop", GETPPIDS);
}

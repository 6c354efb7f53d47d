//! No silent loss in the collectors: when a kernel map is full, what it could not hold
//! is counted under a named reason, the accounting still adds up, and a live run says
//! so while it happens. The maps are shrunk with `WASMTAP_MAP_ENTRIES` so that a small
//! workload fills them. Live tests need root and BPF: in CI they run and must pass.

use wasmtap_tests::*;

/// Children alive at once, and getppid calls each makes.
const CHILDREN: u64 = 100;
const CALLS: u64 = 1000;
/// Entries of the shrunk maps: the target set holds the command and 63 children; the
/// map of interval starts keyed by a field holds 16.
const TARGETS: u64 = 64;
const STARTS: u64 = 16;

#[test]
fn full_target_and_start_maps_are_counted_by_reason_and_reported_live() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // The workload lingers 6 s after its children are gone: one live report (every
    // 5 s) falls inside the run, after every loss has happened.
    let cmd = format!("{} {CHILDREN} {CALLS} 6000", workload("fanout").display());
    let o = run(wasmtap().env("WASMTAP_MAP_ENTRIES", format!("targets={TARGETS},agg_starts={STARTS}")).args([
        "run",
        "syscount",
        "syslatency",
        "runqlat",
        &wasm("wakelat").display().to_string(),
        "--param",
        "syslatency.syscall=getppid",
        "-o",
        "json",
        "-c",
        &cmd,
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(err.contains(&format!("children {CHILDREN} calls {CALLS}")), "the workload ran: {err}");
    let lines = json_lines(&out);
    let acct = &lines.iter().find(|v| v["type"] == "accounting").expect("accounting")["data"];
    let losses = &acct["kernel"]["losses"];

    // The target set holds the command itself and TARGETS - 1 children; the others were
    // not followed, each counted once.
    let followed = TARGETS - 1;
    assert_eq!(u(&losses["targets_full"]), CHILDREN - followed, "{losses}");
    // Their getppid calls were filtered in the kernel, not counted: syscount saw exactly
    // the followed children's.
    let count = lines
        .iter()
        .find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some())
        .map(|v| u(&v["data"]["@syscall"]["getppid"]));
    assert_eq!(count, Some(followed * CALLS), "{out:.3000}");

    // Every followed child started a getppid before any went on, more than the map of
    // starts holds; but a syscall's start is kept with its thread, not in that map:
    // every getppid of a followed child is an interval timed.
    let hist = lines.iter().find(|v| v["type"] == "hist" && v["data"].get("@nanoseconds").is_some());
    let hist = hist.expect("syslatency's histogram");
    let timed: u64 = hist["data"]["@nanoseconds"]["getppid"]
        .as_array()
        .expect("getppid buckets")
        .iter()
        .map(|b| u(&b["count"]))
        .sum();
    assert_eq!(timed, followed * CALLS, "{losses}");
    // wakelat's starts are keyed by the woken thread, in the map of starts: the parent
    // wakes every child at once, more than it holds on two CPUs, and each start refused
    // is counted, by the name of wakelat's aggregation. runqlat's are kept with the woken
    // task (the scheduler's BTF tracepoints hand it over): it lost none, and neither did
    // syscount and syslatency.
    let lost_starts = u(&losses["start_map_full"]);
    assert!(lost_starts > 0, "{losses}");
    let plugin = |name: &str| {
        acct["plugins"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name}"))
    };
    let want = serde_json::json!([{"aggregation": "waits", "agg_map_full": 0, "start_map_full": lost_starts}]);
    assert_eq!(plugin("wakelat")["aggregation_losses"], want, "{acct}");
    assert!(plugin("runqlat").get("aggregation_losses").is_none(), "{acct}");
    assert!(plugin("syscount").get("aggregation_losses").is_none(), "{acct}");
    assert!(plugin("syslatency").get("aggregation_losses").is_none(), "{acct}");

    // Nothing else was lost; the lost intervals are lost events, and the run says it had
    // problems.
    assert_eq!(losses.as_object().map(|m| m.len()), Some(2), "{losses}");
    let lost = lines.iter().find(|v| v["type"] == "lost_events").expect("lost_events");
    assert_eq!(u(&lost["data"]["events"]), lost_starts, "{acct}");
    assert_eq!(o.status.code(), Some(1), "losses end the run with problems\n{err}");

    // The live report, at 5 s, named both reasons: the targets with the run's full count.
    let report = err.lines().find(|l| l.starts_with("wasmtap: lost in the last 5 s: "));
    let report = report.unwrap_or_else(|| panic!("no live drop report: {err}"));
    let want = format!("targets_full {} child processes not followed; start_map_full ", CHILDREN - followed);
    assert!(report.contains(&want) && report.ends_with(" intervals"), "{report}");
}

/// Calls the quota test's command makes, and the quota: far more than it lets through.
const STORM: u64 = 2_000_000;
const QUOTA: u64 = 50_000;

#[test]
fn events_over_the_quota_are_lost_in_the_kernel_as_quota_and_the_rest_arrive() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} {STORM}", workload("getppid_loop").display());
    let started = std::time::Instant::now();
    let o = run(wasmtap().args([
        "run",
        "syscount",
        "--param",
        "mode=stream",
        "--param",
        "syscall=getppid",
        "--max-events-per-sec",
        &QUOTA.to_string(),
        "-o",
        "json",
        "-c",
        &cmd,
    ]));
    let elapsed = started.elapsed().as_secs_f64();
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(err.contains(&STORM.to_string()), "the workload ran: {err}");
    let lines = json_lines(&out);
    let acct = &lines.iter().find(|v| v["type"] == "accounting").expect("accounting")["data"];
    let streamed = lines
        .iter()
        .find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some())
        .map(|v| u(&v["data"]["@syscall"]["getppid"]))
        .expect("@syscall");
    let quota = u(&acct["kernel"]["losses"]["quota"]);
    // Every call is either streamed to the plugin or lost to the quota, none otherwise.
    assert_eq!(streamed + quota, STORM, "{acct}");
    assert_eq!(u(&acct["kernel"]["kinds"]["sys_enter"]["lost"]), quota, "{acct}");
    assert_eq!(u(&acct["kernel"]["kinds"]["sys_enter"]["dropped"]), 0, "{acct}");
    assert_eq!(acct["kernel"]["losses"].as_object().map(|m| m.len()), Some(1), "{acct}");
    // At most a tenth of the quota per 100 ms window the run was open; at least one.
    let windows = (elapsed * 10.0).ceil() as u64 + 1;
    assert!(streamed <= windows * QUOTA / 10, "{streamed} in {elapsed:.2} s: {acct}");
    assert!(streamed >= QUOTA / 10, "{streamed} in {elapsed:.2} s: {acct}");
    assert_eq!(u(&acct["bounds"]["events_per_sec"]), QUOTA, "{acct}");
    assert_eq!(o.status.code(), Some(1), "losses end the run with problems\n{err}");
}

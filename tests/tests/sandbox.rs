//! The sandbox under attack: hostile plugins beside a well-behaved syscount in one host,
//! the restart policy, budgets, and event conservation when the consumer falls behind.
//! Live tests need root and BPF: in CI they run and must pass.

use serde_json::Value as Json;
use wasmtap_tests::*;

/// The `@syscall` count of getppid that syscount printed.
fn getppid_count(lines: &[Json]) -> u64 {
    let map = lines.iter().find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some()).expect("@syscall map");
    u(&map["data"]["@syscall"]["getppid"])
}

/// Every record of the plugin's probe is filtered, delivered or dropped with a reason,
/// in the kernel and in the host, per probe and in total.
fn assert_conserved(p: &Json, reached_host: u64) {
    for s in p["probes"].as_array().unwrap() {
        let host = u(&s["filtered"]) + u(&s["delivered"]) + u(&s["dropped_budget"]) + u(&s["dropped_fault"]);
        assert_eq!(u(&s["emitted"]), host, "{s}");
        let kernel = u(&s["kernel_filtered"]) + u(&s["ring_dropped"]) + u(&s["kernel_lost"]);
        assert_eq!(u(&s["generated"]), kernel + host, "{s}");
    }
    let (f, d, b, x) = (u(&p["filtered"]), u(&p["delivered"]), u(&p["dropped_budget"]), u(&p["dropped_fault"]));
    assert_eq!(u(&p["dropped"]), b + x, "{p}");
    assert_eq!(f + d + b + x, reached_host, "filtered + delivered + dropped = events that reached the host: {p}");
}

const HOSTILE: [&str; 8] = ["spin", "membomb", "trap", "trapper", "flood", "bigstr", "sleeper", "badrows"];
const DEADLINE_MS: u64 = 100;
/// Plugins that must meet their own limit (memory, output) rather than the clock: on a
/// loaded machine growing 64 MiB or building a 16 MiB string can take longer than 100 ms
/// of wall time. They get a deadline of their own.
const SLOW_TO_FAULT: [&str; 2] = ["membomb", "bigstr"];
const SLOW_DEADLINE_MS: u64 = 5000;
/// The epoch ticks every 5 ms.
const TICK_MS: u64 = 5;

#[test]
fn hostile_plugins_are_stopped_while_syscount_stays_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 1,000,000 getppid calls in 40 rounds over about 4 s: long enough for the
    // output budget's three strikes.
    let cmd = format!("{} 40 25000 100", workload("getppid_paced").display());
    let mut c = wasmtap();
    c.args(["run", "syscount"]);
    for h in HOSTILE {
        c.arg(wasm(h));
    }
    c.args(["-c", &cmd, "-o", "json", "--deadline", &format!("{DEADLINE_MS}ms"), "--output-budget", "flood=256"]);
    for name in SLOW_TO_FAULT {
        c.args(["--deadline", &format!("{name}={SLOW_DEADLINE_MS}ms")]);
    }
    let started = std::time::Instant::now();
    let o = run(&mut c);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "disabled plugins make the run end with problems\n{err}");
    let lines = json_lines(&out);
    assert_eq!(getppid_count(&lines), 1_000_000, "{err}");
    let acct = accounting(&lines);
    assert_eq!(u(&acct["kernel"]["kinds"]["sys_enter"]["dropped"]), 0, "{acct}");
    let reached = u(&acct["kernel"]["kinds"]["sys_enter"]["emitted"]);
    assert!(reached >= 1_000_000, "{acct}");
    let good = plugin(acct, "syscount");
    assert!(good["disabled"].is_null() && u(&good["dropped"]) == 0 && u(&good["faults"]) == 0, "{good}");

    let expect = [
        ("spin", "deadline", "ran past its deadline of 100 ms"),
        ("membomb", "memory", "exceeded its memory limit of 64 MiB"),
        ("trap", "trap", "trapped: wasm trap: out of bounds memory access"),
        ("trapper", "panic", "panicked: trapper: deliberate fault"),
        ("bigstr", "output", "produced more than 16 MiB"),
        ("sleeper", "blocked", "tried to block in the host (wasi:io/poll"),
        ("badrows", "contract", "output.emit-packed: packed rows end inside a value at byte 20 of 20"),
    ];
    for (name, kind, reason) in expect {
        let p = plugin(acct, name);
        assert_eq!(p["last_fault"]["kind"], kind, "{p}");
        assert!(p["last_fault"]["reason"].as_str().unwrap().contains(reason), "{p}");
        assert!(err.contains(&format!("plugin `{name}` disabled in on-batch: ")), "{err}");
        assert!(err.contains(reason), "{err}");
        assert_eq!(u(&p["batches"]), 1, "stopped in its first call: {p}");
        // Stopped within the deadline plus two epoch ticks, whatever the fault.
        let elapsed = u(&p["last_fault"]["elapsed_ms"]);
        let deadline = if SLOW_TO_FAULT.contains(&name) { SLOW_DEADLINE_MS } else { DEADLINE_MS };
        assert!(elapsed <= deadline + 2 * TICK_MS, "{name} ran {elapsed} ms: {p}");
        assert_conserved(p, reached);
    }
    let spin = plugin(acct, "spin");
    assert!(u(&spin["last_fault"]["elapsed_ms"]) + TICK_MS >= DEADLINE_MS, "not stopped early: {spin}");
    // The flood is cut at its output budget, its events dropped and counted, then disabled.
    let flood = plugin(acct, "flood");
    assert_eq!(flood["disabled"], "over its output budget (256 KiB per second) for 3 seconds in a row", "{flood}");
    assert!(u(&flood["dropped_budget"]) > 0 && u(&flood["output_dropped"]) > 0, "{flood}");
    assert_conserved(flood, reached);
    // Memory: everything the host holds stays under the plugins' caps plus a fixed
    // margin for the host itself (rings 64 + 16 MiB, 64 MiB of chunks in flight at
    // most, the compiler and runtime).
    let caps = (9 * 64u64) << 20;
    let margin = 512u64 << 20;
    let peak = u(&acct["host"]["peak_rss_bytes"]);
    assert!(peak < caps + margin, "peak RSS {} MiB", peak >> 20);
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "took {:?}", started.elapsed());
}

#[test]
fn a_symbolize_flood_and_a_foreign_pid_are_refused_while_syscount_stays_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 1,000,000 getppid calls in 20 rounds 100 ms apart. syscount is timed alone over
    // the same workload first: beside the hostile plugin the run may take one second more.
    let cmd = format!("{} 20 50000 100", workload("getppid_paced").display());
    let alone = std::time::Instant::now();
    let o = run(wasmtap().args(["run", "syscount", "-c", &cmd, "-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let alone = alone.elapsed();
    let started = std::time::Instant::now();
    let o = run(wasmtap().args(["run", "syscount"]).arg(wasm("symflood")).args(["-c", &cmd, "-o", "json"]));
    let took = started.elapsed();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "the disabled plugin makes the run end with problems\n{err}");
    let lines = json_lines(&out);
    assert_eq!(getppid_count(&lines), 1_000_000, "{err}");
    let acct = accounting(&lines);
    let reached = u(&acct["kernel"]["kinds"]["sys_enter"]["emitted"]);
    let good = plugin(acct, "syscount");
    assert!(good["disabled"].is_null() && u(&good["dropped"]) == 0 && u(&good["faults"]) == 0, "{good}");
    assert_eq!(u(&acct["kernel"]["kinds"]["sys_enter"]["dropped"]), 0, "{acct}");

    let p = plugin(acct, "symflood");
    // Pid 1 never appeared in its records: three requests refused, unknown frames only.
    assert_eq!(u(&p["symbolize_refused"]), 3, "{p}");
    assert!(err.contains("symflood: pid 1 gave 0 named frames"), "{err}");
    // The flood is stopped before any work, with one line naming the limit.
    let limit = "services.symbolize: 1000000 stack requests in one call, more than the 4096 allowed";
    assert_eq!(p["last_fault"]["kind"], "contract", "{p}");
    assert_eq!(p["last_fault"]["reason"], limit, "{p}");
    assert_eq!(err.matches(limit).count(), 1, "{err}");
    assert!(err.contains(&format!("plugin `symflood` disabled in on-batch: {limit}")), "{err}");
    assert_eq!(u(&p["batches"]), 2, "stopped in its second call, the first flood: {p}");
    assert_conserved(p, reached);
    let peak = u(&acct["host"]["peak_rss_bytes"]);
    assert!(peak < 200 << 20, "peak RSS {} MiB", peak >> 20);
    let late = took.saturating_sub(alone);
    assert!(late < std::time::Duration::from_secs(1), "took {took:?}, syscount alone {alone:?}");
}

#[test]
fn a_plugin_importing_the_filesystem_is_refused_beside_a_good_one() {
    let _g = serial();
    let o = run(wasmtap().args(["run", "syscount"]).arg(wasm("fsreader")));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("imports `wasi:filesystem/"), "{err}");
    assert!(err.contains("which plugins are not granted"), "{err}");
}

#[test]
fn a_plugin_that_faults_every_100th_batch_is_restarted_with_backoff() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 30 100000 50", workload("getppid_paced").display());
    let o = run(wasmtap().args(["run", "syscount"]).arg(wasm("flaky")).args([
        "-c",
        &cmd,
        "-o",
        "json",
        "--on-fault",
        "flaky=restart",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    let lines = json_lines(&out);
    assert_eq!(getppid_count(&lines), 3_000_000, "{err}");
    let acct = accounting(&lines);
    let flaky = plugin(acct, "flaky");
    assert!(flaky["disabled"].is_null(), "a plugin that completes batches between faults keeps running: {flaky}");
    let (faults, restarts) = (u(&flaky["faults"]), u(&flaky["restarts"]));
    assert!(faults >= 3, "{flaky}");
    // Each fault is followed by a restart (the last one possibly at the end, to report).
    assert!(restarts == faults || restarts + 1 == faults, "{flaky}");
    // Each life completes 99 batches (of whatever size the chunks gave) before it faults.
    assert!(u(&flaky["batches"]) >= 100 * faults && u(&flaky["delivered"]) >= 99 * faults, "{flaky}");
    assert_eq!(u(&flaky["dropped_budget"]), 0, "{flaky}");
    // Conservation over the probe the plugin subscribes to: every getppid of the workload.
    let p = &flaky["probes"][0];
    assert_eq!(p["probe"], "syscall:getppid:entry");
    assert_eq!(u(&p["filtered"]) + u(&p["delivered"]) + u(&p["dropped_fault"]), 3_000_000, "{flaky}");
    // Backoff doubles: 50, 100, 200 ms...
    assert!(err.contains("faulted in on-batch: panicked: flaky: batch 100 of this life"), "{err}");
    assert!(err.contains("restarting in 50 ms") && err.contains("restarting in 100 ms"), "{err}");
    assert!(err.contains("restarting in 200 ms"), "{err}");
    assert_eq!(o.status.code(), Some(1), "lost events are a problem\n{err}");
}

#[test]
fn a_plugin_that_faults_at_once_is_disabled_after_the_crash_loop_limit() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 40 10000 100", workload("getppid_paced").display());
    let o = run(wasmtap().args(["run", "syscount"]).arg(wasm("flaky")).args([
        "--param",
        "flaky.every=1",
        "-c",
        &cmd,
        "-o",
        "json",
        "--on-fault",
        "restart",
        "--crash-loop",
        "3",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    let lines = json_lines(&out);
    assert_eq!(getppid_count(&lines), 400_000, "the good plugin counts exactly: {err}");
    let acct = accounting(&lines);
    let flaky = plugin(acct, "flaky");
    assert_eq!((u(&flaky["faults"]), u(&flaky["restarts"])), (4, 3), "{flaky}");
    assert_eq!(u(&flaky["delivered"]), 0, "{flaky}");
    let why = flaky["disabled"].as_str().unwrap();
    assert!(why.starts_with("crash loop: 4 faults in a row before completing a call (limit 3)"), "{why}");
    assert!(err.contains("plugin `flaky` disabled: crash loop"), "{err}");
    let p = &flaky["probes"][0];
    assert_eq!(u(&p["dropped_fault"]) + u(&p["filtered"]), 400_000, "{flaky}");
    let good = plugin(acct, "syscount");
    assert!(good["disabled"].is_null() && u(&good["restarts"]) == 0, "{good}");
}

#[test]
fn a_plugin_over_its_cpu_budget_loses_its_events_counted_then_is_disabled() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // 20 ms of work per batch, 10% of a CPU allowed: over budget every second.
    let cmd = format!("{} 50 20000 100", workload("getppid_paced").display());
    let o = run(wasmtap().args(["run", "syscount"]).arg(wasm("slowpoke")).args([
        "-c",
        &cmd,
        "-o",
        "json",
        "--cpu-budget",
        "slowpoke=10",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    let lines = json_lines(&out);
    assert_eq!(getppid_count(&lines), 1_000_000, "{err}");
    let acct = accounting(&lines);
    let slow = plugin(acct, "slowpoke");
    assert_eq!(slow["disabled"], "over its CPU budget (100 ms per second) for 3 seconds in a row", "{slow}");
    assert!(u(&slow["dropped_budget"]) > 0 && u(&slow["budget_overruns"]) == 3, "{slow}");
    let p = &slow["probes"][0];
    let total = u(&p["filtered"]) + u(&p["delivered"]) + u(&p["dropped_budget"]) + u(&p["dropped_fault"]);
    assert_eq!(total, 1_000_000, "every getppid accounted for: {slow}");
    assert!(err.contains("plugin `slowpoke` is over its CPU budget (100 ms per second)"), "{err}");
}

#[test]
fn hostile_plugins_in_a_replay_leave_the_good_plugins_report_unchanged() {
    // No root: the same sandbox over a committed recording (1000 getppid calls). Serial
    // all the same: its spinning plugin must not take the CPU that the live test's
    // deadline ticker needs.
    let _g = serial();
    let rec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/syscalls.wtrec");
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cases/syscount-text.out");
    let o = run(wasmtap()
        .arg("replay")
        .arg(&rec)
        .arg("syscount")
        .args([wasm("spin"), wasm("trap"), wasm("sleeper"), wasm("flaky")])
        .args(["--param", "syscount.top=0", "--param", "flaky.every=1", "--on-fault", "flaky=restart"])
        .args(["--deadline", "50ms", "-o", "text", "--stats"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{err}");
    let expected = std::fs::read_to_string(golden).unwrap();
    let ours: String = out.lines().filter(|l| !l.starts_with("flaky:")).map(|l| format!("{l}\n")).collect();
    assert_eq!(ours, expected, "syscount's report is the golden one\n{err}");
    assert!(err.contains("plugin `spin` disabled in on-batch: ran past its deadline of 50 ms"), "{err}");
    assert!(
        err.contains("plugin `trap` disabled in on-batch: trapped: wasm trap: out of bounds memory access"),
        "{err}"
    );
    assert!(err.contains("plugin `sleeper` disabled in on-batch: tried to block in the host"), "{err}");
    assert!(err.contains("plugin `flaky` faulted in on-batch: panicked: flaky: batch 1 of this life"), "{err}");
    assert!(err.contains("faults 1  restarts 1"), "restarted once, at the end, to report: {err}");
    assert!(out.contains("flaky: 0 events in this life"), "{out}");
    assert!(
        err.contains("syscall:getppid:entry: host: filtered 0, delivered 0, dropped 1000 (budget 0, fault 1000)"),
        "{err}"
    );
}

#[test]
fn when_the_consumer_falls_behind_the_ring_overflows_and_every_event_is_still_accounted_for() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // slowpoke works 1 ms per batch: about a million events a second, fewer than the
    // workload makes; past the host's 12 MiB of chunks in flight the drain thread waits
    // and the 16 MiB ring fills, so the kernel drops, and counts, the rest. Enough calls
    // that the run outlasts the host's 5 s loss report on a fast machine too (events the
    // ring refuses cost the workload little: 8 million took 3 s here).
    const CALLS: u64 = 24_000_000;
    let cmd = format!("{} {CALLS}", workload("getppid_loop").display());
    let o = run(wasmtap().args(["run", "syscount"]).arg(wasm("slowpoke")).args([
        "--param",
        "slowpoke.ms=1",
        "--cpu-budget",
        "slowpoke=100",
        "-c",
        &cmd,
        "-o",
        "json",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    let lines = json_lines(&out);
    // Kernel aggregations do not go through the ring: exact whatever the consumer does.
    assert_eq!(getppid_count(&lines), CALLS, "{err}");
    let acct = accounting(&lines);
    let row = &acct["kernel"]["probes"]["sys_enter:110"];
    let (emitted, dropped) = (u(&row["emitted"]), u(&row["dropped"]));
    assert_eq!(emitted + dropped, CALLS, "every getppid of the workload was emitted or dropped: {row}");
    assert!(dropped > 0, "the ring overflowed: {row}");
    // The drops reported are the kernel's drop counters, and nothing else was lost.
    let lost = lines.iter().find(|v| v["type"] == "lost_events").unwrap();
    assert_eq!(u(&lost["data"]["events"]), u(&acct["kernel"]["kinds"]["sys_enter"]["dropped"]), "{acct}");
    assert_eq!(u(&acct["kernel"]["pipeline_dropped"]), 0, "{acct}");
    let slow = plugin(acct, "slowpoke");
    assert!(slow["disabled"].is_null() && u(&slow["dropped"]) == 0, "{slow}");
    let p = &slow["probes"][0];
    assert_eq!(p["probe"], "syscall:getppid:entry");
    assert_eq!(u(&p["generated"]), u(&p["kernel_filtered"]) + CALLS, "{p}");
    assert_eq!((u(&p["emitted"]), u(&p["ring_dropped"])), (emitted, dropped), "{p}");
    assert_eq!(u(&p["delivered"]), emitted, "{p}");
    assert_conserved(slow, emitted);
    // The plugin saw exactly what the host says it delivered.
    let said = lines
        .iter()
        .filter(|v| v["type"] == "printf")
        .find_map(|v| v["data"].as_str().and_then(|t| t.strip_prefix("slowpoke: ")));
    let said = said.unwrap_or_else(|| panic!("slowpoke's count: {out:.2000}"));
    assert_eq!(said.trim_end(), format!("{emitted} events"));
    // While it ran, the host said every few seconds that the ring was overflowing.
    assert!(
        err.lines().any(|l| l.starts_with("wasmtap: lost in the last ") && l.contains("ring_full ")),
        "a live drop report: {err}"
    );
    assert_eq!(o.status.code(), Some(1), "lost events end the run with problems\n{err}");
}

/// One hostile door beside an exact syscount of 1,000,000 getppid calls paced over 4 s,
/// with more `args` for the run: the run's JSON lines and its stderr. The run must end within a second of the traced
/// command's exit, whatever the hostile plugin asked of the host.
fn door_beside_syscount(door: &str, args: &[&str]) -> (Vec<Json>, String) {
    // Compiling a plugin the first time costs memory of its own (docs/benchmarks.md): warm
    // the cache, so the peak below is the run's, whichever test comes first.
    let mut warm = wasmtap();
    warm.args(["run", "syscount"]).arg(wasm("hostile")).args(["--param", "hostile.door=badread", "-c", "true"]);
    let warmed = run(&mut warm);
    assert!(warmed.status.code().is_some(), "{}", stderr(&warmed));
    let ended = std::env::temp_dir().join(format!("wasmtap-door-{door}-{}", std::process::id()));
    // The command notes when it ended (ns since the epoch), as the last thing it does.
    let cmd = format!("{} 40 25000 100 {}", workload("getppid_paced").display(), ended.display());
    let mut c = wasmtap();
    c.args(["run", "syscount"]).arg(wasm("hostile"));
    c.args(["--param", &format!("hostile.door={door}"), "-c", &cmd, "-o", "json"]);
    c.args(args);
    let o = run(&mut c);
    let exited = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "the disabled plugin makes the run end with problems\n{err}");
    let lines = json_lines(&out);
    assert_eq!(getppid_count(&lines), 1_000_000, "{err}");
    let acct = accounting(&lines);
    // syscount counts in the kernel; the hostile plugin may stream sys_enter records.
    assert_eq!(u(&acct["kernel"]["aggregated"]["dropped"]), 0, "{acct}");
    assert!(acct["kernel"]["kinds"]["sys_enter"]["dropped"].as_u64().unwrap_or(0) == 0, "{acct}");
    let good = plugin(acct, "syscount");
    assert!(good["disabled"].is_null() && u(&good["dropped"]) == 0 && u(&good["faults"]) == 0, "{good}");
    let peak = u(&acct["host"]["peak_rss_bytes"]);
    assert!(peak < 200 << 20, "peak RSS {} MiB", peak >> 20);
    let ended_ns: u64 = std::fs::read_to_string(&ended).unwrap().trim().parse().unwrap();
    std::fs::remove_file(&ended).unwrap();
    let after = exited.saturating_sub(std::time::Duration::from_nanos(ended_ns));
    assert!(after < std::time::Duration::from_secs(1), "{door}: the run ended {after:?} after the command");
    (lines, err)
}

#[test]
fn empty_output_items_cost_their_plugin_until_it_is_disabled_while_syscount_stays_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let (lines, err) = door_beside_syscount("empties", &[]);
    let acct = accounting(&lines);
    let p = plugin(acct, "hostile");
    let why = "over its output budget (16384 KiB per second) for 3 seconds in a row";
    assert_eq!(p["disabled"], why, "{p}");
    assert!(err.contains(&format!("plugin `hostile` disabled: {why}")), "{err}");
    assert!(u(&p["output_dropped"]) > 0 && u(&p["dropped_budget"]) > 0, "{p}");
    // At most 64 log lines a call reach the terminal, however many the plugin sends.
    let logs = err.lines().filter(|l| l.starts_with("wasmtap: hostile: info:")).count() as u64;
    assert!(logs <= 64 * u(&p["batches"]), "{logs} log lines in {} calls", p["batches"]);
    let reached = u(&acct["kernel"]["kinds"]["sys_enter"]["emitted"]);
    assert_conserved(p, reached);
}

#[test]
fn aggregation_reports_are_charged_by_what_the_host_writes_until_their_plugin_is_disabled() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // A hundred histograms of 1,024 buckets every millisecond: ~2 MB of JSON a report,
    // against an output budget of 1 MiB a second.
    let (lines, err) = door_beside_syscount("aggflood", &["--output-budget", "hostile=1024"]);
    let acct = accounting(&lines);
    let p = plugin(acct, "hostile");
    let why = "over its output budget (1024 KiB per second) for 3 seconds in a row";
    assert_eq!(p["disabled"], why, "{p}");
    assert!(err.contains(&format!("plugin `hostile` disabled: {why}")), "{err}");
    // The host's time went on its account, and the ticks it could not pay for were skipped.
    assert!(u(&p["host_cpu_ms"]) > 0 && u(&p["ticks_skipped"]) > 0, "{p}");
    let reports = lines.iter().filter(|v| v["type"] == "hist" && v["data"].get("@flood").is_some()).count();
    assert!(reports > 0, "reports were rendered until it went over");
}

#[test]
fn an_aggregation_report_that_takes_longer_to_render_than_a_call_may_run_disables_its_plugin() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // A thousand histograms of 1,024 buckets: ~50 ms for the plugin to build and hand
    // over, ~400 ms of CPU for the host to sort and render (measured on the CI machine
    // class). A deadline of 150 ms leaves about three times the margin either way.
    let (lines, err) =
        door_beside_syscount("aggflood", &["--param", "hostile.entries=1000", "--deadline", "hostile=150ms"]);
    let acct = accounting(&lines);
    let p = plugin(acct, "hostile");
    assert_eq!(p["last_fault"]["kind"], "output", "{p}");
    let why = "its report of 1000 aggregation entries took the host";
    assert!(p["disabled"].as_str().unwrap().contains(why), "{p}");
    assert!(err.contains(&format!("plugin `hostile` disabled in on-tick: {why}")), "{err}");
    assert!(err.contains("of CPU to render, more than its deadline of 150 ms"), "{err}");
    let reports = lines.iter().filter(|v| v["type"] == "hist" && v["data"].get("@flood").is_some()).count();
    assert_eq!(reports, 1, "stopped after its first report");
}

/// `recording` with its trailer's end time replaced by `ended_mono_ns`. Frames after the
/// header: a tag byte, a little-endian u32 length, the payload; the trailer (tag 2) is
/// JSON and comes last.
fn with_end_time(recording: &[u8], ended_mono_ns: u64) -> Vec<u8> {
    let header_len = u32::from_le_bytes(recording[16..20].try_into().unwrap()) as usize;
    let mut at = 20 + header_len;
    let mut out = recording[..at].to_vec();
    while at < recording.len() {
        let (tag, len) = (recording[at], u32::from_le_bytes(recording[at + 1..at + 5].try_into().unwrap()) as usize);
        let payload = &recording[at + 5..at + 5 + len];
        let payload = match tag {
            2 => {
                let mut trailer: Json = serde_json::from_slice(payload).unwrap();
                trailer["ended_mono_ns"] = ended_mono_ns.into();
                serde_json::to_vec(&trailer).unwrap()
            }
            _ => payload.to_vec(),
        };
        out.push(tag);
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&payload);
        at += 5 + len;
    }
    out
}

#[test]
fn a_recording_that_ends_at_the_end_of_time_replays_promptly() {
    let _g = serial();
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/syscalls.wtrec");
    let crafted = with_end_time(&std::fs::read(golden).unwrap(), u64::MAX - 1000);
    let path = std::env::temp_dir().join(format!("wasmtap-end-of-time-{}.wtrec", std::process::id()));
    std::fs::write(&path, crafted).unwrap();
    let started = std::time::Instant::now();
    let o = run(wasmtap().arg("replay").arg(&path).args(["syscount", "--param", "interval=2ms", "--param", "top=1"]));
    let took = started.elapsed();
    std::fs::remove_file(&path).unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    // The recorded intervals are reported as usual.
    let out = stdout(&o);
    assert!(out.contains("@syscall[getppid]"), "{out}");
}

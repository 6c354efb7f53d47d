//! Kernel aggregations against ground truth and against the same aggregation computed
//! from streamed events in the same run. Needs root and BPF: in CI these run and must
//! pass; elsewhere without root they skip with a message.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use wasmtap_tests::*;

/// Every `map` record's `@name` object, in output order.
fn maps<'a>(lines: &'a [Json], name: &str) -> Vec<&'a serde_json::Map<String, Json>> {
    lines.iter().filter(|v| v["type"] == "map").filter_map(|v| v["data"].get(format!("@{name}"))?.as_object()).collect()
}

/// The last `hist` record of `@name`: key → [(low bucket bound, count)].
fn hist(lines: &[Json], name: &str) -> BTreeMap<String, Vec<(i64, u64)>> {
    let data = lines
        .iter()
        .rev()
        .filter(|v| v["type"] == "hist")
        .find_map(|v| v["data"].get(format!("@{name}"))?.as_object())
        .unwrap_or_else(|| panic!("no hist record of @{name}"));
    data.iter()
        .map(|(k, buckets)| {
            let rows = buckets
                .as_array()
                .expect("buckets")
                .iter()
                .map(|b| (b["min"].as_i64().expect("min"), b["count"].as_u64().expect("count")))
                .collect();
            (k.clone(), rows)
        })
        .collect()
}

fn counts(m: &serde_json::Map<String, Json>) -> BTreeMap<String, i64> {
    m.iter().map(|(k, v)| (k.clone(), v.as_i64().expect("a count"))).collect()
}

/// The fixture `countcheck` counts every syscall by syscall and by process twice, in the
/// kernel as syscount does (`@syscall`, `@process`) and from the streamed events
/// (`@syscall_streamed`, `@process_streamed`).
#[test]
fn syscall_counts_in_the_kernel_are_what_streaming_counts_exactly() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 100000", workload("getppid_loop").display());
    let o = run(wasmtap().arg("run").arg(wasm("countcheck")).args(["--param", "top=0", "-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let kernel = counts(maps(&lines, "syscall").last().expect("@syscall"));
    let streamed = counts(maps(&lines, "syscall_streamed").last().expect("@syscall_streamed"));
    assert_eq!(kernel.get("getppid"), Some(&100_000), "{kernel:?}");
    assert_eq!(kernel, streamed, "in-kernel and streamed counts differ");
    let kernel = counts(maps(&lines, "process").last().expect("@process"));
    let streamed = counts(maps(&lines, "process_streamed").last().expect("@process_streamed"));
    assert!(kernel.get("getppid_loop").is_some_and(|n| *n >= 100_000), "{kernel:?}");
    assert_eq!(kernel, streamed);
}

/// syslatency alone keeps each syscall's start in a per-CPU record of the syscall in
/// flight, moved to the thread when it is switched out. A hundred children on two CPUs,
/// blocked on pipes and in wait4, some preempted in their calls: every syscall is still
/// timed once, exactly as the streamed events of the same run count them, and no start
/// is lost. (200 calls each: the whole run's records fit the ring, which a burst of
/// 100,000 calls from a hundred children can fill, losing streamed events, counted.)
#[test]
fn syscalls_timed_across_switches_are_each_timed_once_as_streaming_counts_them() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 100 200 0", workload("fanout").display());
    let o = run(wasmtap().args(["run", "syslatency", "--param", "mode=compare", "-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let total = |h: &Vec<(i64, u64)>| h.iter().map(|(_, n)| n).sum::<u64>();
    let per_syscall = |name: &str| -> BTreeMap<String, u64> {
        hist(&lines, name).iter().map(|(k, h)| (k.clone(), total(h))).collect()
    };
    let (kernel, streamed) = (per_syscall("nanoseconds"), per_syscall("nanoseconds_streamed"));
    assert_eq!(kernel.get("getppid"), Some(&20_000), "{kernel:?}");
    // Each child blocks in two reads of a pipe.
    assert!(kernel.get("read").is_some_and(|n| *n >= 200), "{kernel:?}");
    let acct = &lines.iter().find(|v| v["type"] == "accounting").expect("accounting")["data"];
    let kinds = &acct["kernel"]["kinds"];
    assert_eq!((u(&kinds["sys_enter"]["dropped"]), u(&kinds["sys_exit"]["dropped"])), (0, 0), "{kinds}");
    assert_eq!(kernel, streamed, "in-kernel and streamed counts differ");
    let losses = &acct["kernel"]["losses"];
    assert!(losses.as_object().is_none_or(|m| m.is_empty()), "{losses}");
}

#[test]
fn syscall_latency_in_the_kernel_is_within_one_bucket_of_streamed() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // Fast getppid calls and 2 ms sleeps (glibc sleeps with clock_nanosleep): latencies
    // four orders of magnitude apart.
    let cmd = format!("{} 20 500 2", workload("getppid_paced").display());
    let o = run(wasmtap().args(["run", "syslatency", "--param", "mode=compare", "-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let kernel = hist(&lines, "nanoseconds");
    let streamed = hist(&lines, "nanoseconds_streamed");
    assert_eq!(kernel.keys().collect::<Vec<_>>(), streamed.keys().collect::<Vec<_>>());
    let total = |h: &Vec<(i64, u64)>| h.iter().map(|(_, n)| n).sum::<u64>();
    assert_eq!(total(&kernel["getppid"]), 10_000, "{:?}", kernel["getppid"]);
    assert_eq!(total(&kernel["clock_nanosleep"]), 20);
    let sleeps: u64 = kernel["clock_nanosleep"].iter().filter(|(low, _)| *low >= 1 << 20).map(|(_, n)| n).sum();
    assert_eq!(sleeps, 20, "2 ms sleeps land at or above the [1M, 2M) bucket: {:?}", kernel["clock_nanosleep"]);
    // A sample may move one bucket between the two (the collectors read the clock a few
    // hundred nanoseconds apart). A monotone matching that moves every sample at most one
    // bucket exists iff no prefix of one histogram outruns the other's prefix one bucket
    // further; `excess` counts the samples that would have to move further. Those are
    // samples where an interrupt or a cold cache fell between the two clock reads: allow
    // them for 0.2 % of the samples, and report them.
    let mut excess = 0u64;
    let mut samples = 0u64;
    for (syscall, k) in &kernel {
        let s = &streamed[syscall];
        assert_eq!(total(k), total(s), "{syscall}: kernel {k:?} streamed {s:?}");
        samples += total(k);
        // Bucket index of a power-of-two lower bound (0, 1, 2, 4... → 0, 1, 2, 3...).
        let index = |low: i64| if low <= 0 { 0 } else { 64 - low.leading_zeros() as usize };
        let cumulative = |h: &Vec<(i64, u64)>| {
            let mut c = vec![0u64; 66];
            for (low, n) in h {
                c[index(*low)] += n;
            }
            for i in 1..c.len() {
                c[i] += c[i - 1];
            }
            c
        };
        let (ck, cs) = (cumulative(k), cumulative(s));
        let worst = (0..65).map(|i| ck[i].saturating_sub(cs[i + 1]).max(cs[i].saturating_sub(ck[i + 1]))).max();
        let worst = worst.unwrap_or(0);
        if worst > 0 {
            eprintln!("{syscall}: {worst} samples more than one bucket apart: kernel {k:?} streamed {s:?}");
        }
        excess += worst;
    }
    eprintln!("{excess} of {samples} samples more than one bucket apart");
    assert!(excess * 500 <= samples, "{excess} of {samples} samples more than one bucket apart");
}

#[test]
fn periodic_print_and_clear_add_up_to_the_total() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 10 1000 50", workload("getppid_paced").display());
    let o = run(wasmtap().args([
        "run",
        "syscount",
        "--param",
        "interval=100ms",
        "--param",
        "syscall=getppid",
        "-c",
        &cmd,
        "-o",
        "json",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let reports: Vec<i64> =
        maps(&lines, "syscall").iter().map(|m| m.get("getppid").and_then(Json::as_i64).unwrap_or(0)).collect();
    assert_eq!(reports.iter().sum::<i64>(), 10_000, "per-interval counts {reports:?}");
    assert!(reports.iter().filter(|n| **n > 0).count() >= 3, "the calls spread over several reports: {reports:?}");
    assert!(reports.iter().all(|n| *n < 10_000), "each report is cleared: {reports:?}");
}

/// The fixture `kextremes` reads the count, sum, smallest and largest size of `write`
/// calls from the kernel every 100 ms, resetting them; here 200 writes of 8 KiB, a
/// pause, then 300 writes of 100 bytes. Every report must hold one phase's writes only,
/// and the reports must add up to the whole: a reset forgets what came before, also for
/// `min` and `max`, which are kept as they are and cleared, not subtracted.
#[test]
fn reset_reads_of_count_sum_min_and_max_hold_each_interval_alone() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let dd = |bs: u32, count: u32| format!("dd if=/dev/zero of=/dev/null bs={bs} count={count} status=none");
    let cmd = format!("sh -c '{}; sleep 0.3; {}'", dd(8192, 200), dd(100, 300));
    let o = run(wasmtap().arg("run").arg(wasm("kextremes")).args(["-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let reports: Vec<[i64; 4]> = lines
        .iter()
        .filter(|v| v["type"] == "row")
        .map(|v| ["COUNT", "SUM", "MIN", "MAX"].map(|c| v["data"][c].as_i64().unwrap()))
        .collect();
    let (count, sum) = reports.iter().fold((0, 0), |(c, s), r| (c + r[0], s + r[1]));
    assert_eq!((count, sum), (500, 200 * 8192 + 300 * 100), "{reports:?}");
    for r in &reports {
        assert!(r[2..] == [8192, 8192] || r[2..] == [100, 100], "one phase a report: {reports:?}");
        assert_eq!(r[1], r[0] * r[2], "{reports:?}");
    }
    assert!(reports.iter().any(|r| r[3] == 8192) && reports.iter().any(|r| r[3] == 100), "{reports:?}");
}

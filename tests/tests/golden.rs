//! Golden renderings: replays of committed recordings (tests/golden/*.wtrec, made by
//! tests/golden/record.sh) through the vetted plugins, in every output format, compared
//! byte for byte with tests/golden/cases/NAME.out. No root needed: replay is
//! deterministic. `WASMTAP_BLESS=1` rewrites the expected files after a deliberate change.
//!
//! Each case is its own test, named after its files (`syscount_text` runs
//! `cases/syscount-text.args` and compares with `cases/syscount-text.out`), and a
//! mismatch prints a unified diff of the expected output against the replay's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use wasmtap_tests::*;

/// The golden cases, one test each: the only list of them. A case file without an entry
/// here, or an entry without its files, fails `every_case_file_has_a_test`.
macro_rules! golden_cases {
    ($($case:ident),* $(,)?) => {
        /// The case names, as the files spell them.
        fn cases() -> Vec<String> {
            vec![$(stringify!($case).replace('_', "-")),*]
        }
        $(
            #[test]
            fn $case() {
                check(&stringify!($case).replace('_', "-"));
            }
        )*
    };
}

golden_cases! {
    biolatency_prometheus,
    biolatency_text,
    biosnoop_disk,
    biosnoop_text,
    cpudist_json,
    cpudist_process,
    cpudist_prometheus,
    cpudist_text,
    execsnoop_text,
    exitsnoop_text,
    forktime_text,
    openaggr_text,
    opensnoop_json,
    opensnoop_text,
    opentrace_text,
    proclife_text,
    profile_folded,
    profile_json,
    profile_text,
    runqlat_interval,
    runqlat_json,
    runqlat_prometheus,
    runqlat_text,
    syscount_errors_text,
    syscount_interval,
    syscount_json,
    syscount_prometheus,
    syscount_text,
    syslatency_json,
    syslatency_prometheus,
    syslatency_text,
    wstat_json,
    wstat_text,
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn blessing() -> bool {
    std::env::var_os("WASMTAP_BLESS").is_some()
}

/// Run one case: `NAME.args` holds the command line, run in tests/golden; its output
/// must equal `NAME.out` (or becomes it, when blessing).
fn check(name: &str) {
    let dir = golden_dir();
    let args_file = dir.join("cases").join(format!("{name}.args"));
    let line = std::fs::read_to_string(&args_file).unwrap_or_else(|e| panic!("{}: {e}", args_file.display()));
    let args: Vec<&str> = line.split_whitespace().collect();
    let o =
        run(wasmtap().current_dir(&dir).env("WASMTAP_PLUGIN_PATH", target_dir().join("release/plugins")).args(&args));
    assert_eq!(o.status.code(), Some(0), "{name}: `wasmtap {}` failed: {}", line.trim(), stderr(&o));
    let got = normalize(&stdout(&o));
    let expected_file = dir.join("cases").join(format!("{name}.out"));
    if blessing() {
        std::fs::write(&expected_file, &got).unwrap_or_else(|e| panic!("{}: {e}", expected_file.display()));
        return;
    }
    let expected = std::fs::read_to_string(&expected_file)
        .unwrap_or_else(|e| panic!("{}: {e} (WASMTAP_BLESS=1 writes it)", expected_file.display()));
    if got != expected {
        panic!(
            "golden case {name}: `wasmtap {}` differs from tests/golden/cases/{name}.out \
             ({} expected lines, {} replayed; WASMTAP_BLESS=1 accepts a deliberate change)\n{}",
            line.trim(),
            expected.lines().count(),
            got.lines().count(),
            unified_diff(&expected, &got, &format!("cases/{name}.out"), "replay", CONTEXT)
        );
    }
}

/// The accounting record with what depends on the machine and the moment zeroed: the
/// host's memory, CPU times, and whether a plugin's code came from the cache.
fn normalize(out: &str) -> String {
    out.lines()
        .map(|line| {
            let Ok(mut v) = serde_json::from_str::<serde_json::Value>(line) else { return format!("{line}\n") };
            if v["type"] != "accounting" {
                return format!("{line}\n");
            }
            let data = &mut v["data"];
            data["host"] = serde_json::json!({"rss_bytes": 0, "peak_rss_bytes": 0});
            for p in data["plugins"].as_array_mut().into_iter().flatten() {
                p["cpu_ms"] = 0.into();
                p["host_cpu_ms"] = 0.into();
                p["longest_call_ms"] = 0.into();
                p["code"] = "".into();
            }
            format!("{v}\n")
        })
        .collect()
}

#[test]
fn counts_in_the_recording_match_its_workload() {
    // The recorded workload made exactly 5 rounds of 200 getppid calls and 5 sleeps.
    let o = run(wasmtap().current_dir(golden_dir()).args(["replay", "syscalls.wtrec", "syscount", "--param", "top=0"]));
    let out = stdout(&o);
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(1000), "{out}");
    assert_eq!(map_value(&out, "syscall", "clock_nanosleep"), Some(5), "{out}");
}

#[test]
fn flame_graph_names_the_hot_function() {
    let svg = target_dir().join("golden-profile.svg");
    let _ = std::fs::remove_file(&svg);
    let o =
        run(wasmtap().current_dir(golden_dir()).args(["replay", "profile.wtrec", "profile", "--flamegraph"]).arg(&svg));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(text.trim_start().starts_with("<?xml") || text.trim_start().starts_with("<svg"), "not an SVG");
    assert!(text.trim_end().ends_with("</svg>"));
    // spin_func spends all its time in wasmtap_hot_loop: the widest frame above main.
    let title = text
        .split("<title>")
        .filter_map(|t| t.split("</title>").next())
        .find(|t| t.starts_with("wasmtap_hot_loop "))
        .unwrap_or_else(|| panic!("no frame for wasmtap_hot_loop in the flame graph"));
    let samples: u64 = title.split(['(', ' ']).nth(2).and_then(|n| n.parse().ok()).expect("sample count in the title");
    assert!(samples >= 90, "{title}");
}

#[test]
fn every_case_file_has_a_test() {
    let listed: BTreeSet<String> = cases().into_iter().collect();
    let (mut args, mut outs, mut strays) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    for entry in std::fs::read_dir(golden_dir().join("cases")).expect("tests/golden/cases") {
        let file = entry.expect("a directory entry").file_name().to_string_lossy().into_owned();
        if let Some(name) = file.strip_suffix(".args") {
            args.insert(name.to_string());
        } else if let Some(name) = file.strip_suffix(".out") {
            outs.insert(name.to_string());
        } else {
            strays.push(file);
        }
    }
    assert!(strays.is_empty(), "files in tests/golden/cases that are neither .args nor .out: {strays:?}");
    let untested: Vec<&String> = args.union(&outs).filter(|n| !listed.contains(*n)).collect();
    assert!(untested.is_empty(), "case files without a test (add them to golden_cases!): {untested:?}");
    let no_args: Vec<&String> = listed.difference(&args).collect();
    assert!(no_args.is_empty(), "golden_cases! lists cases without a tests/golden/cases/NAME.args: {no_args:?}");
    if !blessing() {
        let no_out: Vec<&String> = listed.difference(&outs).collect();
        assert!(no_out.is_empty(), "cases without an expected NAME.out (WASMTAP_BLESS=1 writes it): {no_out:?}");
    }
    // And every committed recording is replayed by some case.
    let replayed: BTreeSet<String> = args
        .iter()
        .filter_map(|n| {
            let line = std::fs::read_to_string(golden_dir().join("cases").join(format!("{n}.args"))).ok()?;
            line.split_whitespace().nth(1).map(str::to_string)
        })
        .collect();
    let unreplayed: Vec<String> = std::fs::read_dir(golden_dir())
        .expect("tests/golden")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".wtrec") && !replayed.contains(f))
        .collect();
    assert!(unreplayed.is_empty(), "recordings no golden case replays: {unreplayed:?}");
}

/// Unchanged lines a unified diff shows around each change.
const CONTEXT: usize = 3;
/// Lines of a diff printed before it is cut.
const DIFF_LINES_MAX: usize = 200;
/// Beyond this many cells of the LCS table (changed lines of one side times the
/// other's), the differing middle is shown as all removed and all added.
const LCS_CELLS_MAX: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    /// A line of both: its index in the expected output and in the actual one.
    Same(usize, usize),
    /// A line only the expected output has.
    Removed(usize),
    /// A line only the actual output has.
    Added(usize),
}

/// An edit script from `a` to `b` keeping a longest common subsequence of lines, with
/// removals before additions where both could come first.
fn diff_lines(a: &[&str], b: &[&str]) -> Vec<Op> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..].iter().rev().zip(b[pre..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let (n, m) = (am.len(), bm.len());
    let mut ops: Vec<Op> = (0..pre).map(|i| Op::Same(i, i)).collect();
    if n.saturating_mul(m) <= LCS_CELLS_MAX {
        // lcs[i * w + j]: the length of a longest common subsequence of am[i..] and bm[j..].
        let w = m + 1;
        let mut lcs = vec![0u32; (n + 1) * w];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Same(pre + i, pre + j));
                (i, j) = (i + 1, j + 1);
            } else if i < n && (j == m || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                ops.push(Op::Removed(pre + i));
                i += 1;
            } else {
                ops.push(Op::Added(pre + j));
                j += 1;
            }
        }
    } else {
        ops.extend((0..n).map(|i| Op::Removed(pre + i)));
        ops.extend((0..m).map(|j| Op::Added(pre + j)));
    }
    ops.extend((0..suf).map(|k| Op::Same(a.len() - suf + k, b.len() - suf + k)));
    ops
}

/// A unified diff (`diff -u` style) of `expected` against `actual`, lines compared with
/// their line ends, `context` unchanged lines around each change; empty when they are
/// equal. Long diffs are cut after [`DIFF_LINES_MAX`] lines.
fn unified_diff(expected: &str, actual: &str, expected_name: &str, actual_name: &str, context: usize) -> String {
    let a: Vec<&str> = expected.split_inclusive('\n').collect();
    let b: Vec<&str> = actual.split_inclusive('\n').collect();
    let ops = diff_lines(&a, &b);
    let changes: Vec<usize> = (0..ops.len()).filter(|&k| !matches!(ops[k], Op::Same(..))).collect();
    if changes.is_empty() {
        return String::new();
    }
    // Lines of each side before op k.
    let (mut a_at, mut b_at) = (vec![0; ops.len() + 1], vec![0; ops.len() + 1]);
    for (k, op) in ops.iter().enumerate() {
        a_at[k + 1] = a_at[k] + usize::from(!matches!(op, Op::Added(_)));
        b_at[k + 1] = b_at[k] + usize::from(!matches!(op, Op::Removed(_)));
    }
    let range = |start: usize, len: usize| match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    };
    let mut out = format!("--- {expected_name}\n+++ {actual_name}\n");
    let mut body = Vec::new();
    let mut c = 0;
    while c < changes.len() {
        // A hunk: changes no more than 2 * context unchanged lines apart, with context.
        let mut last = c;
        while last + 1 < changes.len() && changes[last + 1] - changes[last] <= 2 * context + 1 {
            last += 1;
        }
        let (start, end) = (changes[c].saturating_sub(context), (changes[last] + context + 1).min(ops.len()));
        body.push(format!(
            "@@ -{} +{} @@",
            range(a_at[start], a_at[end] - a_at[start]),
            range(b_at[start], b_at[end] - b_at[start])
        ));
        for op in &ops[start..end] {
            let (tag, line) = match *op {
                Op::Same(i, _) => (' ', a[i]),
                Op::Removed(i) => ('-', a[i]),
                Op::Added(j) => ('+', b[j]),
            };
            body.push(format!("{tag}{}", line.strip_suffix('\n').unwrap_or(line)));
            if !line.ends_with('\n') {
                body.push("\\ No newline at end of file".to_string());
            }
        }
        c = last + 1;
    }
    let cut = body.len().saturating_sub(DIFF_LINES_MAX);
    body.truncate(DIFF_LINES_MAX);
    for line in body {
        out += &line;
        out.push('\n');
    }
    if cut > 0 {
        out += &format!("... {cut} more lines of diff\n");
    }
    out
}

#[test]
fn a_unified_diff_shows_each_change_with_its_context() {
    let expected = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n";
    let actual = "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\nl\nm";
    assert_eq!(unified_diff(expected, expected, "x", "y", 3), "");
    assert_eq!(
        unified_diff(expected, actual, "expected", "actual", 2),
        "--- expected\n+++ actual\n\
         @@ -2,5 +2,5 @@\n b\n c\n-d\n+D\n e\n f\n\
         @@ -11,2 +11,3 @@\n k\n l\n+m\n\\ No newline at end of file\n"
    );
    // Close changes share a hunk; removals come before additions.
    assert_eq!(
        unified_diff("1\n2\n3\n4\n", "1\n3\nx\n4\n", "e", "a", 1),
        "--- e\n+++ a\n@@ -1,4 +1,4 @@\n 1\n-2\n 3\n+x\n 4\n"
    );
    assert_eq!(unified_diff("", "x\n", "e", "a", 3), "--- e\n+++ a\n@@ -0,0 +1 @@\n+x\n");
    assert_eq!(unified_diff("x\n", "", "e", "a", 3), "--- e\n+++ a\n@@ -1 +0,0 @@\n-x\n");
}

//! Plugins in other languages than Rust, built from `examples/<lang>-*` by `./x build`
//! with their SDK (`guest-sdk/<lang>`), against the Rust plugins that answer the same
//! question: the same facts from the same recording, byte for byte, and exact counts
//! live. Live tests need root and BPF: in CI they run and must pass.

use std::path::{Path, PathBuf};

use serde_json::Value;
use wasmtap_tests::*;

/// `-o json` records of a replay of `recording` (tests/golden) by `plugin`, with the
/// plugin's name taken out, so that two plugins' records compare.
fn replay(recording: &str, plugin: &str, params: &[&str]) -> Vec<Value> {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(recording);
    let o = run(wasmtap().arg("replay").arg(&rec).arg(plugin).args(params).args(["-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{plugin}: {}", stderr(&o));
    let mut lines = json_lines(&stdout(&o));
    lines.retain(|v| v["type"] == "row" || v["type"] == "map");
    for v in &mut lines {
        if let Some(m) = v.as_object_mut() {
            m.remove("plugin");
        }
    }
    lines
}

#[test]
fn the_c_examples_replay_exactly_what_the_rust_plugins_report() {
    let c = wasm("c-opensnoop").display().to_string();
    let rows = replay("files.wtrec", &c, &[]);
    assert_eq!(rows, replay("files.wtrec", "opensnoop", &[]));
    // The recording's 18 opens, failures decoded, relative paths made absolute.
    assert_eq!(rows.len(), 18);
    let data: Vec<&Value> = rows.iter().map(|v| &v["data"]).collect();
    assert!(data.iter().any(|d| d["ERR"] == "ENOENT" && d["FD"] == -1), "{data:#?}");
    assert!(data.iter().any(|d| d["FLAGS"] == "O_WRONLY|O_CREAT|O_APPEND"), "{data:#?}");
    assert!(data.iter().all(|d| d["PATH"].as_str().is_some_and(|p| p.starts_with('/'))), "{data:#?}");

    let c = wasm("c-syscount").display().to_string();
    let maps = replay("syscalls.wtrec", &c, &["--param", "top=0"]);
    assert_eq!(maps, replay("syscalls.wtrec", "syscount", &["--param", "top=0"]));
    assert_eq!(maps[0]["data"]["@syscall"]["getppid"], 1000, "{maps:?}");
}

#[test]
fn the_c_syscount_counts_every_getppid_of_its_command_exactly() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 1000000", workload("getppid_loop").display());
    let o = run(wasmtap().arg("run").arg(wasm("c-syscount")).args(["--param", "top=0", "-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let map = |name: &str| {
        lines.iter().find_map(|v| v["data"].get(name).cloned()).unwrap_or_else(|| panic!("no {name}: {out}"))
    };
    assert_eq!(map("@syscall")["getppid"], 1_000_000, "{out}");
    assert!(map("@process")["getppid_loop"].as_u64().is_some_and(|n| n >= 1_000_000), "{out}");
}

#[test]
fn the_c_opensnoop_reports_the_same_opens_as_the_rust_one_in_the_same_run() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 20 6 5 0", workload("opener").display());
    let o = run(wasmtap().arg("run").arg("opensnoop").arg(wasm("c-opensnoop")).args(["-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let rows = |plugin: &str| -> Vec<&Value> {
        lines.iter().filter(|v| v["type"] == "row" && v["plugin"] == plugin).map(|v| &v["data"]).collect()
    };
    let (rust, c) = (rows("opensnoop"), rows("c-opensnoop"));
    assert_eq!(c, rust);
    // The workload's own count of the opens under its directory, as the C plugin saw them.
    let dir = err.lines().find_map(|l| l.strip_prefix("dir ")).expect("the workload's directory").trim();
    let truth = err.lines().find(|l| l.starts_with("create ")).expect("the workload's totals");
    let mine: Vec<_> = c.iter().filter(|r| r["PATH"].as_str().is_some_and(|p| p.starts_with(dir))).collect();
    let failed = mine.iter().filter(|r| r["FD"] == -1 && r["ERR"] == "ENOENT").count();
    let creates = mine.iter().filter(|r| r["FLAGS"].as_str().is_some_and(|f| f.contains("O_CREAT"))).count();
    let want = format!("create {creates} open {} success {} fail {failed}", mine.len() - creates, mine.len() - failed);
    assert_eq!(truth.trim(), want);
}

/// A fixture in C (`tests/c-fixtures/NAME.c`), built with the C SDK's tool.
fn c_fixture(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c-fixtures").join(format!("{name}.c"));
    let out = target_dir().join("c-fixtures").join(format!("{name}.wasm"));
    let o = run(std::process::Command::new(target_dir().join("release/wasmtap-c"))
        .arg("build")
        .arg("-o")
        .arg(&out)
        .arg(&src));
    assert!(o.status.success(), "building {}: {}", src.display(), stderr(&o));
    out
}

/// Hostile plugins in C are stopped as the Rust ones are, each alone, with the same
/// messages, while syscount beside them counts every getppid.
#[test]
fn hostile_c_plugins_are_stopped_with_the_rust_ones_messages_while_syscount_stays_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let hostile = ["c-spin", "c-membomb", "c-abort"];
    let cmd = format!("{} 1000000", workload("getppid_loop").display());
    let mut c = wasmtap();
    c.args(["run", "syscount", "--param", "syscount.top=0"]);
    for h in hostile {
        c.arg(c_fixture(h));
    }
    let o = run(c.args(["-c", &cmd, "-o", "json", "--deadline", "100ms"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "disabled plugins make the run end with problems\n{err}");
    let lines = json_lines(&out);
    let count = lines.iter().find_map(|v| v["data"]["@syscall"]["getppid"].as_u64());
    assert_eq!(count, Some(1_000_000), "{out}");
    let acct = accounting(&lines);
    let good = plugin(acct, "syscount");
    assert!(good["disabled"].is_null() && u(&good["faults"]) == 0, "{good}");
    for (name, kind, reason) in [
        ("c-spin", "deadline", "ran past its deadline of 100 ms"),
        ("c-membomb", "memory", "exceeded its memory limit of 64 MiB"),
        ("c-abort", "trap", "aborted (wasm `unreachable`)"),
    ] {
        let p = plugin(acct, name);
        assert_eq!(p["last_fault"]["kind"], kind, "{p}");
        assert!(p["last_fault"]["reason"].as_str().is_some_and(|r| r.contains(reason)), "{p}");
        assert!(err.contains(&format!("plugin `{name}` disabled in on-batch: {reason}")), "{err}");
        assert_eq!(u(&p["batches"]), 1, "stopped in its first call: {p}");
    }
}

//! Plugins in other languages than Rust, built from `examples/<lang>-*` by `./x build`
//! with their SDK (`guest-sdk/<lang>`), against the Rust plugins that answer the same
//! question: the same facts from the same recording, byte for byte, and exact counts
//! live; each SDK's decoder against the Rust SDK's table of records; hostile plugins in
//! each language stopped as the Rust ones are. Live tests need root and BPF: in CI they
//! run and must pass.

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

/// The languages with examples (`examples/<lang>-syscount`, `examples/<lang>-opensnoop`).
const LANGS: [&str; 3] = ["c", "python", "js"];

#[test]
fn the_examples_in_every_language_replay_exactly_what_the_rust_plugins_report() {
    let rust_rows = replay("files.wtrec", "opensnoop", &[]);
    let rust_maps = replay("syscalls.wtrec", "syscount", &["--param", "top=0"]);
    for lang in LANGS {
        let plugin = wasm(&format!("{lang}-opensnoop")).display().to_string();
        let rows = replay("files.wtrec", &plugin, &[]);
        assert_eq!(rows, rust_rows, "{lang}-opensnoop");
        // The recording's 18 opens, failures decoded, relative paths made absolute.
        assert_eq!(rows.len(), 18);
        let data: Vec<&Value> = rows.iter().map(|v| &v["data"]).collect();
        assert!(data.iter().any(|d| d["ERR"] == "ENOENT" && d["FD"] == -1), "{data:#?}");
        assert!(data.iter().any(|d| d["FLAGS"] == "O_WRONLY|O_CREAT|O_APPEND"), "{data:#?}");
        assert!(data.iter().all(|d| d["PATH"].as_str().is_some_and(|p| p.starts_with('/'))), "{data:#?}");

        let plugin = wasm(&format!("{lang}-syscount")).display().to_string();
        let maps = replay("syscalls.wtrec", &plugin, &["--param", "top=0"]);
        assert_eq!(maps, rust_maps, "{lang}-syscount");
        assert_eq!(maps[0]["data"]["@syscall"]["getppid"], 1000, "{maps:?}");
    }
}

/// The SDKs written in their own language decode the Rust SDK's table of records
/// (guest-sdk/vectors.json, every kind of the layout) to the same values, field by field.
#[test]
fn every_sdk_decodes_the_rust_sdks_table_of_records_alike() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (runtime, test) in [("python3", "guest-sdk/python/test_events.py"), ("node", "guest-sdk/js/test_events.mjs")] {
        let o = run(std::process::Command::new(runtime).arg(root.join(test)));
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{test}: {out}{}", stderr(&o));
        assert!(out.contains("23 records, 0 mismatches"), "{test}: {out}");
    }
}

/// The Python and JavaScript SDKs' name tables are the ones `wasmtap-c names` writes
/// from wasmtap-abi and the syscalls tapset (as the C SDK's are), not copies that drift.
#[test]
fn the_sdks_name_tables_are_written_from_the_tapset() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (lang, file) in [("python", "guest-sdk/python/wasmtap_names.py"), ("js", "guest-sdk/js/names.js")] {
        let o = run(std::process::Command::new(target_dir().join("release/wasmtap-c")).args(["names", lang]));
        assert!(o.status.success(), "{}", stderr(&o));
        let have = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(have == stdout(&o), "{file} is stale: target/release/wasmtap-c names {lang} > {file}");
        assert!(have.contains("\"getppid\"") && have.contains("\"ENOENT\"") && have.contains("\"O_CLOEXEC\""));
    }
}

#[test]
fn the_syscount_in_every_language_counts_every_getppid_of_its_command_exactly() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 1000000", workload("getppid_loop").display());
    for lang in LANGS {
        let plugin = wasm(&format!("{lang}-syscount"));
        let o = run(wasmtap().arg("run").arg(plugin).args(["--param", "top=0", "-c", &cmd, "-o", "json"]));
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{lang}: stdout:\n{out}\nstderr:\n{err}");
        let lines = json_lines(&out);
        let map = |name: &str| {
            lines.iter().find_map(|v| v["data"].get(name).cloned()).unwrap_or_else(|| panic!("no {name}: {out}"))
        };
        assert_eq!(map("@syscall")["getppid"], 1_000_000, "{lang}: {out}");
        assert!(map("@process")["getppid_loop"].as_u64().is_some_and(|n| n >= 1_000_000), "{lang}: {out}");
    }
}

/// Every language's opensnoop beside the Rust one in one run: the same rows, and the
/// workload's own totals of creates, opens and failures.
#[test]
fn the_opensnoop_in_every_language_reports_the_same_opens_as_the_rust_one_in_the_same_run() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 20 6 5 0", workload("opener").display());
    let mut c = wasmtap();
    c.arg("run").arg("opensnoop");
    for lang in LANGS {
        c.arg(wasm(&format!("{lang}-opensnoop")));
    }
    let o = run(c.args(["-c", &cmd, "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = json_lines(&out);
    let rows = |plugin: &str| -> Vec<&Value> {
        lines.iter().filter(|v| v["type"] == "row" && v["plugin"] == plugin).map(|v| &v["data"]).collect()
    };
    let rust = rows("opensnoop");
    // The workload's own count of the opens under its directory.
    let dir = err.lines().find_map(|l| l.strip_prefix("dir ")).expect("the workload's directory").trim();
    let truth = err.lines().find(|l| l.starts_with("create ")).expect("the workload's totals");
    for lang in LANGS {
        let theirs = rows(&format!("{lang}-opensnoop"));
        assert_eq!(theirs, rust, "{lang}-opensnoop");
        let mine: Vec<_> = theirs.iter().filter(|r| r["PATH"].as_str().is_some_and(|p| p.starts_with(dir))).collect();
        let failed = mine.iter().filter(|r| r["FD"] == -1 && r["ERR"] == "ENOENT").count();
        let creates = mine.iter().filter(|r| r["FLAGS"].as_str().is_some_and(|f| f.contains("O_CREAT"))).count();
        let want =
            format!("create {creates} open {} success {} fail {failed}", mine.len() - creates, mine.len() - failed);
        assert_eq!(truth.trim(), want, "{lang}-opensnoop");
    }
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

/// A fixture in Python or JavaScript (`tests/LANG-fixtures/NAME/plugin.py` or `plugin.js`,
/// sharing the directory's modules), built by `wasmtap plugin build`.
fn script_fixture(lang: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("{lang}-fixtures"));
    let out = target_dir().join(format!("{lang}-fixtures")).join(format!("{name}.wasm"));
    let o =
        run(wasmtap().args(["plugin", "build"]).arg(dir.join(name)).arg("--module-path").arg(&dir).arg("-o").arg(&out));
    assert!(o.status.success(), "building {name}: {}", stderr(&o));
    out
}

/// Hostile plugins in C, Python and JavaScript are stopped as the Rust ones are, each alone, with
/// the same messages, while syscount beside them counts every getppid.
#[test]
fn hostile_plugins_in_every_language_are_stopped_with_the_rust_ones_messages_while_syscount_stays_exact() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 1000000", workload("getppid_loop").display());
    let mut c = wasmtap();
    c.args(["run", "syscount", "--param", "syscount.top=0"]);
    for h in ["c-spin", "c-membomb", "c-abort"] {
        c.arg(c_fixture(h));
    }
    for h in ["py-spin", "py-membomb", "py-raise"] {
        c.arg(script_fixture("python", h));
    }
    for h in ["js-spin", "js-membomb", "js-throw"] {
        c.arg(script_fixture("js", h));
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
        ("py-spin", "deadline", "ran past its deadline of 100 ms"),
        ("py-membomb", "memory", "exceeded its memory limit of 64 MiB"),
        // An uncaught exception: its type and message, as the SDK logged them.
        (
            "py-raise",
            "trap",
            "aborted (wasm `unreachable`): on_batch raised ZeroDivisionError: a batch the plugin cannot take",
        ),
        ("js-spin", "deadline", "ran past its deadline of 100 ms"),
        ("js-membomb", "memory", "exceeded its memory limit of 64 MiB"),
        ("js-throw", "trap", "aborted (wasm `unreachable`): onBatch raised RangeError: a batch the plugin cannot take"),
    ] {
        let p = plugin(acct, name);
        assert_eq!(p["last_fault"]["kind"], kind, "{p}");
        assert!(p["last_fault"]["reason"].as_str().is_some_and(|r| r.contains(reason)), "{p}");
        assert!(err.contains(&format!("plugin `{name}` disabled in on-batch: {reason}")), "{err}");
        assert_eq!(u(&p["batches"]), 1, "stopped in its first call: {p}");
    }
}

//! Plugins in other languages than Rust, built from `examples/<lang>-*` by `./x build`
//! with their SDK (`guest-sdk/<lang>`), against the Rust plugins that answer the same
//! question: the same facts from the same recording, byte for byte, and exact counts
//! live; each SDK's decoder against the Rust SDK's table of records; hostile plugins in
//! each language stopped as the Rust ones are. Live tests need root and BPF: in CI they
//! run and must pass.

use std::path::{Path, PathBuf};

use serde_json::Value;
use wasmtap_tests::*;

/// `-o json` rows, maps and histograms of a replay of `recording` (tests/golden) by `plugin`, with the
/// plugin's name taken out, so that two plugins' records compare.
fn replay(recording: &str, plugin: &str, params: &[&str]) -> Vec<Value> {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(recording);
    let o = run(wasmtap().arg("replay").arg(&rec).arg(plugin).args(params).args(["-o", "json"]));
    assert_eq!(o.status.code(), Some(0), "{plugin}: {}", stderr(&o));
    let mut lines = json_lines(&stdout(&o));
    lines.retain(|v| ["row", "map", "hist"].iter().any(|t| v["type"] == *t));
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

/// Counts and histograms kept in the plugin, and a tracepoint field read by name through
/// the host's schema, in C, Python and JavaScript (the tally fixtures): the same maps in
/// each, and the facts the Rust plugins report of the same recordings.
#[test]
fn counts_histograms_and_tracepoint_fields_agree_in_every_language_and_with_the_rust_plugins() {
    let plugins = [c_fixture("c-tally"), script_fixture("python", "py-tally"), script_fixture("js", "js-tally")];
    let opens: Vec<Vec<Value>> = plugins.iter().map(|p| replay("files.wtrec", &p.display().to_string(), &[])).collect();
    let switches: Vec<Vec<Value>> = plugins
        .iter()
        .map(|p| replay("runqlat.wtrec", &p.display().to_string(), &["--param", "switches=true"]))
        .collect();
    for i in 1..plugins.len() {
        assert_eq!(opens[i], opens[0], "{} against {}", plugins[i].display(), plugins[0].display());
        assert_eq!(switches[i], switches[0], "{} against {}", plugins[i].display(), plugins[0].display());
    }
    // Opens by errno, and a histogram of the fds: what the Rust opensnoop's rows say.
    let rows = replay("files.wtrec", "opensnoop", &[]);
    let errors = opens[0].iter().find_map(|v| v["data"].get("@errors")).expect("@errors");
    let mut want = serde_json::Map::new();
    for r in &rows {
        let e = r["data"]["ERR"].as_str().unwrap().to_string();
        let n = want.get(&e).and_then(Value::as_u64).unwrap_or(0);
        want.insert(e, (n + 1).into());
    }
    assert_eq!(errors, &Value::Object(want), "{rows:?}");
    let fds = opens[0].iter().find_map(|v| v["data"].get("@fds")).expect("@fds");
    let buckets = fds["opener"].as_array().expect("opener's histogram");
    let count_in = |lo: i64, hi: i64| {
        rows.iter()
            .filter(|r| r["data"]["ERR"] == "-")
            .filter(|r| (lo..=hi).contains(&r["data"]["FD"].as_i64().unwrap()))
            .count() as u64
    };
    let failed = rows.iter().filter(|r| r["data"]["ERR"] == "ENOENT").count() as u64;
    for b in buckets {
        let (lo, hi, n) = (b["min"].as_i64().unwrap(), b["max"].as_i64().unwrap(), b["count"].as_u64().unwrap());
        // ENOENT is -2: the bucket [-3, -2]; the fds, each in its power of two.
        let want = if hi < 0 { failed } else { count_in(lo, hi) };
        assert_eq!(n, want, "bucket [{lo}, {hi}] of {fds}");
        assert!(hi < 0 || (lo == 0 && hi == 0) || hi == 2 * lo - 1, "a power-of-two bucket: {b}");
    }
    assert_eq!(buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(), rows.len() as u64);
    // sched_switch by next_comm, a text field of the tracepoint read by name: what a
    // one-liner counts (the script plugin, in Rust).
    let program = "program=tracepoint:sched:sched_switch { $x = 1; @[args.next_comm] = count(); }";
    let script = replay("runqlat.wtrec", "script", &["--param", program]);
    let next = switches[0].iter().find_map(|v| v["data"].get("@next")).expect("@next");
    assert_eq!(Some(next), script.iter().find_map(|v| v["data"].get("@")));
    assert_eq!(next["pingpong"], 202, "{next}");
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

/// The C SDK's decoder (guest-sdk/c/src/events.c, built natively) against the Rust SDK's
/// table of records: a C program with one check per field of every record, written from
/// guest-sdk/vectors.json.
#[test]
fn the_c_decoder_reads_the_rust_sdks_table_of_records_alike() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("guest-sdk/vectors.json")).unwrap()).unwrap();
    let dir = target_dir().join("c-vectors");
    let o = run(std::process::Command::new(target_dir().join("release/wasmtap-c")).arg("bindings").arg(&dir));
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(dir.join("vectors.c"), c_checks(&table)).unwrap();
    let exe = dir.join("vectors");
    let sdk = root.join("guest-sdk/c");
    let o = run(std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(&dir)
        .arg("-I")
        .arg(sdk.join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(dir.join("vectors.c"))
        .arg(sdk.join("src/events.c")));
    assert!(o.status.success(), "compiling the checks: {}", stderr(&o));
    let o = run(&mut std::process::Command::new(&exe));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let records = table["records"].as_array().unwrap().len();
    assert!(out.contains(&format!("{records} records, 0 mismatches")), "{out}");
    // Every field of every record is checked: the header's, the kind's, stacks, tracepoint fields.
    let checks: usize = out.lines().find_map(|l| l.strip_suffix(" checks")?.parse().ok()).expect("a count of checks");
    assert!(checks >= 400, "{out}");
}

/// A C literal of a JSON string.
fn c_str(v: &Value) -> String {
    match v.as_str() {
        Some(s) => format!("{:?}", s).replace("\\u{2026}", "\\xe2\\x80\\xa6"),
        None => "NULL".into(),
    }
}

/// A JSON integer or boolean as a C `uint64_t` literal (negative ones as their two's complement).
fn c_u64(v: &Value) -> String {
    match v {
        Value::Bool(b) => format!("{}u", u8::from(*b)),
        v if v.is_u64() => format!("{}ull", v.as_u64().unwrap()),
        v => format!("(uint64_t){}ll", v.as_i64().expect("an integer")),
    }
}

/// The C program checking every record of the table: `U(name, expr, want)` for integers,
/// `S(name, ptr, len, want)` for text and bytes (NULL for none).
fn c_checks(table: &Value) -> String {
    let mut c = String::from(
        r#"#include <stdio.h>
#include <string.h>
#include "wasmtap_events.h"
static int bad, checks;
static void u(const char *c, const char *k, unsigned long long got, unsigned long long want) {
	checks++;
	if (got != want) { printf("FAIL %s: %s is %llu, the Rust SDK reads %llu\n", c, k, got, want); bad++; }
}
static void s(const char *c, const char *k, const void *got, size_t len, const char *want, size_t wlen) {
	checks++;
	if ((!got) != (!want) || (got && (len != wlen || memcmp(got, want, len) != 0))) {
		printf("FAIL %s: %s is %.*s, the Rust SDK reads %s\n", c, k, got ? (int)len : 4, got ? (const char *)got : "NULL", want ? want : "NULL");
		bad++;
	}
}
#define U(k, e, w) u(name, k, (unsigned long long)(e), (unsigned long long)(w))
static size_t sl(const char *w) { return w ? strlen(w) : 0; }
#define S(k, p, n, w) s(name, k, p, n, w, sl(w))
#define SZ(k, p, w) do { const char *p_ = (p); S(k, p_, p_ ? strlen(p_) : 0, w); } while (0)
int main(void) {
	char buf[2048]; size_t len; const char *str; const uint8_t *bytes; uint64_t v, x, y; wt_frames kf, uf;
	(void)str; (void)x; (void)y;
"#,
    );
    let records = table["records"].as_array().unwrap();
    for r in records {
        let e = &r["expect"];
        let hex = r["record"].as_str().unwrap();
        let bytes: Vec<String> = (0..hex.len()).step_by(2).map(|i| format!("0x{}", &hex[i..i + 2])).collect();
        c.push_str(&format!(
            "\t{{ static const uint8_t r[] = {{{}}}; const char *name = {}; wt_event ev; size_t off = 0;\n",
            bytes.join(","),
            c_str(&r["name"])
        ));
        c.push_str("\tif (!wt_next_record(r, sizeof r, &off, &ev)) { printf(\"FAIL %s: not decoded\\n\", name); bad++; } else {\n");
        let mut check = |line: String| c.push_str(&format!("\t\t{line}\n"));
        for (k, f) in [
            ("ts_ns", "ev.ts_ns"),
            ("pid", "ev.pid"),
            ("tid", "ev.tid"),
            ("uid", "ev.uid"),
            ("gid", "ev.gid"),
            ("cgroup_id", "ev.cgroup"),
            ("sub", "ev.sub"),
            ("flags", "ev.flags"),
        ] {
            check(format!("U({k:?}, {f}, {});", c_u64(&e[k])));
        }
        check(format!("SZ(\"comm\", ev.comm, {});", c_str(&e["comm"])));
        match &e["stacks"] {
            Value::Null => check("U(\"stacks\", wt_stacks(&ev, &kf, &uf), 0);".into()),
            st => {
                check("U(\"stacks\", wt_stacks(&ev, &kf, &uf), 1);".into());
                for (side, var) in [("kernel", "kf"), ("user", "uf")] {
                    let frames = st[side].as_array().unwrap();
                    check(format!("U(\"stacks.{side}\", {var}.len, {});", frames.len()));
                    for (i, fr) in frames.iter().enumerate() {
                        check(format!("U(\"stacks.{side}[{i}]\", wt_frame({var}, {i}), {});", c_u64(fr)));
                    }
                }
            }
        }
        let kind = e["kind"].as_str().unwrap();
        let num = |k: &str, expr: &str| format!("U({k:?}, {expr}, {});", c_u64(&e[k]));
        match kind {
            "sys_enter" | "sys_exit" => {
                check(format!("U(\"kind\", ev.kind, {});", if kind == "sys_enter" { 1 } else { 2 }));
                check(num("nr", "wt_sys_nr(&ev)"));
                check(format!("SZ(\"name\", wt_syscall_name(wt_sys_nr(&ev)), {});", c_str(&e["name"])));
                if kind == "sys_enter" {
                    for (i, a) in e["args"].as_array().unwrap().iter().enumerate() {
                        check(format!("U(\"args[{i}]\", wt_sys_arg(&ev, {i}), {});", c_u64(a)));
                    }
                } else {
                    check(num("ret", "wt_sys_ret(&ev)"));
                }
            }
            "exec" => {
                check(num("ppid", "wt_exec_ppid(&ev)"));
                check(num("ret", "wt_exec_ret(&ev)"));
                check(num("argc", "wt_exec_argc(&ev)"));
                check(num("truncated", "wt_exec_truncated(&ev)"));
                let args = e["args"].as_array().unwrap();
                for (i, a) in args.iter().enumerate() {
                    check(format!("str = wt_exec_arg(&ev, {i}, &len); S(\"args[{i}]\", str, len, {});", c_str(a)));
                }
                check(format!("U(\"args past the last\", wt_exec_arg(&ev, {}, &len) == NULL, 1);", args.len()));
            }
            "fork" => {
                check(num("child_pid", "wt_fork_child_pid(&ev)"));
                check(num("child_tid", "wt_fork_child_tid(&ev)"));
                check(num("is_thread", "wt_fork_is_thread(&ev)"));
            }
            "exit" => {
                for (k, f) in [
                    ("exit_code", "wt_exit_status"),
                    ("code", "wt_exit_code"),
                    ("signal", "wt_exit_signal"),
                    ("core_dumped", "wt_exit_core_dumped"),
                    ("ppid", "wt_exit_ppid"),
                    ("start_ns", "wt_exit_start_ns"),
                    ("group_dead", "wt_exit_group_dead"),
                ] {
                    check(num(k, &format!("{f}(&ev)")));
                }
                match e["cpu_ns"].is_null() {
                    true => check("U(\"cpu_ns\", wt_exit_cpu(&ev, &v, &x, &y), 0);".into()),
                    false => {
                        check("U(\"cpu_ns present\", wt_exit_cpu(&ev, &v, &x, &y), 1);".into());
                        check(format!(
                            "U(\"cpu_ns\", v, {}); U(\"user_ns\", x, {}); U(\"sys_ns\", y, {});",
                            c_u64(&e["cpu_ns"]),
                            c_u64(&e["user_ns"]),
                            c_u64(&e["sys_ns"])
                        ));
                    }
                }
            }
            "open" => {
                for (k, f) in [
                    ("nr", "wt_open_nr"),
                    ("dfd", "wt_open_dfd"),
                    ("flags_value", "wt_open_flags"),
                    ("mode", "wt_open_mode"),
                    ("ret", "wt_open_ret"),
                    ("latency_ns", "wt_open_latency_ns"),
                    ("path_truncated", "wt_open_path_truncated"),
                    ("base_truncated", "wt_open_base_truncated"),
                ] {
                    check(num(k, &format!("{f}(&ev)")));
                }
                check(format!("SZ(\"name\", wt_syscall_name(wt_open_nr(&ev)), {});", c_str(&e["name"])));
                check(format!(
                    "SZ(\"errno\", wt_open_ret(&ev) < 0 ? wt_errno_name(wt_open_ret(&ev)) : NULL, {});",
                    c_str(&e["errno"])
                ));
                check(format!("SZ(\"path\", wt_open_path(&ev), {});", c_str(&e["path"])));
                check(format!(
                    "wt_open_full_path(&ev, buf, sizeof buf); SZ(\"full_path\", buf, {});",
                    c_str(&e["full_path"])
                ));
                check(format!(
                    "wt_open_flags_str(wt_open_flags(&ev), buf, sizeof buf); SZ(\"flags_str\", buf, {});",
                    c_str(&e["flags_str"])
                ));
            }
            "tracepoint" => {
                check(num("event_id", "wt_tp_event_id(&ev)"));
                check(num("truncated", "wt_tp_truncated(&ev)"));
                let data = e["data"].as_str().unwrap();
                let lit: String = (0..data.len()).step_by(2).map(|i| format!("\\x{}", &data[i..i + 2])).collect();
                check(format!(
                    "bytes = wt_tp_data(&ev, &len); s(name, \"data\", bytes, len, \"{lit}\", {});",
                    data.len() / 2
                ));
                for f in r["schema"].as_array().unwrap() {
                    let fname = f["name"].as_str().unwrap();
                    let kind = ["signed", "unsigned", "text", "dynamic-text", "dynamic-bytes", "array"]
                        .iter()
                        .position(|k| f["kind"] == *k)
                        .unwrap();
                    check(format!(
                        "{{ wt_field f = {{ {kind}, {}, {}, {}, {} }};",
                        f["signed"].as_bool().unwrap(),
                        f["offset"],
                        f["size"],
                        f["count"]
                    ));
                    let want = &e["fields"][fname];
                    let line = match (kind, want) {
                        (0 | 1, Value::Null) => format!("U(\"{fname}\", wt_field_int(&ev, &f, &v), 0);"),
                        (0 | 1, w) => format!("U(\"{fname} read\", wt_field_int(&ev, &f, &v), 1); U(\"{fname}\", v, {});", c_u64(w)),
                        (5, Value::Null) => format!("U(\"{fname}\", wt_field_elem(&ev, &f, 0, &v), 0);"),
                        (5, w) => w
                            .as_array()
                            .unwrap()
                            .iter()
                            .enumerate()
                            .map(|(i, x)| format!("U(\"{fname}[{i}] read\", wt_field_elem(&ev, &f, {i}, &v), 1); U(\"{fname}[{i}]\", v, {});", c_u64(x)))
                            .collect::<Vec<_>>()
                            .join(" "),
                        (4, Value::String(h)) => {
                            let lit: String = (0..h.len()).step_by(2).map(|i| format!("\\x{}", &h[i..i + 2])).collect();
                            format!("bytes = wt_field_bytes(&ev, &f, &len); s(name, \"{fname}\", bytes, len, \"{lit}\", {});", h.len() / 2)
                        }
                        (_, w) => format!("bytes = wt_field_bytes(&ev, &f, &len); S(\"{fname}\", bytes, len, {});", c_str(w)),
                    };
                    check(format!("{line} }}"));
                }
            }
            "user" => {
                for (k, f) in [
                    ("probe", "wt_user_probe"),
                    ("ip", "wt_user_ip"),
                    ("nargs", "wt_user_nargs"),
                    ("is_return", "wt_user_is_return"),
                ] {
                    check(num(k, &format!("{f}(&ev)")));
                }
                for (i, a) in e["args"].as_array().unwrap().iter().enumerate() {
                    check(format!("U(\"args[{i}]\", wt_user_arg(&ev, {i}), {});", c_u64(a)));
                }
                if !e["retval"].is_null() {
                    check(format!("U(\"retval\", wt_user_arg(&ev, 0), {});", c_u64(&e["retval"])));
                }
            }
            "sample" => {
                for (k, f) in [
                    ("event", "wt_sample_event"),
                    ("cpu", "wt_sample_cpu"),
                    ("addr", "wt_sample_addr"),
                    ("ip", "wt_sample_ip"),
                ] {
                    check(num(k, &format!("{f}(&ev)")));
                }
            }
            other => panic!("a kind the checks do not know: {other}"),
        }
        c.push_str("\t} }\n");
    }
    c.push_str(&format!(
        "\tprintf(\"%d checks\\n{} records, %d mismatches\\n\", checks, bad);\n\treturn bad != 0;\n}}\n",
        records.len()
    ));
    c
}

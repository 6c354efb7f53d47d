//! Versions of the contract: a plugin built for the previous minor version of the
//! `plugin` world (`wasmtap:plugin@0.1.0`, the `previous` fixture) runs beside current
//! ones, gets the same answers, and the host says which version each plugin is built for.

use wasmtap_tests::*;

const PREVIOUS: &str = "wasmtap: previous: built for wasmtap:plugin@0.1.0, the previous version of the contract";

/// `previous` prints its two counts of getppid as a row (streamed, then counted in the
/// kernel) and the kernel's snapshot as `@calls[110]`.
fn previous_counts(out: &str) -> (i64, i64, Option<i64>) {
    assert!(out.lines().any(|l| l.split_whitespace().eq(["STREAMED", "KERNEL"])), "the table's header: {out}");
    let row = |l: &str| -> Option<Vec<i64>> { l.split_whitespace().map(|n| n.parse().ok()).collect() };
    let counts = out.lines().filter_map(row).find(|r| r.len() == 2).expect("a row of two counts");
    (counts[0], counts[1], map_value(out, "calls", "110"))
}

#[test]
fn a_plugin_built_for_the_previous_version_replays_beside_a_current_one_with_the_same_counts() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let o = run(with_fixtures()
        .current_dir(&golden)
        .args(["replay", "syscalls.wtrec", "syscount", "previous"])
        .args(["--param", "syscount.syscall=getppid"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    let getppid = map_value(&out, "syscall", "getppid").expect("syscount's getppid count");
    assert_eq!(getppid, 1000, "{out}");
    // Its filter's x86_64 number 110 became the name getppid; both of its counts agree.
    assert_eq!(previous_counts(&out), (getppid, getppid, Some(getppid)), "{out}");
    assert!(err.contains(PREVIOUS), "{err}");
    assert!(err.contains("wasmtap: previous: info: subscription 0 is tracepoint:raw_syscalls:sys_enter"), "{err}");
    assert!(!err.contains("wasmtap: syscount: built for"), "a current plugin gets no note: {err}");
}

#[test]
fn help_names_the_version_each_plugin_is_built_for() {
    let o = run(with_fixtures().args(["run", "syscount", "previous", "--help"]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.starts_with("Plugin syscount 0.1.0 (built for wasmtap:plugin@0.2.0): "), "{out}");
    assert!(out.contains("\nPlugin previous 0.1.0 (built for wasmtap:plugin@0.1.0): "), "{out}");
}

#[test]
fn a_plugin_built_for_the_previous_version_counts_every_getppid_live() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 200000", workload("getppid_loop").display());
    let o =
        run(with_fixtures().args(["run", "previous", "syscount", "--param", "syscount.syscall=getppid", "-c", &cmd]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(200_000), "{out}");
    assert_eq!(previous_counts(&out), (200_000, 200_000, Some(200_000)), "{out}\n{err}");
    assert!(err.contains(PREVIOUS), "{err}");
}

#[test]
fn reading_an_aggregation_the_plan_never_declared_is_an_error_the_plugin_handles() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let o = run(with_fixtures().current_dir(&golden).args(["replay", "syscalls.wtrec", "syscount", "hostile"]).args([
        "--param",
        "syscount.top=0",
        "--param",
        "hostile.door=badread",
    ]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "no fault, no problem: {err}");
    assert_eq!(err.trim_end(), "wasmtap: hostile: warning: no kernel aggregation 7 (the plan declared none)");
    let expected = std::fs::read_to_string(golden.join("cases/syscount-text.out")).unwrap();
    assert_eq!(out, expected);
}

/// `wasmtap`, finding the test fixtures (`previous`, `hostile`) by name as well as the
/// installed plugins.
fn with_fixtures() -> std::process::Command {
    let mut c = wasmtap();
    let dirs = [target_dir().join("release/plugins"), target_dir().join("wasm32-wasip2/wasm")];
    c.env("WASMTAP_PLUGIN_PATH", std::env::join_paths(dirs).unwrap());
    c
}

//! Bad input: exit code 2 and one clear line naming the problem; never a panic.
//! No root needed: every check happens before anything is loaded into the kernel.

use wasmtap_tests::*;

fn fails_with(args: &[&str], expect: &str) {
    let o = run(wasmtap().args(args));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(expect), "{args:?}: expected {expect:?} in:\n{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line only:\n{err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
}

#[test]
fn missing_plugin_is_named() {
    fails_with(&["run", "nosuchplugin"], "no plugin named `nosuchplugin`");
    fails_with(&["run", "/nonexistent/x.wasm"], "plugin file /nonexistent/x.wasm does not exist");
}

#[test]
fn a_file_that_is_not_a_component_is_refused() {
    let path = std::env::temp_dir().join(format!("wasmtap-not-a-component-{}.wasm", std::process::id()));
    std::fs::write(&path, b"this is not wasm").unwrap();
    fails_with(&["run", path.to_str().unwrap()], "is not a WebAssembly component");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_oversized_plugin_is_refused_before_compiling() {
    let path = std::env::temp_dir().join(format!("wasmtap-oversized-{}.wasm", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    file.set_len((32 << 20) + 1).unwrap(); // sparse: no 32 MiB written
    fails_with(
        &["run", path.to_str().unwrap()],
        &format!("plugin {} is too large: 33554433 bytes (at most 33554432)", path.display()),
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_component_for_another_world_is_refused() {
    let p = wasm("otherworld");
    fails_with(&["run", p.to_str().unwrap()], "is not a wasmtap plugin (world wasmtap:plugin/plugin@0.1.0)");
}

#[test]
fn unknown_probe_names_the_probe_and_a_near_match() {
    let p = wasm("badprobe");
    fails_with(
        &["run", p.to_str().unwrap()],
        "unknown probe `tracepont:raw_syscalls:sys_enter` (did you mean `tracepoint:raw_syscalls:sys_enter`?)",
    );
}

#[test]
fn bad_params_name_the_parameter() {
    fails_with(
        &["run", "syscount", "--param", "top=ten"],
        "bad value `ten` for parameter `top` of syscount: expected an integer",
    );
    fails_with(&["run", "syscount", "--param", "tpo=3"], "unknown parameter `tpo` for syscount");
    fails_with(&["run", "syscount", "--param", "top"], "bad --param `top`");
    fails_with(&["run", "syscount", "--param", "syscall=getppidd"], "getppidd");
}

#[test]
fn bad_flags_exit_2() {
    let o = run(wasmtap().args(["run", "syscount", "-d", "soon"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`soon` is not a duration"), "{}", stderr(&o));
}

#[test]
fn corrupt_recording_names_the_file_and_offset() {
    let path = std::env::temp_dir().join(format!("wasmtap-corrupt-{}.wtrec", std::process::id()));
    std::fs::write(&path, b"WASMTAP-REC\n\x01\x00\x00\x00\xff\xff\xff\x7f").unwrap();
    let o = run(wasmtap().arg("replay").arg(&path).arg(wasm("syscount")));
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains(&format!("corrupt recording {} at byte 20", path.display())), "{err}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn plugin_help_lists_its_parameters() {
    let o = run(wasmtap().args(["run", "syscount", "--help"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("--param top=INTEGER"), "{out}");
    assert!(out.contains("--param interval=DURATION"), "{out}");
    assert!(out.contains("[default: 10]"), "{out}");
}

#[test]
fn a_plugin_importing_the_filesystem_is_refused_at_load() {
    let p = wasm("fsreader");
    fails_with(&["run", p.to_str().unwrap()], "imports `wasi:filesystem/");
}

#[test]
fn bad_limits_name_the_flag_and_the_plugin() {
    fails_with(
        &["run", "syscount", "--cpu-budget", "150"],
        "bad value `150` for --cpu-budget: expected a percentage of one CPU from 1 to 100",
    );
    fails_with(
        &["run", "syscount", "--on-fault", "retry"],
        "bad value `retry` for --on-fault: expected `disable` or `restart`",
    );
    fails_with(
        &["run", "syscount", "--deadline", "nosuch=10ms"],
        "--deadline names plugin `nosuch`, which is not in this run (plugins: syscount)",
    );
}

#[test]
fn bad_run_guards_name_the_flag() {
    fails_with(
        &["run", "syscount", "--max-kernel-cpu", "lots"],
        "bad value `lots` for --max-kernel-cpu: expected a percentage of one CPU from 1 to 10000, or 0 (off)",
    );
    fails_with(
        &["run", "syscount", "--watchdog", "100ms"],
        "bad value `100ms` for --watchdog: expected a duration from 1s to 24h, or 0 (off)",
    );
    fails_with(
        &["replay", "x.wtrec", "syscount", "--watchdog", "forever"],
        "bad value `forever` for --watchdog: expected a duration from 1s to 24h, or 0 (off)",
    );
}

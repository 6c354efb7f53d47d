//! Bad input: exit code 2 and one clear line naming the problem; never a panic.
//! No root needed: every check happens before anything is loaded into the kernel.

use wasmtap_tests::*;

fn fails_with(args: &[&str], expect: &str) {
    fails_with_cmd(wasmtap().args(args), args, expect);
}

fn fails_with_cmd(cmd: &mut std::process::Command, args: &[&str], expect: &str) {
    let o = run(cmd);
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
fn declared_sizes_past_their_limits_are_refused_at_start_naming_field_value_and_limit() {
    let hostile = wasm("hostile");
    let hostile = hostile.to_str().unwrap();
    fails_with(
        &["run", "syscount", hostile, "--param", "hostile.door=width"],
        "hostile: bad plan: `tables[0].columns[0].width` is 3000000000, more than the limit of 256",
    );
    fails_with(
        &["run", "syscount", hostile, "--param", "hostile.door=rate"],
        "100000 Hz is more than the 10000 Hz allowed",
    );
}

/// A fresh directory for a test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmtap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_recording_is_never_written_through_a_symlink() {
    let dir = scratch("rec-link");
    let (target, link) = (dir.join("victim"), dir.join("run.wtrec"));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    fails_with(
        &["record", "syscount", "-o", link.to_str().unwrap()],
        &format!(
            "cannot create recording {}: it is a symbolic link (wasmtap does not write through links)",
            link.display()
        ),
    );
    assert!(!target.exists(), "nothing created through the link");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_existing_recording_is_not_overwritten() {
    let dir = scratch("rec-exists");
    let path = dir.join("run.wtrec");
    std::fs::write(&path, b"keep me").unwrap();
    fails_with(
        &["record", "syscount", "-o", path.to_str().unwrap()],
        &format!(
            "cannot create recording {}: it already exists (wasmtap does not overwrite; remove it or choose another name)",
            path.display()
        ),
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_flame_graph_is_never_written_through_a_symlink() {
    let dir = scratch("svg-link");
    let (target, link) = (dir.join("victim"), dir.join("cpu.svg"));
    std::fs::write(&target, b"keep me").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let recording = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/profile.wtrec");
    fails_with(
        &["replay", recording.to_str().unwrap(), "profile", "--flamegraph", link.to_str().unwrap()],
        &format!(
            "cannot create flame graph {}: it is a symbolic link (wasmtap does not write through links)",
            link.display()
        ),
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_run_that_cannot_start_leaves_no_recording_behind() {
    let dir = scratch("rec-removed");
    let path = dir.join("run.wtrec");
    // A plugin that does not exist stops the run after the file is made: it is removed again.
    let o = run(wasmtap().args(["record", "nosuchplugin", "-o", path.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!path.exists(), "a run that cannot start leaves no recording behind");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_bad_map_size_is_refused_with_its_name() {
    for (value, expect) in [
        ("targets=0", "WASMTAP_MAP_ENTRIES: `0` is not a number of entries from 1 to 1048576"),
        ("ring=64", "WASMTAP_MAP_ENTRIES: unknown map `ring` (known: targets, execs, opens, agg_starts, scoped_tids)"),
        ("targets", "WASMTAP_MAP_ENTRIES: `targets` is not NAME=ENTRIES"),
    ] {
        let args = ["run", "syscount", "-d", "1"];
        fails_with_cmd(wasmtap().env("WASMTAP_MAP_ENTRIES", value).args(args), &args, expect);
    }
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

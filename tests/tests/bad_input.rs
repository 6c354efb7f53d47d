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
    fails_with(&["run", p.to_str().unwrap()], "is not a wasmtap plugin (world wasmtap:plugin/plugin@0.2.0 or @0.1.0)");
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

/// `component` with `count` more core instances appended at its top level, each of a module
/// holding one memory of `pages` 64 KiB pages. Nothing uses them, but instantiating the
/// component creates them: a plugin that loads like any other and holds more memories than
/// its own. Component sections: an id byte, a LEB128 size, the contents; core modules are
/// section 1 (one module each), core instances section 2.
fn with_more_memories(component: &[u8], count: u32, pages: u32) -> Vec<u8> {
    fn leb(mut n: u32, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                return;
            }
        }
    }
    fn section(id: u8, contents: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(contents.len() as u32, out);
        out.extend_from_slice(contents);
    }
    // The core modules already there: the new ones are numbered after them.
    let (mut at, mut modules) = (8, 0);
    while at < component.len() {
        let (id, mut size, mut shift) = (component[at], 0usize, 0);
        at += 1;
        loop {
            let byte = component[at];
            at += 1;
            size |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                break;
            }
        }
        modules += u32::from(id == 1);
        at += size;
    }
    let mut memory = vec![1, 0]; // one memory: no maximum, `pages` at least
    leb(pages, &mut memory);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(5, &memory, &mut module);
    let mut out = component.to_vec();
    let mut instances = Vec::new();
    leb(count, &mut instances);
    for i in 0..count {
        section(1, &module, &mut out);
        instances.push(0); // instantiate module `modules + i` with no arguments
        leb(modules + i, &mut instances);
        instances.push(0);
    }
    section(2, &instances, &mut out);
    out
}

#[test]
fn a_plugin_holding_many_memories_is_refused_at_start_by_one_cap_over_all_of_them() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let syscount = std::fs::read(wasm("syscount")).unwrap();
    let dir = scratch("memories");
    let path = dir.join("memories.wasm");
    let replay = |plugins: &[&str]| {
        let mut c = wasmtap();
        c.current_dir(&golden).args(["replay", "syscalls.wtrec"]).args(plugins).arg(&path);
        c.args(["--param", "top=0"]);
        c
    };
    // syscount holding four more memories of 20 MiB: each alone is under the 64 MiB a
    // plugin may hold, together they are not. Refused beside the real syscount.
    std::fs::write(&path, with_more_memories(&syscount, 4, 320)).unwrap();
    let expect = format!(
        "plugin {} failed while starting: in instantiate: exceeded its memory limit of 64 MiB \
         (all memories and tables together)",
        path.display()
    );
    fails_with_cmd(&mut replay(&["syscount"]), &["replay", "syscount", "memories.wasm"], &expect);
    // One more memory of 1 MiB fits: the component is well formed, the cap is what refused
    // it, and the wrapped syscount reports exactly what syscount does.
    std::fs::write(&path, with_more_memories(&syscount, 1, 16)).unwrap();
    let o = run(&mut replay(&[]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let expected = std::fs::read_to_string(golden.join("cases/syscount-text.out")).unwrap();
    assert_eq!(stdout(&o), expected);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_plugin_creating_more_instances_than_its_limit_is_refused_by_count_before_it_runs() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let syscount = std::fs::read(wasm("syscount")).unwrap();
    let dir = scratch("instances");
    let path = dir.join("instances.wasm");
    let replay = |max: Option<u64>| {
        let mut c = wasmtap();
        c.current_dir(&golden).args(["replay", "syscalls.wtrec"]).arg(&path).args(["--param", "top=0"]);
        if let Some(max) = max {
            c.args(["--max-instances", &max.to_string()]);
        }
        run(&mut c)
    };
    // The count in the refusal: "would create N core instances, more than its limit of L".
    let refused = |max: Option<u64>, limit: u64| -> u64 {
        let o = replay(max);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        let (_, rest) = err.split_once("in instantiate: would create ").unwrap_or_else(|| panic!("{err}"));
        let (count, rest) = rest.split_once(' ').unwrap();
        let tail = format!("core instances, more than its limit of {limit} (--max-instances)");
        assert!(rest.starts_with(&tail), "{err}");
        assert!(err.contains(&format!("plugin {} failed while starting", path.display())), "{err}");
        count.parse().unwrap()
    };
    // syscount with 20, then 30, more core instances of a module holding one page: refused
    // at the default limit of 16 with counts that differ by exactly the 10 added.
    std::fs::write(&path, with_more_memories(&syscount, 20, 1)).unwrap();
    let twenty = refused(None, 16);
    std::fs::write(&path, with_more_memories(&syscount, 30, 1)).unwrap();
    assert_eq!(refused(None, 16), twenty + 10);
    // At a limit of exactly the count it runs, and wasmtime's own counter (the backstop)
    // agrees: the count is not short. One less, and the host refuses it, not wasmtime.
    std::fs::write(&path, with_more_memories(&syscount, 20, 1)).unwrap();
    let o = replay(Some(twenty));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let expected = std::fs::read_to_string(golden.join("cases/syscount-text.out")).unwrap();
    assert_eq!(stdout(&o), expected);
    assert_eq!(refused(Some(twenty - 1), twenty - 1), twenty);
    std::fs::remove_dir_all(dir).unwrap();
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

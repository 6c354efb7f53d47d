//! Tapsets linked at load: the vetted plugins decode through the installed `syscalls`
//! tapset (not tables of their own), and so does a plugin written in WebAssembly text
//! with no Rust; a newer minor of the tapset links where the plugin was built against an
//! older one, and a tapset that is missing or of another major is refused with one line
//! naming the import. No root: everything runs through replay.

use std::path::{Path, PathBuf};
use std::process::Output;

use wasmtap_tests::*;

const IMPORT: &[u8] = b"wasmtap:syscalls/decode@0.1.0";

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// The installed package of a vetted plugin or tapset (`./x build`'s index).
fn installed(rel: &str) -> PathBuf {
    target_dir().join("release/plugins").join(rel)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmtap-tapsets-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tapsets")).unwrap();
    dir
}

/// `bytes` with every `from` replaced by `to` (of the same length).
fn replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut found = 0;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            found += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(found > 0, "{} not found", String::from_utf8_lossy(from));
    out
}

fn contains(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle)
}

/// opensnoop's golden case (errno names and open flags, both the tapset's), with the
/// package index `index` searched first (its `tapsets/` before the installed ones).
fn opensnoop(plugin: &Path, index: Option<&Path>) -> Output {
    let mut c = wasmtap();
    c.current_dir(golden()).env("WASMTAP_CACHE_DIR", "off").args(["replay", "files.wtrec"]).arg(plugin);
    c.args(["-o", "json"]);
    if let Some(dir) = index {
        c.env("WASMTAP_PLUGIN_PATH", dir);
    }
    run(&mut c)
}

/// Its rows: everything but the accounting (the host's memory, which varies).
fn rows(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    stdout(o).lines().filter(|l| !l.contains(r#""type":"accounting""#)).map(|l| format!("{l}\n")).collect()
}

#[test]
fn the_vetted_plugins_decode_through_the_installed_tapset_and_carry_no_tables_of_their_own() {
    let tapset = std::fs::read(installed("tapsets/syscalls.wasm")).unwrap();
    // Errno messages and the argument table are the tapset's; a plugin that decodes
    // through it has neither.
    // (Syscall names are the SDK's own, for filters: not in this list.)
    for text in [&b"Operation not permitted"[..], b"ENOTRECOVERABLE", b"Key has been revoked"] {
        assert!(contains(&tapset, text), "the tapset has {}", String::from_utf8_lossy(text));
        for plugin in ["opensnoop", "syscount", "proclife", "exitsnoop"] {
            let bytes = std::fs::read(installed(&format!("{plugin}.wasm"))).unwrap();
            assert!(contains(&bytes, IMPORT), "{plugin} imports the tapset");
            assert!(!contains(&bytes, text), "{plugin} carries {}", String::from_utf8_lossy(text));
        }
    }
    let rows = rows(&opensnoop(&installed("opensnoop.wasm"), None));
    assert_eq!(rows.matches(r#""ERR":"ENOENT""#).count(), 3, "{rows}");
    assert_eq!(rows.matches(r#""FLAGS":"O_WRONLY|O_CREAT|O_TRUNC""#).count(), 3, "{rows}");
    // Syscall names too: wstat names the five write syscalls it traces through the tapset
    // (a number it could not name would fail its start), entry and exit each.
    let mut c = wasmtap();
    c.current_dir(golden()).args(["replay", "writes.wtrec"]).arg(installed("wstat.wasm")).args(["-o", "json"]);
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with(r#"{"type":"attached_probes","data":{"probes":11}}"#), "{}", stdout(&o));
    let o = run(wasmtap().args(["plugin", "inspect", "wstat"]));
    for name in ["write", "pwrite64", "writev", "pwritev", "pwritev2"] {
        assert!(stdout(&o).contains(&format!("syscall:{name}:entry")), "{}", stdout(&o));
    }
    let o = run(wasmtap().args(["plugin", "inspect", "opensnoop"]));
    let links =
        format!("links:     wasmtap:syscalls/decode@0.1.0 (from {})", installed("tapsets/syscalls.wasm").display());
    assert!(stdout(&o).lines().any(|l| l == links), "{}", stdout(&o));
}

#[test]
fn a_newer_minor_of_the_tapset_links_and_another_major_is_refused_naming_both() {
    let tapset = std::fs::read(installed("tapsets/syscalls.wasm")).unwrap();
    let dir = scratch("versions");
    let path = dir.join("tapsets/syscalls.wasm");

    // The plugin was built against 0.1.0; a tapset offering 0.1.7 satisfies it.
    std::fs::write(&path, replaced(&tapset, IMPORT, b"wasmtap:syscalls/decode@0.1.7")).unwrap();
    let newer = rows(&opensnoop(&installed("opensnoop.wasm"), Some(&dir)));
    assert_eq!(newer, rows(&opensnoop(&installed("opensnoop.wasm"), None)));
    assert_eq!(newer.matches(r#""ERR":"ENOENT""#).count(), 3, "{newer}");

    // 1.1.0 is another major: refused before compilation, one line naming the import
    // and what the tapset offers.
    std::fs::write(&path, replaced(&tapset, IMPORT, b"wasmtap:syscalls/decode@1.1.0")).unwrap();
    let o = opensnoop(&installed("opensnoop.wasm"), Some(&dir));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("imports `wasmtap:syscalls/decode@0.1.0`, which tapset syscalls 0.1.0 does not offer (it offers: wasmtap:syscalls/decode@1.1.0)"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_plugin_importing_a_tapset_nobody_installed_is_refused_naming_the_import_and_where_it_looked() {
    let dir = scratch("missing");
    let plugin = dir.join("opensnoop.wasm");
    let bytes = std::fs::read(installed("opensnoop.wasm")).unwrap();
    std::fs::write(&plugin, replaced(&bytes, b"wasmtap:syscalls/", b"wasmtap:sysbolts/")).unwrap();
    let o = opensnoop(&plugin, Some(&dir));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "plugin {} imports `wasmtap:sysbolts/decode@0.1.0`, but no tapset `sysbolts` is installed (looked for tapsets/sysbolts.wasm in: {}, ",
            plugin.display(),
            dir.display()
        )),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// tests/wat/tapset-user.wat made into a component of the world in tapset-user.wit: the
/// world embedded in the core module and the component made by wit-component, as a C
/// or Zig toolchain does.
fn wat_plugin() -> Vec<u8> {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wit = tests.parent().unwrap().join("wit");
    let mut core = wat::parse_file(tests.join("wat/tapset-user.wat")).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    resolve.push_dir(&wit).unwrap();
    resolve.push_dir(wit.join("tapsets/syscalls")).unwrap();
    let package = resolve.push_file(tests.join("wat/tapset-user.wit")).unwrap();
    let world = resolve.select_world(&[package], Some("tapset-user")).unwrap();
    wit_component::embed_component_metadata(&mut core, &resolve, world, wit_component::StringEncoding::UTF8, false)
        .unwrap();
    wit_component::ComponentEncoder::default().validate(true).module(&core).unwrap().encode().unwrap()
}

#[test]
fn a_plugin_in_webassembly_text_decodes_through_the_same_linked_tapset() {
    let dir = scratch("wat");
    let path = dir.join("tapset-user.wasm");
    let bytes = wat_plugin();
    assert!(contains(&bytes, IMPORT) && !contains(&bytes, b"ENOENT"), "it imports the tapset, and has no names");
    std::fs::write(&path, bytes).unwrap();
    let o =
        run(wasmtap().current_dir(golden()).env("WASMTAP_CACHE_DIR", "off").args(["replay", "files.wtrec"]).arg(&path));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let logged: Vec<&str> = err.lines().filter(|l| l.starts_with("wasmtap: tapset-user: ")).collect();
    assert_eq!(logged.len(), 2, "{err}");
    assert!(logged[0].ends_with(" openat") && logged[1].ends_with(" ENOENT"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_proc_tapset_answers_for_processes_the_plugin_was_shown_and_for_no_other() {
    if !require_root() {
        return;
    }
    let o = run(wasmtap().arg("run").arg(wasm("procask")).args(["-c", "sh -c 'exec sleep 0.3'", "-o", "json"]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "row")
        .map(|v| v["data"].clone())
        .collect();
    // The command's process, asked at its exec of sleep: what /proc says of it.
    let sleep = rows.iter().find(|r| r["COMM"] == "sleep").unwrap_or_else(|| panic!("no answer for sleep:\n{out}"));
    assert!(sleep["EXE"].as_str().unwrap().ends_with("/sleep"), "{sleep}");
    assert_eq!(sleep["ARGV"], "sleep 0.3", "{sleep}");
    assert!(sleep["CGROUP"].as_str().unwrap().starts_with('/'), "{sleep}");
    assert!(sleep["PPID"].as_i64().unwrap() > 1 && sleep["START_NS"].as_i64().unwrap() > 0, "{sleep}");
    // pid 1, whose records it was never shown: no answer, every time it asked.
    let init: Vec<_> = rows.iter().filter(|r| r["PID"] == 1).collect();
    assert!(!init.is_empty(), "{out}");
    assert!(init.iter().all(|r| r["COMM"] == "-" && r["EXE"] == "-"), "{out}");
}

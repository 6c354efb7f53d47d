//! Plugin packages: manifests, signatures and the trust policy, end to end through the
//! `wasmtap plugin` commands and `wasmtap replay` (no root: the trust policy and the
//! manifest are checked before anything is traced).

use std::path::{Path, PathBuf};

use wasmtap_tests::*;

/// A directory of its own, with a copy of `plugin` packed and two keys, `team-a` and `team-b`.
struct Bench {
    dir: PathBuf,
    cache: PathBuf,
}

impl Bench {
    fn new(name: &str) -> Bench {
        let dir = std::env::temp_dir().join(format!("wasmtap-pkg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cache = dir.join("cache");
        let b = Bench { dir, cache };
        for key in ["team-a", "team-b"] {
            b.ok(&["plugin", "keygen", key]);
        }
        b
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `wasmtap ARGS` in the directory. `plugin pack` compiles the plugin to ask it for
    /// its plan: the `plugin` commands keep their compiled code apart, so that `cache`
    /// holds only what runs compiled.
    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let cache = if args.first() == Some(&"plugin") { self.dir.join("pack-cache") } else { self.cache.clone() };
        let mut c = wasmtap();
        c.current_dir(&self.dir).env("WASMTAP_CACHE_DIR", cache).args(args);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = run(&mut self.cmd(args));
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        stdout(&o)
    }

    /// The command fails with exit 2 and one line; that line.
    fn refused(&self, args: &[&str]) -> String {
        let o = run(&mut self.cmd(args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line only:\n{err}");
        err
    }

    /// A copy of a built plugin, packed.
    fn packed(&self, plugin: &str, file: &str) -> PathBuf {
        std::fs::copy(wasm(plugin), self.path(file)).unwrap();
        self.ok(&["plugin", "pack", file]);
        self.path(file)
    }

    /// Compiled-code cache entries written so far.
    fn cache_entries(&self) -> usize {
        std::fs::read_dir(&self.cache).map(|d| d.count()).unwrap_or(0)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn golden(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(name).display().to_string()
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

fn find(path: &Path, needle: &[u8]) -> usize {
    std::fs::read(path).unwrap().windows(needle.len()).position(|w| w == needle).expect("needle in the file")
}

#[test]
fn under_a_signed_only_policy_only_a_plugin_signed_by_its_key_runs_and_nothing_else_is_compiled() {
    let b = Bench::new("trust");
    std::fs::write(b.path("trust.toml"), "vetted = false\n[[key]]\nname = \"team-a\"\npublic-key = \"team-a.pub\"\n")
        .unwrap();
    let recording = golden("syscalls.wtrec");
    let run_ok = |file: &str| b.ok(&["replay", &recording, file, "--trust", "trust.toml"]);
    let run_refused = |file: &str| b.refused(&["replay", &recording, file, "--trust", "trust.toml"]);

    // Every refusal below happens before compilation: no cache entry appears.
    b.packed("syscount", "unsigned.wasm");
    let e = run_refused("./unsigned.wasm");
    assert_eq!(
        e.trim_end(),
        "wasmtap: error: plugin ./unsigned.wasm refused by trust policy trust.toml (it runs plugins signed by \
         team-a): it carries no signature"
    );
    b.packed("syscount", "by-b.wasm");
    b.ok(&["plugin", "sign", "by-b.wasm", "--key", "team-b.key"]);
    let e = run_refused("./by-b.wasm");
    assert!(
        e.contains("refused by trust policy trust.toml")
            && e.contains("signed only by keys this policy does not trust: team-b (ed25519:"),
        "{e}"
    );

    b.packed("syscount", "by-a.wasm");
    b.ok(&["plugin", "sign", "by-a.wasm", "--key", "team-a.key"]);
    // A flipped byte in the code, and one in the manifest: the signature no longer covers them.
    std::fs::copy(b.path("by-a.wasm"), b.path("code.wasm")).unwrap();
    flip(&b.path("code.wasm"), 4096);
    std::fs::copy(b.path("by-a.wasm"), b.path("manifest.wasm")).unwrap();
    flip(&b.path("manifest.wasm"), find(&b.path("manifest.wasm"), b"Which syscalls"));
    for tampered in ["./code.wasm", "./manifest.wasm"] {
        let e = run_refused(tampered);
        assert!(e.contains(&format!("plugin {tampered} refused by trust policy trust.toml")), "{e}");
        assert!(e.contains("its signature by team-a does not hold: it was made for another digest"), "{e}");
    }
    // The code changed and the signature's digest rewritten to match it: ed25519 itself refuses.
    let digest_of = |file: &str| {
        let shown = b.ok(&["plugin", "inspect", file]);
        shown.lines().find_map(|l| l.strip_prefix("digest:    ")).unwrap().to_string()
    };
    let (signed_digest, changed_digest) = (digest_of("./by-a.wasm"), digest_of("./code.wasm"));
    assert_ne!(signed_digest, changed_digest);
    let mut forged = std::fs::read(b.path("code.wasm")).unwrap();
    let at = forged.windows(signed_digest.len()).position(|w| w == signed_digest.as_bytes()).unwrap();
    forged[at..at + changed_digest.len()].copy_from_slice(changed_digest.as_bytes());
    std::fs::write(b.path("forged.wasm"), forged).unwrap();
    let e = run_refused("./forged.wasm");
    assert!(
        e.contains("its signature by team-a does not hold: it does not match the plugin's contents (the code or the manifest changed after signing)"),
        "{e}"
    );
    // A valid signature by team-a, for another plugin's digest, appended to this one.
    b.packed("opensnoop", "other.wasm");
    b.ok(&["plugin", "sign", "other.wasm", "--key", "team-a.key"]);
    let unsigned_len = std::fs::metadata(b.path("unsigned.wasm")).unwrap().len() as usize;
    let other = std::fs::read(b.path("other.wasm")).unwrap();
    let other_unsigned = {
        b.packed("opensnoop", "other-unsigned.wasm");
        std::fs::metadata(b.path("other-unsigned.wasm")).unwrap().len() as usize
    };
    let stolen = [std::fs::read(b.path("unsigned.wasm")).unwrap(), other[other_unsigned..].to_vec()].concat();
    assert!(stolen.len() > unsigned_len);
    std::fs::write(b.path("stolen.wasm"), stolen).unwrap();
    let e = run_refused("./stolen.wasm");
    assert!(e.contains("its signature by team-a does not hold: it was made for another digest"), "{e}");
    // An installed plugin, under `vetted = false`, needs a trusted signature too (this
    // build signed it with a key of its own, which this policy does not list).
    let e = b.refused(&["replay", &recording, "syscount", "--trust", "trust.toml"]);
    assert!(e.contains("it is signed only by keys this policy does not trust: wasmtap (vetted) (ed25519:"), "{e}");
    assert_eq!(b.cache_entries(), 0, "a refused plugin was compiled");

    // Signed by team-a: it runs, its counts are the recording's.
    let out = run_ok("./by-a.wasm");
    assert!(map_value(&out, "syscall", "openat").is_some_and(|n| n > 0), "{out}");
    assert_eq!(b.cache_entries(), 1);
    let shown = b.ok(&["plugin", "verify", "by-a.wasm", "--trust", "trust.toml"]);
    assert!(shown.starts_with("by-a.wasm: signed by team-a (sha256:"), "{shown}");
    let e = b.refused(&["plugin", "verify", "by-b.wasm", "--key", "team-a.pub"]);
    assert!(e.contains("signed only by keys this policy does not trust: team-b"), "{e}");
}

#[test]
fn a_plan_asking_for_a_probe_its_manifest_does_not_declare_is_refused_at_load() {
    let b = Bench::new("manifest");
    std::fs::copy(wasm("runqlat"), b.path("runqlat.wasm")).unwrap();
    // Derived, the manifest declares what runqlat asks for, and it runs.
    b.ok(&["plugin", "pack", "runqlat.wasm"]);
    let shown = b.ok(&["plugin", "inspect", "./runqlat.wasm"]);
    assert!(shown.contains("probes:    tracepoint:sched:sched_switch, tracepoint:sched:sched_wakeup"), "{shown}");
    let recording = golden("runqlat.wtrec");
    b.ok(&["replay", &recording, "./runqlat.wasm"]);
    // A manifest that declares syscalls only.
    let json = b.ok(&["plugin", "inspect", "--json", "./runqlat.wasm"]);
    let mut m: serde_json::Value = serde_json::from_str(&json).unwrap();
    m["probes"] = serde_json::json!(["syscall:*"]);
    std::fs::write(b.path("narrow.json"), m.to_string()).unwrap();
    b.ok(&["plugin", "pack", "runqlat.wasm", "--manifest", "narrow.json"]);
    let e = b.refused(&["replay", &recording, "./runqlat.wasm"]);
    assert!(
        e.contains(
            "runqlat (./runqlat.wasm): its plan asks for probe `tracepoint:sched:sched_switch`, which the manifest \
             of runqlat"
        ) && e.contains("does not declare (it declares: syscall:*)"),
        "{e}"
    );
    // A manifest naming another plugin.
    m["probes"] = serde_json::json!(["tracepoint:sched:*"]);
    m["name"] = serde_json::json!("syscount");
    std::fs::write(b.path("other.json"), m.to_string()).unwrap();
    b.ok(&["plugin", "pack", "runqlat.wasm", "--manifest", "other.json"]);
    let e = b.refused(&["replay", &recording, "./runqlat.wasm"]);
    assert!(e.contains("its manifest is for syscount"), "{e}");
}

#[test]
fn inspect_shows_manifest_digest_and_signers() {
    let b = Bench::new("inspect");
    b.packed("syscount", "s.wasm");
    b.ok(&["plugin", "sign", "s.wasm", "--key", "team-a.key", "--signer", "Team A"]);
    std::fs::write(b.path("trust.toml"), "[[key]]\nname = \"team-a\"\npublic-key = \"team-a.pub\"\n").unwrap();
    let shown = b.ok(&["plugin", "inspect", "./s.wasm", "--trust", "trust.toml"]);
    for want in [
        "name:      syscount ",
        "probes:    tracepoint:raw_syscalls:sys_enter, tracepoint:raw_syscalls:sys_exit",
        "needs:     kernel-aggregations",
        "param:     top (integer, default 10)",
        "signed by: Team A: valid, key ed25519:",
        "(trusted as team-a)",
        "runs:      yes: signed by team-a (trust policy trust.toml)",
    ] {
        assert!(shown.contains(want), "{want:?} in:\n{shown}");
    }
    let digest = shown.lines().find_map(|l| l.strip_prefix("digest:    ")).unwrap();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    // Keys are never overwritten.
    let e = b.refused(&["plugin", "keygen", "team-a"]);
    assert!(e.contains("an existing key is never overwritten"), "{e}");
    // A bare component cannot be signed: what it may ask for would not be covered.
    std::fs::copy(wasm("syscount"), b.path("bare.wasm")).unwrap();
    let e = b.refused(&["plugin", "sign", "bare.wasm", "--key", "team-a.key"]);
    assert!(e.contains("has no manifest: pack it first"), "{e}");
}

#[test]
fn a_trust_policy_that_does_not_hold_names_its_line_and_key() {
    let b = Bench::new("badtrust");
    std::fs::write(b.path("trust.toml"), "vetted = false\n\n[[key]]\nname = \"x\"\npublic-key = \"nosuch.pub\"\n")
        .unwrap();
    let e = b.refused(&["replay", &golden("syscalls.wtrec"), "syscount", "--trust", "trust.toml"]);
    assert!(e.contains("trust.toml:5: `key[0].public-key`: cannot read key"), "{e}");
}

#[test]
fn a_new_plugin_builds_runs_and_passes_its_golden_test_outside_the_repository() {
    let b = Bench::new("new");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    assert_eq!(b.ok(&["plugin", "new", "hello"]).trim(), "hello");
    let crate_dir = b.path("hello");
    let o = run(wasmtap().current_dir(&crate_dir).args(["plugin", "build"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "./target/wasmtap/hello.wasm");
    // Packed: its manifest says what it asks for.
    let shown = b.ok(&["plugin", "inspect", "./hello/target/wasmtap/hello.wasm"]);
    assert!(shown.contains("name:      hello 0.1.0") && shown.contains("probes:    file:open"), "{shown}");
    // Over the golden recording of `opener`: its 18 opens, libraries included.
    let recording = golden("files.wtrec");
    let out = b.ok(&["replay", &recording, "./hello/target/wasmtap/hello.wasm", "--param", "top=0"]);
    assert_eq!(out, "@opens[opener]: 18\n\n");
    // Its own golden test passes, and fails when the expected output is wrong.
    let test = || run(std::process::Command::new(&cargo).current_dir(&crate_dir).args(["test", "--quiet"]));
    let o = test();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    std::fs::write(crate_dir.join("tests/expected.txt"), "@opens[opener]: 17\n\n").unwrap();
    let o = test();
    assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("the output differs from tests/expected.txt"), "{}", stdout(&o));
    // Live, as root: it counts what a command opens.
    if require_root() {
        let o = run(wasmtap().current_dir(&crate_dir).args([
            "run",
            "./target/wasmtap/hello.wasm",
            "-c",
            "cat /etc/hostname",
        ]));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(map_value(&stdout(&o), "opens", "cat").is_some_and(|n| n >= 1), "{}", stdout(&o));
    }
}

/// `plugin new --lang` for the other languages: the same plugin, built by `plugin build`
/// with that language's toolchain, packed, and checked by its own golden script.
#[test]
fn a_new_plugin_in_c_python_or_javascript_builds_runs_and_passes_its_golden_test() {
    let b = Bench::new("new-langs");
    let recording = golden("files.wtrec");
    for lang in ["c", "python", "js"] {
        let name = format!("hello-{lang}");
        assert_eq!(b.ok(&["plugin", "new", "--lang", lang, &name]).trim(), name);
        let dir = b.path(&name);
        let o = run(wasmtap().current_dir(&dir).args(["plugin", "build"]));
        assert_eq!(o.status.code(), Some(0), "{lang}: {}", stderr(&o));
        let packed = format!("./{name}/target/wasmtap/{name}.wasm");
        assert_eq!(stdout(&o).trim(), format!("./target/wasmtap/{name}.wasm"));
        let shown = b.ok(&["plugin", "inspect", &packed]);
        assert!(
            shown.contains(&format!("name:      {name} 0.1.0")) && shown.contains("probes:    file:open"),
            "{shown}"
        );
        // Python's interpreter makes 38 core instances: its manifest says so, and it runs
        // under the default limits because of it.
        assert_eq!(shown.contains("limits:    38 core instances"), lang == "python", "{shown}");
        let out = b.ok(&["replay", &recording, &packed, "--param", "top=0"]);
        assert_eq!(out, "@opens[opener]: 18\n\n", "{lang}");
        // Its golden script passes, and fails when the expected output is wrong.
        let golden = || run(std::process::Command::new("sh").current_dir(&dir).arg("tests/golden.sh"));
        let o = golden();
        assert_eq!(o.status.code(), Some(0), "{lang}: {}{}", stdout(&o), stderr(&o));
        std::fs::write(dir.join("tests/expected.txt"), "@opens[opener]: 17\n\n").unwrap();
        let o = golden();
        assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
        assert!(stderr(&o).contains("the output differs from tests/expected.txt"), "{}", stderr(&o));
        if require_root() {
            let o = run(wasmtap().current_dir(&dir).args([
                "run",
                &format!("./target/wasmtap/{name}.wasm"),
                "-c",
                "cat /etc/hostname",
            ]));
            assert_eq!(o.status.code(), Some(0), "{lang}: {}", stderr(&o));
            assert!(map_value(&stdout(&o), "opens", "cat").is_some_and(|n| n >= 1), "{lang}: {}", stdout(&o));
        }
    }
    // A directory with no plugin in any language is refused, naming what it looked for.
    std::fs::create_dir_all(b.path("empty")).unwrap();
    let e = b.refused(&["plugin", "build", "empty"]);
    assert!(
        e.contains(
            "empty has no Cargo.toml (a Rust plugin), plugin.c (C), plugin.py (Python) or plugin.js (JavaScript)"
        ),
        "{e}"
    );
}

#[test]
fn under_tapsets_policy_an_installed_tapset_is_held_to_the_plugin_rules_before_compilation() {
    let b = Bench::new("tapset-policy");
    b.packed("syscount", "by-a.wasm");
    b.ok(&["plugin", "sign", "by-a.wasm", "--key", "team-a.key"]);
    let rules = "vetted = false\n[[key]]\nname = \"team-a\"\npublic-key = \"team-a.pub\"\n";
    std::fs::write(b.path("trust.toml"), rules).unwrap();
    std::fs::write(b.path("strict.toml"), format!("tapsets = \"policy\"\n{rules}")).unwrap();
    let recording = golden("syscalls.wtrec");
    let replay = |policy: &'static str| -> [&str; 5] { ["replay", &recording, "./by-a.wasm", "--trust", policy] };

    // By default a tapset of the package index links into any plugin the policy admits.
    b.ok(&replay("trust.toml"));
    let entries = b.cache_entries();
    // With `tapsets = "policy"`, the installed tapset, signed by the project's key and not
    // team-a's, is refused: one line naming the tapset, the plugin and the rule, and
    // nothing new compiled.
    let tapset = target_dir().join("release/plugins/tapsets/syscalls.wasm");
    let e = b.refused(&replay("strict.toml"));
    let head = format!(
        "wasmtap: error: tapset {} (imported by ./by-a.wasm) refused by trust policy strict.toml (it runs plugins \
         signed by team-a): it is signed only by keys this policy does not trust: wasmtap (vetted) (ed25519:",
        tapset.display()
    );
    assert!(e.starts_with(&head), "{e}");
    assert_eq!(b.cache_entries(), entries);

    // A value the policy does not know is named with its line.
    std::fs::write(b.path("bad.toml"), format!("tapsets = \"sometimes\"\n{rules}")).unwrap();
    let e = b.refused(&replay("bad.toml"));
    assert!(e.contains("bad.toml:1:"), "{e}");
    assert!(e.contains("`tapsets`: `sometimes`: \"installed\" or \"policy\""), "{e}");
}

#[test]
fn plugin_list_shows_the_vetted_plugins_of_the_index_with_versions_and_the_project_signer() {
    let o = run(wasmtap().args(["plugin", "list"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    assert!(lines.next().is_some_and(|h| h.starts_with("NAME") && h.contains("VERSION") && h.contains("SIGNED BY")));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    for d in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins")).unwrap() {
        let name = d.unwrap().file_name().into_string().unwrap();
        let row = rows.iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("{name} not listed:\n{out}"));
        assert_eq!(&row[1..4], ["0.1.0", "wasmtap", "(vetted)"], "{out}");
        assert!(row[4].starts_with("(ed25519:"), "{out}");
    }
}

//! Helpers shared by the end-to-end tests: the `wasmtap` binary, the built plugins and
//! fixtures, workloads compiled from `tests/workloads/*.c`, and a root check that fails
//! in CI instead of skipping.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The cargo target directory (tests run from target/release/deps).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors().nth(3).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// bpftrace's own tool `name` (its `tools/NAME.bt`), run unchanged, as bpftrace `version`
/// ships it: Debian 12's 0.17 (`./x setup` unpacks it into `target/bpftrace-tools`) or
/// Debian 13's 0.23 (`target/bpftrace-tools-0.23`).
pub fn bpftrace_tool_of(version: &str, name: &str) -> PathBuf {
    let dir = if version == "0.17" { "bpftrace-tools".to_string() } else { format!("bpftrace-tools-{version}") };
    let path = target_dir().join(dir).join("usr/sbin").join(format!("{name}.bt"));
    assert!(path.is_file(), "{} is missing: `./x setup` unpacks Debian's bpftrace packages there", path.display());
    path
}

/// The `wasmtap` binary of this build.
pub fn wasmtap_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let bin = exe.parent().and_then(Path::parent).expect("target/<profile>").join("wasmtap");
    assert!(bin.is_file(), "{} is missing: build it first (`./x test` does)", bin.display());
    bin
}

/// A `wasmtap` command.
pub fn wasmtap() -> Command {
    Command::new(wasmtap_bin())
}

/// A built plugin or fixture component.
pub fn wasm(name: &str) -> PathBuf {
    let p = target_dir().join("wasm32-wasip2/wasm").join(format!("{name}.wasm"));
    assert!(p.is_file(), "{} is missing: build the plugins first (`./x test` does)", p.display());
    p
}

/// A test workload compiled from `tests/workloads/NAME.c` (once per test binary).
pub fn workload(name: &str) -> PathBuf {
    static BUILT: Mutex<()> = Mutex::new(());
    let _g = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads").join(format!("{name}.c"));
    let dir = target_dir().join("workloads");
    std::fs::create_dir_all(&dir).expect("create workloads dir");
    let out = dir.join(name);
    let fresh = out.metadata().and_then(|m| m.modified()).ok() >= src.metadata().and_then(|m| m.modified()).ok();
    if !fresh {
        let st = Command::new("cc")
            .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(st.success(), "cc failed on {}", src.display());
    }
    out
}

/// True when the test may load BPF. Without root it fails under CI (privileged tests
/// must run there) and skips with a message elsewhere.
pub fn require_root() -> bool {
    // /proc/self/status carries the effective uid (second field of `Uid:`).
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid =
        status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1)).unwrap_or("1");
    if euid == "0" {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "privileged test cannot run: not root (CI must run as root)");
    eprintln!("skipping privileged test: not root");
    false
}

/// Live tests share two cores; running them one at a time keeps their timing sane.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run a command, capturing everything.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("spawn wasmtap")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The value of `@map[key]: N` in text output.
pub fn map_value(text: &str, map: &str, key: &str) -> Option<i64> {
    let prefix = format!("@{map}[{key}]: ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

/// A JSON count, or a failure naming what was there instead.
pub fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Parse NDJSON output into values, failing on any line that is not JSON.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}"))).collect()
}

/// The run's accounting record of `-o json` output.
pub fn accounting(lines: &[serde_json::Value]) -> &serde_json::Value {
    &lines.iter().find(|v| v["type"] == "accounting").expect("an accounting record")["data"]
}

/// Plugin `name`'s entry in an accounting record.
pub fn plugin<'a>(acct: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    acct["plugins"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no {name}"))
}

/// A `wasmtap` (or a daemon's client) started in the background, its output in files in
/// `dir`, ready once attached.
pub struct Session {
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Session {
    pub fn start(mut cmd: Command, dir: &Path, name: &str) -> Session {
        let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
        let child = cmd
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("start a client");
        let s = Session { child, out, err };
        let started = Instant::now();
        // "Attached …" on stderr; with `-o json`, an `attached_probes` line on stdout.
        let attached = |s: &Session| {
            s.stderr().contains("Attached")
                || std::fs::read_to_string(&s.out).unwrap_or_default().contains("\"attached_probes\"")
        };
        while !attached(&s) {
            assert!(started.elapsed() < Duration::from_secs(30), "{name} did not attach: {}", s.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    pub fn finish(mut self) -> (i32, String, String) {
        let status = self.child.wait().unwrap();
        (status.code().unwrap_or(-1), std::fs::read_to_string(&self.out).unwrap(), self.stderr())
    }
}

impl Drop for Session {
    /// A test that fails midway leaves no tracer running behind it (it would slow, and
    /// be seen by, every later test).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

//! Privileges, live: wasmtap runs under the documented capabilities as a non-root user,
//! gives up what it no longer needs once attached, and runs a `-c` command as the user
//! who invoked sudo. Needs root to set the scene (in CI these run and must pass).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtap_tests::*;

/// The capabilities docs/sandbox.md documents for loading and attaching, as setpriv names them.
const ATTACH_CAPS: &str = "+bpf,+perfmon,+dac_read_search";

/// tracefs must be mounted for a run without CAP_SYS_ADMIN (systemd mounts it at boot).
fn mount_tracefs() {
    if !std::path::Path::new("/sys/kernel/tracing/events").is_dir() {
        let st = Command::new("/bin/mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]).status();
        assert!(st.is_ok_and(|s| s.success()), "cannot mount tracefs");
    }
}

/// wasmtap as uid/gid 65534 with only `caps` (setpriv's syntax), inherited and ambient.
fn wasmtap_as_nobody(caps: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg("--")
        .arg(wasmtap_bin())
        // A writable home for the compile cache of a user without one.
        .env("HOME", std::env::temp_dir())
        .env("XDG_CACHE_HOME", std::env::temp_dir().join("wasmtap-nobody-cache"));
    cmd
}

#[test]
fn syscount_runs_under_the_documented_capabilities_as_nobody() {
    if !require_root() {
        return;
    }
    let _g = serial();
    mount_tracefs();
    let w = workload("getppid_loop");
    let cmd = format!("{} 100000", w.display());
    let o = run(wasmtap_as_nobody(ATTACH_CAPS).args(["run", "syscount", "-c", &cmd]));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(100_000), "{out}");
}

#[test]
fn a_missing_capability_is_named() {
    if !require_root() {
        return;
    }
    let _g = serial();
    mount_tracefs();
    let o = run(wasmtap_as_nobody("+bpf").args(["run", "syscount", "-d", "1"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        "wasmtap: error: loading collectors needs CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH \
         (missing: CAP_PERFMON, CAP_DAC_READ_SEARCH); `wasmtap replay` runs a recording without privileges"
    );
}

/// `(CapEff, CapPrm, CapBnd, NoNewPrivs)` of every thread of `pid`.
fn thread_privileges(pid: u32) -> Vec<Privileges> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect()).unwrap_or(Vec::new());
    tasks
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .map(|s| {
            let f = |name: &str| {
                s.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).unwrap_or_default()
            };
            (f("CapEff:"), f("CapPrm:"), f("CapBnd:"), f("NoNewPrivs:"))
        })
        .collect()
}

type Privileges = (String, String, String, String);

/// Start `wasmtap run ARGS` as root, wait until every one of its threads has
/// `no_new_privs` (the main thread sets it first, then has each other thread set its
/// own), and return every thread's privileges then, with what the run printed.
fn privileges_while_running(args: &[&str]) -> (Vec<Privileges>, String) {
    let child = wasmtap()
        .arg("run")
        .args(args)
        .env_remove("SUDO_UID")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let seen = loop {
        let threads = thread_privileges(child.id());
        let dropped = !threads.is_empty() && threads.iter().all(|t| t.3 == "1");
        if dropped || started.elapsed() > Duration::from_secs(20) {
            break threads;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (seen, stdout(&o))
}

#[test]
fn after_attach_the_host_keeps_no_capability_and_sets_no_new_privs() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let (threads, _) = privileges_while_running(&["syscount", "-d", "2"]);
    assert!(threads.len() >= 3, "the pipeline, ring and ticker threads at least: {threads:?}");
    let none = "0000000000000000".to_string();
    for t in &threads {
        assert_eq!(t, &(none.clone(), none.clone(), none.clone(), "1".to_string()), "{threads:?}");
    }
}

#[test]
fn a_run_with_stacks_keeps_only_what_the_symbolizer_and_the_command_need() {
    if !require_root() {
        return;
    }
    let _g = serial();
    // Only the workload is sampled, as the sudo user; profile's finish symbolizes every
    // stack (reading kallsyms takes 300 ms on a loaded machine), hence the deadline.
    let cmd = format!("{} 2000", workload("spin_func").display());
    let (threads, out) = privileges_while_running(&["profile", "-c", &cmd, "--run-as", "65534", "--deadline", "5s"]);
    // CAP_DAC_READ_SEARCH (2), CAP_SYS_PTRACE (19), CAP_SYSLOG (34), CAP_CHECKPOINT_RESTORE (40).
    let symbolizer = format!("{:016x}", (1u64 << 2) | (1 << 19) | (1 << 34) | (1 << 40));
    assert_eq!(symbolizer, "0000010400080004");
    // And CAP_KILL (5), to stop the command running under another uid.
    let kept = format!("{:016x}", u64::from_str_radix(&symbolizer, 16).unwrap() | (1 << 5));
    for t in &threads {
        assert_eq!(t, &(kept.clone(), kept.clone(), kept.clone(), "1".to_string()), "{threads:?}");
    }
    // With that, the user's stacks are still named, down to the hot function.
    assert!(out.contains("wasmtap_hot_loop+"), "{out}");
}

/// One thread of a run: `(tid, Name, Seccomp, Seccomp_filters, NoNewPrivs)` from its status.
type Thread = (u32, String, String, String, String);

fn threads_of(pid: u32) -> Vec<Thread> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect()).unwrap_or(Vec::new());
    tasks
        .iter()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let s = std::fs::read_to_string(t.path().join("status")).ok()?;
            let f = |name: &str| {
                s.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).unwrap_or_default()
            };
            Some((tid, f("Name:"), f("Seccomp:"), f("Seccomp_filters:"), f("NoNewPrivs:")))
        })
        .collect()
}

/// Start `wasmtap run ARGS` as root (with `env` set), wait until its main thread, the one
/// that dispatches records to the plugins, has given up its privileges and, unless
/// `WASMTAP_SECCOMP=off`, shows its seccomp filter; return its pid, every thread then,
/// and the run's output.
fn threads_while_running(args: &[&str], env: &[(&str, &str)]) -> (u32, Vec<Thread>, std::process::Output) {
    let mut cmd = wasmtap();
    cmd.arg("run").args(args).env_remove("SUDO_UID").env_remove("WASMTAP_SECCOMP");
    let child = cmd.envs(env.iter().copied()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let filtered = !env.contains(&("WASMTAP_SECCOMP", "off"));
    let started = Instant::now();
    let seen = loop {
        let threads = threads_of(pid);
        let main = threads.iter().find(|t| t.0 == pid);
        let ready = main.is_some_and(|m| m.4 == "1" && (!filtered || m.2 == "2"));
        if ready || started.elapsed() > Duration::from_secs(20) {
            if ready && !filtered {
                // The filter would have been installed by now.
                std::thread::sleep(Duration::from_millis(300));
                break threads_of(pid);
            }
            break threads;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (pid, seen, child.wait_with_output().unwrap())
}

#[test]
fn after_attach_the_dispatch_thread_runs_under_its_seccomp_filter() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let cmd = format!("{} 20 10000 50", workload("getppid_paced").display());
    let (pid, threads, o) = threads_while_running(&["syscount", "-c", &cmd], &[]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    // The run still counts exactly, the command is stopped and waited for.
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(200_000), "{out}");
    // The dispatch thread: filter mode, two filters (EPERM deny list; clone3 and x32).
    let main = threads.iter().find(|t| t.0 == pid).unwrap();
    assert_eq!((main.2.as_str(), main.3.as_str(), main.4.as_str()), ("2", "2", "1"), "{threads:?}");
    // Every other thread (symbolizer, ring, epoch ticker, overload guard, watchdog, the
    // WASI runtime's) was started before it and has none.
    assert!(threads.len() >= 5, "{threads:?}");
    assert!(threads.iter().any(|t| t.1 == "wasmtap-symbols"), "{threads:?}");
    for t in threads.iter().filter(|t| t.0 != pid) {
        assert_eq!((t.2.as_str(), t.3.as_str()), ("0", "0"), "{threads:?}");
    }
    // WASMTAP_SECCOMP=off leaves it out (to tell whether the filter is behind a problem).
    let (_, threads, o) = threads_while_running(&["syscount", "-d", "1"], &[("WASMTAP_SECCOMP", "off")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(threads.iter().any(|t| t.4 == "1"), "privileges were dropped: {threads:?}");
    assert!(threads.iter().all(|t| t.2 == "0"), "{threads:?}");
}

/// The UID column of execsnoop's rows for `/bin/true burst-*` and the workload's own exec.
fn exec_uids(o: &std::process::Output) -> Vec<i64> {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    let lines = json_lines(&stdout(o));
    let rows: Vec<_> = lines
        .iter()
        .filter(|v| v["type"] == "row")
        .filter(|v| v["data"]["ARGS"].as_str().is_some_and(|a| a.contains("burst")))
        .collect();
    rows.iter().map(|r| r["data"]["UID"].as_i64().unwrap()).collect()
}

#[test]
fn a_command_started_through_sudo_runs_as_the_invoking_user() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let w = workload("exec_burst");
    let cmd = format!("{} 20", w.display());
    let as_sudo = |extra: &[&str]| {
        run(wasmtap()
            .args(["run", "execsnoop", "-c", &cmd, "-o", "json"])
            .args(extra)
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65534"))
    };
    // The workload's exec and its 20 execs of /bin/true, every one as the sudo user.
    let uids = exec_uids(&as_sudo(&[]));
    assert_eq!(uids, vec![65534; 21]);
    // Asked for explicitly, root stays root.
    let uids = exec_uids(&as_sudo(&["--run-as", "root"]));
    assert_eq!(uids, vec![0; 21]);
    // Without sudo, the command runs as wasmtap's own user.
    let uids = exec_uids(&run(wasmtap().args(["run", "execsnoop", "-c", &cmd, "-o", "json"]).env_remove("SUDO_UID")));
    assert_eq!(uids, vec![0; 21]);
}

#[test]
fn run_as_an_unknown_user_is_refused() {
    let o = run(wasmtap().args(["run", "syscount", "-c", "true", "--run-as", "no-such-user-wasmtap"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end(), "wasmtap: error: --run-as no-such-user-wasmtap: no such user");
}

#[test]
fn uprobes_need_cap_sys_admin_as_well() {
    if !require_root() {
        return;
    }
    let _g = serial();
    mount_tracefs();
    let probe = wasm("probe");
    let cmd = format!("{} 300", workload("malloc_calls").display());
    let args = ["--param", "probe=uprobe:libc:malloc", "--param", "mode=count", "-c", &cmd];
    let o = run(wasmtap_as_nobody(ATTACH_CAPS).arg("run").arg(&probe).args(args));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("needs CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN (missing: CAP_SYS_ADMIN)"),
        "{err}"
    );
    let o = run(wasmtap_as_nobody(&format!("{ATTACH_CAPS},+sys_admin")).arg("run").arg(&probe).args(args));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(map_value(&out, "events", "uprobe:libc:malloc").is_some_and(|n| n >= 300), "{out}");
}

//! The shared host, live: `wasmtap daemon` with a policy naming two fresh local users, each
//! tracing through it as itself, with the client a user runs. The tests create their
//! users and remove them. They need root and BPF: in CI they run and must pass.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmtap_tests::*;

/// Local users made for a test, removed when it ends.
struct Users(Vec<(String, u32, u32)>);

impl Users {
    fn make(tag: &str, n: usize) -> Users {
        let mut users = Users(Vec::new());
        for i in 0..n {
            let name = format!("wt{}{tag}{i}", std::process::id() % 100_000);
            let _ = Command::new("userdel").arg(&name).output();
            let o = Command::new("useradd")
                .args(["--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", &name])
                .output()
                .expect("run useradd");
            assert!(o.status.success(), "useradd {name}: {}", stderr(&o));
            let id = |flag: &str| -> u32 {
                let o = Command::new("id").args([flag, &name]).output().unwrap();
                stdout(&o).trim().parse().unwrap()
            };
            let (uid, gid) = (id("-u"), id("-g"));
            users.0.push((name, uid, gid));
        }
        users
    }

    fn name(&self, i: usize) -> &str {
        &self.0[i].0
    }

    /// A command run as user `i`, with no supplementary groups.
    fn command(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.uid(self.0[i].1).gid(self.0[i].2);
        c
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        for (name, _, _) in &self.0 {
            let _ = Command::new("userdel").arg(name).output();
        }
    }
}

/// A daemon on a socket of its own, with a directory every user can read holding the
/// client and the workloads (the build tree may sit under a directory only root enters).
struct Daemon {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

/// `from`, files and directories, copied to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

impl Daemon {
    fn start(name: &str, policy: &str) -> Daemon {
        Daemon::start_trusting(name, policy, None)
    }

    /// A daemon whose trust policy is `trust`, written beside its policy as trust.toml,
    /// with two keys made there first: team-a and team-b (.key, .pub).
    fn start_trusting(name: &str, policy: &str, trust: Option<&str>) -> Daemon {
        let dir = std::env::temp_dir().join(format!("wasmtap-svc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // The client users run, installed as wasmtap is: its package index beside it (the
        // vetted plugins, and the tapsets a plugin run without the daemon links).
        std::fs::copy(wasmtap_bin(), dir.join("wasmtap")).unwrap();
        copy_dir(&target_dir().join("release/plugins"), &dir.join("plugins"));
        for w in ["getppid_loop", "getppid_paced", "markers", "slices"] {
            std::fs::copy(workload(w), dir.join(w)).unwrap();
        }
        std::fs::write(dir.join("policy.toml"), policy).unwrap();
        let socket = dir.join("wasmtap.sock");
        let mut daemon = wasmtap();
        daemon.args(["daemon", "--policy"]).arg(dir.join("policy.toml")).arg("--socket").arg(&socket);
        daemon.arg("--tenant-cache").arg(dir.join("tenant-cache"));
        if let Some(text) = trust {
            for key in ["team-a", "team-b"] {
                let o = run(wasmtap().current_dir(&dir).args(["plugin", "keygen", key]));
                assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            }
            std::fs::write(dir.join("trust.toml"), text).unwrap();
            daemon.arg("--trust").arg(dir.join("trust.toml"));
        }
        let child = daemon.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start the daemon");
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "the daemon did not listen on {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, dir, socket }
    }

    fn client(&self) -> PathBuf {
        self.dir.join("wasmtap")
    }

    /// A directory of user `i`'s own, holding a copy of each fixture in `plugins`
    /// (`NAME.wasm`), all owned by the user.
    fn home(&self, users: &Users, i: usize, plugins: &[&str]) -> PathBuf {
        let mine = self.dir.join("mine");
        std::fs::create_dir(&mine).unwrap();
        let mut owned = vec![mine.clone()];
        for p in plugins {
            std::fs::copy(wasm(p), mine.join(format!("{p}.wasm"))).unwrap();
            owned.push(mine.join(format!("{p}.wasm")));
        }
        for p in owned {
            std::os::unix::fs::chown(&p, Some(users.0[i].1), Some(users.0[i].2)).unwrap();
        }
        mine
    }

    fn getppid_loop(&self) -> PathBuf {
        self.dir.join("getppid_loop")
    }

    /// `wasmtap run ARGS` through the daemon, as user `i` of `users`, from the directory.
    fn run(&self, users: &Users, i: usize, args: &[&str]) -> Command {
        self.run_verb("run", users, i, args)
    }

    /// `wasmtap VERB ARGS` through the daemon (`run`, `record`), as user `i`.
    fn run_verb(&self, verb: &str, users: &Users, i: usize, args: &[&str]) -> Command {
        let mut c = users.command(i, &self.client());
        c.current_dir(&self.dir).arg(verb).args(args).arg("--daemon").arg(&self.socket);
        c
    }

    /// Wait until no run the daemon started is left (10 s at most): `what` ended them.
    fn wait_until_no_runs(&self, what: &str) {
        let started = Instant::now();
        while !self.runs().is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what}: a run outlived its client: {:?}",
                self.runs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The runs the daemon has started that are still running.
    fn runs(&self) -> Vec<u32> {
        let me = self.child.id();
        let mut runs = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
            if parent == Some(me) {
                runs.push(pid);
            }
        }
        runs
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY-free: SIGTERM through kill(1), then wait.
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `dir`'s file system ignores setuid bits.
fn nosuid(dir: &Path) -> bool {
    let out = Command::new("findmnt").args(["-n", "-o", "OPTIONS", "-T"]).arg(dir).output().unwrap();
    stdout(&out).split(',').any(|o| o.trim() == "nosuid")
}

/// A policy of one tenant, user `i`, scope "own", with these probe classes and plugin
/// rule, and `extra` lines (quotas, rights) after them.
fn one_tenant(users: &Users, i: usize, probes: &[&str], plugins: &str, extra: &str) -> String {
    let probes: Vec<String> = probes.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[[tenant]]\nusers = [\"{}\"]\nscope = \"own\"\nprobes = [{}]\nplugins = \"{plugins}\"\n{extra}",
        users.name(i),
        probes.join(", ")
    )
}

fn policy(users: &Users, names: &[usize]) -> String {
    let list: Vec<String> = names.iter().map(|&i| format!("\"{}\"", users.name(i))).collect();
    format!(
        "[[tenant]]\nusers = [{}]          # these local users\nscope = \"own\"\nprobes = [\"syscall\", \"proc\", \"file\"]\nplugins = \"vetted\"\n",
        list.join(", ")
    )
}

#[test]
fn two_tenants_each_see_exactly_their_own_processes_and_root_sees_both() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("iso", 2);
    let d = Daemon::start("iso", &policy(&users, &[0, 1]));
    // System-wide runs (no -p, no -c): the tenant's scope alone narrows them, in the
    // kernel; syscount counts in the kernel, so this is the kernel aggregations' scope.
    let args = ["syscount", "--param", "top=0", "-d", "5s"];
    let a = Session::start(d.run(&users, 0, &args), &d.dir, "a");
    let b = Session::start(d.run(&users, 1, &args), &d.dir, "b");
    let mut root = Command::new(d.client());
    root.current_dir(&d.dir).arg("run").args(args).arg("--daemon").arg(&d.socket);
    let r = Session::start(root, &d.dir, "root");
    for (i, n) in [(0, "100000"), (1, "60000")] {
        let o = users.command(i, &d.getppid_loop()).arg(n).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // A setuid-root program the first user starts runs with root's effective uid: not
    // the user's to trace, though its real uid is.
    let suid = d.dir.join("getppid_suid");
    std::fs::copy(d.getppid_loop(), &suid).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert!(!nosuid(&d.dir), "{} is on a nosuid mount: the test needs setuid programs", d.dir.display());
    let o = users.command(0, &suid).arg("30000").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (code_a, out_a, err_a) = a.finish();
    let (code_b, out_b, err_b) = b.finish();
    let (code_r, out_r, err_r) = r.finish();
    assert_eq!((code_a, code_b, code_r), (0, 0, 0), "{err_a}\n{err_b}\n{err_r}");
    // Each tenant: exactly its own 100,000 or 60,000 calls, none of the other's.
    assert_eq!(map_value(&out_a, "syscall", "getppid"), Some(100_000), "{out_a}");
    assert_eq!(map_value(&out_b, "syscall", "getppid"), Some(60_000), "{out_b}");
    // The other's calls are getppid_loop's as well: the exact counts are the proof that
    // none crossed over (the other processes counted are the user's own: its client, and
    // the forks that became its workloads).
    // Root sees all three.
    let all = map_value(&out_r, "syscall", "getppid").unwrap_or(0);
    assert!(all >= 190_000, "{out_r}");
}

/// Each tenant's markers: getppid calls, opens of marker paths, execs with marker argv.
const MARK_CALLS: u64 = 1_000_000;
const MARK_OPENS: usize = 1_000;
const MARK_EXECS: usize = 200;

/// What one run's JSON output shows of tenant `tag`'s markers: its opens and execs as
/// streamed rows (opensnoop, execsnoop), and the getppid calls counted in the kernel.
fn markers_seen(out: &str, tag: &str) -> (usize, usize) {
    let lines = json_lines(out);
    let rows = |plugin: &str, field: &str, needle: &str| {
        let row = |v: &&serde_json::Value| v["type"] == "row" && v["plugin"] == plugin;
        lines.iter().filter(row).filter(|v| v["data"][field].as_str().is_some_and(|s| s.contains(needle))).count()
    };
    (rows("opensnoop", "PATH", &format!("/tmp/wt-marker-{tag}-")), rows("execsnoop", "ARGS", &format!("marker-{tag}-")))
}

#[test]
fn two_tenants_running_three_plugins_at_once_see_exactly_their_own_markers_and_root_sees_both() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("mrk", 2);
    let d = Daemon::start("mrk", &policy(&users, &[0, 1]));
    let tags = [format!("a{}", std::process::id()), format!("b{}", std::process::id())];
    // System-wide: the scope alone narrows each tenant's run, in every collector and in
    // syscount's kernel aggregation; opensnoop and execsnoop stream their events.
    let args = ["syscount", "execsnoop", "opensnoop", "--param", "syscount.top=0", "-o", "json"];
    let a = Session::start(d.run(&users, 0, &args), &d.dir, "a");
    let b = Session::start(d.run(&users, 1, &args), &d.dir, "b");
    let mut root = Command::new(d.client());
    root.current_dir(&d.dir).arg("run").args(args).arg("--daemon").arg(&d.socket);
    let r = Session::start(root, &d.dir, "root");
    // Both tenants' workloads at once.
    let workloads: Vec<_> = (0..2)
        .map(|i| {
            let mut c = users.command(i, &d.dir.join("markers"));
            c.arg(&tags[i]).args([MARK_CALLS.to_string(), MARK_OPENS.to_string(), MARK_EXECS.to_string()]);
            c.spawn().unwrap()
        })
        .collect();
    for mut w in workloads {
        assert!(w.wait().unwrap().success());
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut outs = Vec::new();
    for s in [a, b, r] {
        assert!(Command::new("kill").args(["-INT", &s.child.id().to_string()]).status().unwrap().success());
        outs.push(s.finish());
    }
    for (code, out, err) in &outs {
        assert_eq!(*code, 0, "{err}");
        let lines = json_lines(out);
        let lost = lines.iter().find(|v| v["type"] == "lost_events").expect("lost_events");
        assert_eq!(u(&lost["data"]["events"]), 0, "nothing lost, so the counts are exact: {err}");
    }
    // Each tenant: exactly its own markers, streamed and in the kernel; none of the other's.
    for (i, (_, out, _)) in outs.iter().take(2).enumerate() {
        let (own, other) = (&tags[i], &tags[1 - i]);
        assert_eq!(markers_seen(out, own), (MARK_OPENS, MARK_EXECS), "tenant {i}: its own markers");
        assert_eq!(markers_seen(out, other), (0, 0), "tenant {i}: none of the other's");
        assert_eq!(map_json(out, "@syscall", "getppid"), Some(MARK_CALLS), "tenant {i}");
    }
    // Root sees both.
    let out_r = &outs[2].1;
    for tag in &tags {
        assert_eq!(markers_seen(out_r, tag), (MARK_OPENS, MARK_EXECS), "root sees {tag}");
    }
    assert!(map_json(out_r, "@syscall", "getppid").is_some_and(|n| n >= 2 * MARK_CALLS), "root sees both");
}

/// A count of key `key` in the JSON map `map`, if the output has it.
fn map_json(out: &str, map: &str, key: &str) -> Option<u64> {
    let lines = json_lines(out);
    let m = lines.iter().find(|v| v["type"] == "map" && v["data"].get(map).is_some())?;
    m["data"][map][key].as_u64()
}

#[test]
fn a_tenants_command_is_counted_exactly_and_ends_the_session() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("cmd", 1);
    let d = Daemon::start("cmd", &policy(&users, &[0]));
    let cmd = format!("{} 50000", d.getppid_loop().display());
    let o = run(d.run(&users, 0, &["syscount", "--param", "top=0", "-o", "json", "-c", &cmd]).current_dir(&d.dir));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let map = lines.iter().find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some()).expect("@syscall");
    assert_eq!(u(&map["data"]["@syscall"]["getppid"]), 50_000);
    // The command ran as the user, from the user's side.
    assert!(stderr(&o).contains("50000"), "{}", stderr(&o));
    assert!(d.runs().is_empty(), "a run outlived its session: {:?}", d.runs());
}

#[test]
fn a_tenant_runs_tracepoint_plugins_and_one_liners_through_the_daemon() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("tp", 1);
    let rule =
        one_tenant(&users, 0, &["syscall", "proc", "file", "tracepoint:sched", "tracepoint:syscalls"], "vetted", "");
    let d = Daemon::start("tp", &rule);
    // tracefs is root's: the executor has the formats from the collectors' side. A
    // kernel histogram on sched_switch: the command's 20 slices, at least.
    let cmd = format!("{} 20 3", d.dir.join("slices").display());
    let o = run(d.run(&users, 0, &["cpudist", "-o", "json", "-c", &cmd]).current_dir(&d.dir));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines =
        json_lines(&stdout(&o).lines().filter(|l| l.starts_with('{')).map(|l| format!("{l}\n")).collect::<String>());
    let hist = lines.iter().find(|v| v["type"] == "hist").unwrap_or_else(|| panic!("no histogram: {}", stdout(&o)));
    let slices: u64 = hist["data"]["@nsecs"].as_array().expect("buckets").iter().map(|b| u(&b["count"])).sum();
    assert!(slices >= 20, "{slices} slices for 20 rounds: {hist}");
    // A one-liner on a tracepoint, exactly the command's calls.
    let cmd = format!("{} 1000", d.getppid_loop().display());
    let mut c = users.command(0, &d.client());
    c.current_dir(&d.dir)
        .args(["-e", "tracepoint:syscalls:sys_enter_getppid { @calls = count(); }", "-c", &cmd, "--daemon"])
        .arg(&d.socket);
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("@calls: 1000\n"), "{}", stdout(&o));
    // A wildcard, expanded by the collectors' side: the command's own exec and exit.
    let mut c = users.command(0, &d.client());
    c.current_dir(&d.dir)
        .args(["-e", "tracepoint:sched:sched_process_e* { @[probe] = count(); }", "-c", &cmd, "--daemon"])
        .arg(&d.socket);
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for probe in ["exec", "exit"] {
        let key = format!("tracepoint:sched:sched_process_{probe}");
        assert_eq!(map_value(&stdout(&o), "", &key), Some(1), "{key}: {}", stdout(&o));
    }
    // Strings read in the kernel (bpftrace's lesson 3): the command's own paths.
    let mut c = users.command(0, &d.client());
    let program = r#"tracepoint:syscalls:sys_enter_openat { printf("%s %s\n", comm, str(args.filename)); }"#;
    let opens = "for i in 1 2 3 4 5 6 7 8 9 10; do cat /tmp/wt-tenant-str-$i 2>/dev/null; done; exit 0";
    c.current_dir(&d.dir).args(["-e", program, "-c", &format!("sh -c '{opens}'"), "--daemon"]).arg(&d.socket);
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).matches("cat /tmp/wt-tenant-str-").count(), 10, "{}", stdout(&o));
    assert!(stdout(&o).contains("cat /tmp/wt-tenant-str-10\n"), "{}", stdout(&o));
    // A tracepoint outside the rule is still refused, naming it.
    let mut c = users.command(0, &d.client());
    c.current_dir(&d.dir).args(["-e", "tracepoint:signal:signal_generate { @ = count(); }", "--daemon"]).arg(&d.socket);
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("signal:signal_generate"), "{}", stderr(&o));
}

#[test]
fn a_tenants_plugins_are_compiled_once_into_a_cache_of_its_own() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("tcache", 1);
    let d = Daemon::start("tcache", &policy(&users, &[0]));
    let (uid, cache) = (users.0[0].1, d.dir.join("tenant-cache"));
    let entries = || -> Vec<(PathBuf, std::time::SystemTime)> {
        let mut v: Vec<_> = std::fs::read_dir(cache.join(uid.to_string()))
            .map(|r| r.flatten().map(|e| (e.path(), e.metadata().unwrap().modified().unwrap())).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let once = || {
        let o = run(d.run(&users, 0, &["syscount", "--param", "top=0", "-d", "200ms"]).current_dir(&d.dir));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(!stderr(&o).contains("compiled on every run"), "{}", stderr(&o));
    };
    once();
    let first = entries();
    assert!(
        !first.is_empty() && first.iter().all(|(p, _)| p.extension().is_some_and(|e| e == "cwasm")),
        "compiled plugins in the tenant's cache: {first:?}"
    );
    // The tenant's own directory, which no one else may write; the base is root's.
    let meta = std::fs::metadata(cache.join(uid.to_string())).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o700));
    let base = std::fs::metadata(&cache).unwrap();
    assert_eq!((base.uid(), base.mode() & 0o022), (0, 0));
    for (p, _) in &first {
        assert_eq!(std::fs::metadata(p).unwrap().uid(), uid, "{}", p.display());
    }
    // The second run takes them as they are: nothing compiled, nothing rewritten.
    once();
    assert_eq!(entries(), first);
}

#[test]
fn a_tenant_is_refused_what_its_rule_does_not_allow_with_one_line_naming_the_rule() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("ref", 2);
    // User 1 exists but is in no tenant.
    let d = Daemon::start("ref", &policy(&users, &[0]));
    let rule = format!("tenant[0] of {}:1", d.dir.join("policy.toml").display());
    let daemon_pid = d.child.id().to_string();
    // A plugin file the user can read: sent with the request, and refused by the rule.
    let file = d.dir.join("spin.wasm");
    std::fs::copy(wasm("spin"), &file).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = file.display().to_string();
    // The vetted plugins, named in order in the refusal: the first of them.
    let mut vetted: Vec<String> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    vetted.sort();
    let cases: Vec<(usize, Vec<&str>, String)> = vec![
        (0, vec!["syscount", "-p", "1"], format!("-p 1: pid 1 is the system's, which {rule} does not let user {} trace", users.name(0))),
        (
            0,
            vec!["syscount", "-p", &daemon_pid],
            format!("-p {daemon_pid}: process {daemon_pid} runs as uid 0, and {rule} (scope \"own\") lets user {} trace only its own processes", users.name(0)),
        ),
        (
            0,
            vec!["profile", "-d", "1s"],
            format!("probe `profile:hz:99` is of class `profile`, which {rule} does not allow user {} (allowed: syscall, proc, file)", users.name(0)),
        ),
        (0, vec!["spin"], format!("plugin `spin`: {rule} lets user {} run vetted plugins only ({}, ", users.name(0), vetted[0])),
        (0, vec![&file], format!("plugin `{file}`: {rule} lets user {} run vetted plugins only", users.name(0))),
        (0, vec!["syscount", "--run-as", "root", "-c", "true"], "--run-as: through the daemon, a command runs as the user who starts it".into()),
        (
            1,
            vec!["syscount"],
            format!("user {} (uid {}) may not trace through this host's wasmtap daemon: no tenant of its policy", users.name(1), users.0[1].1),
        ),
    ];
    for (i, args, expect) in cases {
        let o = run(&mut d.run(&users, i, &args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with(&format!("wasmtap: error: {expect}")), "{args:?}: expected {expect:?}, got {err:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert!(d.runs().is_empty(), "{:?}", d.runs());
}

#[test]
fn a_tenants_run_holds_no_privilege_and_ends_when_its_client_is_killed() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("kill", 1);
    let d = Daemon::start("kill", &policy(&users, &[0]));
    for round in 0..3 {
        let mut s = Session::start(d.run(&users, 0, &["syscount", "-d", "60s"]), &d.dir, &format!("k{round}"));
        let runs = d.runs();
        assert_eq!(runs.len(), 1, "one run for the session");
        if round == 0 {
            // The run is two processes: the collectors' (root, which holds what the kernel
            // side needs) and its child the executor, which runs the plugins as the tenant:
            // its uid, no capability, no way to gain one, the plugins' thread under
            // seccomp. (The executor confines its dispatch thread once attached: wait for
            // the filter, 5 s at most.)
            let uid = users.0[0].1.to_string();
            let started = Instant::now();
            let (executor, status) = loop {
                let found = children_of(runs[0]).into_iter().find_map(|pid| {
                    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                    let has = |prefix: &str, value: &str| {
                        status.lines().any(|l| l.starts_with(prefix) && l.split_whitespace().nth(1) == Some(value))
                    };
                    has("Uid:", &uid).then_some((pid, status.clone(), has("Seccomp:", "2")))
                });
                match found {
                    Some((pid, status, true)) => break (pid, status),
                    Some((pid, status, false)) if started.elapsed() > Duration::from_secs(5) => break (pid, status),
                    None if started.elapsed() > Duration::from_secs(5) => panic!("no executor under run {}", runs[0]),
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            };
            let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_string();
            assert!(field("Uid:").split_whitespace().all(|u| u == uid), "{status}");
            assert!(field("Gid:").split_whitespace().all(|g| g == uid), "{status}");
            assert_eq!(field("Groups:"), "", "{status}");
            assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
            assert_eq!(field("CapPrm:"), "0000000000000000", "{status}");
            assert_eq!(field("NoNewPrivs:"), "1", "{status}");
            assert_eq!(field("Seccomp:"), "2", "{status}");
            // In a cgroup of its own with the quota's memory: 384 MiB for the host and
            // 64 MiB for its one plugin (cgroup v2 where it has the memory controller,
            // else v1, as on this machine class).
            let cgroups = std::fs::read_to_string(format!("/proc/{executor}/cgroup")).unwrap();
            let limit = match cgroups.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string())) {
                Some(path) => std::fs::read_to_string(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")),
                None => {
                    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("");
                    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
                    let v2 = mounts.lines().find(|l| l.split_whitespace().nth(2) == Some("cgroup2")).unwrap();
                    let root = v2.split_whitespace().nth(1).unwrap();
                    std::fs::read_to_string(format!("{root}{path}/memory.max"))
                }
            };
            assert!(cgroups.contains("/wasmtap/session-"), "{cgroups}");
            assert_eq!(limit.unwrap().trim(), ((384u64 + 64) << 20).to_string(), "{cgroups}");
            // The executor holds no collector: no program, link, ring buffer or filter map
            // (syscount's counts are the aggregation maps it reads, handed over); its
            // events come through shared memory.
            let held: Vec<String> = std::fs::read_dir(format!("/proc/{executor}/fd"))
                .unwrap()
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .map(|t| t.to_string_lossy().into_owned())
                .collect();
            assert!(!held.iter().any(|t| t == "anon_inode:bpf-prog" || t == "anon_inode:bpf_link"), "{held:?}");
            let mapped = std::fs::read_to_string(format!("/proc/{executor}/maps")).unwrap();
            assert!(mapped.contains("/memfd:wasmtap-events"), "{mapped}");
            let theirs = bpf_maps(executor);
            assert!(theirs.iter().all(|m| m["map_type"] != 27 && m["value_size"] != 1), "{theirs:?}");
            // The collectors' maps of its scope and filters are frozen: with the run's own
            // fds, no process (not even root) can widen what it sees. They are the hash
            // maps of one-byte values (the uid, comm, cgroup, target and in-scope-thread
            // sets) and the quota's array of maps; the rings, which the run reads, are not.
            let maps = bpf_maps(runs[0]);
            let (sets, quota, rings) = (
                maps.iter().filter(|m| m["map_type"] == 1 && m["value_size"] == 1).collect::<Vec<_>>(),
                maps.iter().filter(|m| m["map_type"] == 12).collect::<Vec<_>>(),
                maps.iter().filter(|m| m["map_type"] == 27).collect::<Vec<_>>(),
            );
            assert!(sets.len() >= 4 && !quota.is_empty() && !rings.is_empty(), "{maps:?}");
            assert!(sets.iter().chain(&quota).all(|m| m["frozen"] == 1), "{maps:?}");
            assert!(rings.iter().all(|m| m["frozen"] == 0), "{maps:?}");
        }
        s.child.kill().unwrap();
        let _ = s.child.wait();
        d.wait_until_no_runs(&format!("client {round} killed"));
    }
    // Still serving, and nothing left behind: no run, no session.
    let o = run(&mut d.run(&users, 0, &["syscount", "-d", "1s"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(users.command(0, &d.client()).args(["sessions", "--daemon"]).arg(&d.socket));
    assert_eq!(stdout(&o).lines().count(), 1, "only the header: {}", stdout(&o));
}

/// A fresh cgroup v2 directory, removed when dropped.
struct Cgroup(PathBuf);

impl Cgroup {
    fn make(name: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let v2 = mounts.lines().find(|l| l.split_whitespace().nth(2) == Some("cgroup2")).expect("cgroup v2 mounted");
        let dir = Path::new(v2.split_whitespace().nth(1).unwrap()).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap();
        Cgroup(dir)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_tenant_delegated_a_cgroup_sees_exactly_what_runs_there_and_kernel_stacks_need_the_right() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("cg", 1);
    let cg = Cgroup::make("wasmtap-delegated");
    let policy = format!(
        "[[tenant]]\nusers = [\"{}\"]\nscope = \"cgroups\"\ncgroups = [\"{}\"]\nprobes = [\"syscall\", \"profile\"]\n",
        users.name(0),
        cg.0.display()
    );
    let d = Daemon::start("cg", &policy);
    let rule = format!("tenant[0] of {}:1", d.dir.join("policy.toml").display());
    // Refused: a process outside the delegation, and kernel stacks without the right.
    let daemon_pid = d.child.id().to_string();
    let o = run(&mut d.run(&users, 0, &["syscount", "-p", &daemon_pid]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let outside = format!("wasmtap: error: -p {daemon_pid}: process {daemon_pid} is in cgroup ");
    assert!(err.starts_with(&outside), "{err}");
    assert!(err.contains(&format!(", outside the cgroups {rule} delegates to user {}", users.name(0))), "{err}");
    let o = run(&mut d.run(&users, 0, &["profile", "-d", "1s"]));
    let expect =
        format!("wasmtap: error: a plugin asks for kernel stacks, which {rule} does not allow user {}", users.name(0));
    assert!(stderr(&o).starts_with(&expect), "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(2));
    // System-wide, the tenant sees exactly the 40,000 calls made inside its cgroup (by
    // root, even), and none of the 60,000 made outside it.
    let s = Session::start(d.run(&users, 0, &["syscount", "--param", "top=0", "-d", "4s"]), &d.dir, "cg");
    let inside = format!("echo $$ > {}/cgroup.procs && exec {} 40000", cg.0.display(), d.getppid_loop().display());
    let o = Command::new("sh").args(["-c", &inside]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new(d.getppid_loop()).arg("60000").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (code, out, err) = s.finish();
    assert_eq!(code, 0, "{err}");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(40_000), "{out}");
}

/// The daemon's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The BPF maps process `pid` holds, as the kernel describes each fd in fdinfo
/// (`map_type`, `value_size`, `frozen`…).
fn bpf_maps(pid: u32) -> Vec<std::collections::BTreeMap<String, u64>> {
    let mut maps = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap().flatten() {
        let info = std::fs::read_to_string(e.path()).unwrap_or_default();
        if !info.contains("map_type:") {
            continue;
        }
        let field = |l: &str| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim();
            let n = v.strip_prefix("0x").map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())?;
            Some((k.to_string(), n))
        };
        maps.push(info.lines().filter_map(field).collect());
    }
    maps
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// BPF links held open by any process of the host.
fn bpf_links() -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy() == "anon_inode:bpf_link") {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn a_hundred_sessions_and_twenty_killed_clients_leave_nothing_behind() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("life", 1);
    let d = Daemon::start("life", &policy(&users, &[0]));
    let links = bpf_links();
    // A few sessions of each kind first, so that what the daemon keeps for good (its
    // runtime's threads, their stacks and allocator arenas) is in the figure it must come
    // back to; what grows with the number of sessions is not.
    let kill = |i: usize| {
        let mut s = Session::start(d.run(&users, 0, &["syscount", "-d", "60s"]), &d.dir, &format!("l{i}"));
        assert_eq!(d.runs().len(), 1, "one run for session {i}");
        s.child.kill().unwrap();
        let _ = s.child.wait();
        d.wait_until_no_runs(&format!("client {i} killed"));
    };
    for i in 0..10 {
        let o = run(&mut d.run(&users, 0, &["syscount", "-d", "100ms"]));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        if i % 5 == 0 {
            kill(100 + i);
        }
    }
    let start = rss_kib(d.child.id());
    for i in 0..100 {
        let o = run(&mut d.run(&users, 0, &["syscount", "-d", "100ms", "--param", "top=1"]));
        assert_eq!(o.status.code(), Some(0), "session {i}: {}", stderr(&o));
        assert!(stdout(&o).contains("@syscall["), "session {i}: {}", stdout(&o));
    }
    let after_runs = rss_kib(d.child.id());
    for i in 0..20 {
        kill(i);
    }
    // Nothing left: no run, no session, no BPF link; the daemon's memory where it was.
    assert!(d.runs().is_empty());
    let o = run(users.command(0, &d.client()).args(["sessions", "--daemon"]).arg(&d.socket));
    assert_eq!(stdout(&o).lines().count(), 1, "only the header: {}", stdout(&o));
    assert_eq!(bpf_links(), links, "BPF links left behind");
    let end = rss_kib(d.child.id());
    assert!(end * 10 <= start * 11, "the daemon's RSS grew from {start} KiB to {end} KiB over 120 sessions");
    eprintln!("daemon RSS: {start} KiB after the first sessions, {after_runs} KiB after 100 runs, {end} KiB after 20 killed clients");
    // And it still serves.
    let o = run(&mut d.run(&users, 0, &["syscount", "-d", "100ms"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Calls tenant B makes, paced, while tenant A floods: 200 rounds of 5,000, 10 ms apart.
const PACED: u64 = 1_000_000;
/// Tenant A's events a second.
const FLOOD_QUOTA: u64 = 100_000;

#[test]
fn a_tenant_flooding_its_quota_loses_its_own_events_as_quota_and_no_other_tenant_loses_any() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("fld", 2);
    let quota = format!("[tenant.quotas]\nevents_per_sec = {FLOOD_QUOTA}\n\n");
    let policy =
        one_tenant(&users, 0, &["syscall"], "vetted", &quota) + &one_tenant(&users, 1, &["syscall"], "vetted", "");
    let d = Daemon::start("flood", &policy);
    // Both stream every getppid of their own processes to the plugin, which counts them.
    let stream = ["syscount", "--param", "mode=stream", "--param", "syscall=getppid", "--param", "top=0", "-o", "json"];
    let a = Session::start(d.run(&users, 0, &stream), &d.dir, "a");
    let a_started = Instant::now();
    // A's storm: unpaced, as fast as one CPU calls getppid, far above its quota.
    let mut storm = users.command(0, &d.getppid_loop()).arg("1000000000").stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    // B meanwhile: exactly PACED calls, streamed, through its own -c command.
    let paced = format!("{} 200 5000 10", d.dir.join("getppid_paced").display());
    let mut b_args = stream.to_vec();
    b_args.extend(["-c", &paced]);
    let b = run(&mut d.run(&users, 1, &b_args));
    // A runs past its first live report (5 s), then Ctrl-C asks it for its report.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(a_started.elapsed()));
    let _ = storm.kill();
    let _ = storm.wait();
    assert!(Command::new("kill").args(["-INT", &a.child.id().to_string()]).status().unwrap().success());
    let a_elapsed = a_started.elapsed().as_secs_f64();
    let (code_a, out_a, err_a) = a.finish();

    // B: every one of its calls, nothing lost anywhere.
    let (out_b, err_b) = (stdout(&b), stderr(&b));
    assert_eq!(b.status.code(), Some(0), "{err_b}");
    let lines = json_lines(&out_b);
    let count = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .find(|v| v["type"] == "map" && v["data"].get("@syscall").is_some())
            .map(|v| u(&v["data"]["@syscall"]["getppid"]))
    };
    assert_eq!(count(&lines), Some(PACED), "{out_b}");
    let acct_b = &lines.iter().find(|v| v["type"] == "accounting").expect("B's accounting")["data"];
    let enter = &acct_b["kernel"]["kinds"]["sys_enter"];
    assert_eq!((u(&enter["dropped"]), enter.get("lost")), (0, None), "{acct_b}");
    assert!(acct_b["kernel"].get("losses").is_none(), "{acct_b}");
    assert_eq!(u(&acct_b["kernel"]["pipeline_dropped"]), 0, "{acct_b}");
    assert_eq!(u(&acct_b["plugins"][0]["dropped"]), 0, "{acct_b}");
    assert_eq!(u(&acct_b["bounds"]["events_per_sec"]), 2_000_000, "B holds to the default quota: {acct_b}");

    // A: what its quota let through, the rest lost as `quota`, said live and at the end.
    let lines = json_lines(&out_a);
    let acct_a = &lines.iter().find(|v| v["type"] == "accounting").expect("A's accounting")["data"];
    let streamed = count(&lines).expect("A's @syscall");
    let quota = u(&acct_a["kernel"]["losses"]["quota"]);
    assert!(quota > 1_000_000, "the storm made millions of calls: {acct_a}");
    let windows = (a_elapsed * 10.0).ceil() as u64 + 1;
    assert!(streamed <= windows * FLOOD_QUOTA / 10, "{streamed} in {a_elapsed:.1} s: {acct_a}");
    assert_eq!(u(&acct_a["kernel"]["kinds"]["sys_enter"]["dropped"]), 0, "{acct_a}");
    assert_eq!(u(&acct_a["bounds"]["events_per_sec"]), FLOOD_QUOTA, "{acct_a}");
    let report = err_a.lines().find(|l| l.starts_with("wasmtap: lost in the last 5 s: "));
    assert!(report.is_some_and(|l| l.contains("quota ") && l.ends_with(" events")), "{err_a}");
    assert_eq!(code_a, 1, "losses end A's run with problems: {err_a}");
    // Its session's cgroup, as the kernel holds it: 384 MiB for the host, 64 for its plugin.
    let cgroup = &acct_a["bounds"]["cgroup"];
    let version = cgroup["version"].as_str().unwrap_or("");
    assert!(version == "v1" || version == "v2", "{acct_a}");
    assert_eq!(u(&cgroup["memory_bytes"]), 448 << 20, "{acct_a}");
    assert_eq!(u(&cgroup["cpu_percent"]), 150, "100 % for the host, 50 for its plugin: {acct_a}");
}

/// One frame of the wire protocol (docs/service.md) read from `s`: (kind, payload).
fn read_frame(s: &mut std::os::unix::net::UnixStream) -> Option<(u8, Vec<u8>)> {
    use std::io::Read;
    let mut header = [0u8; 5];
    s.read_exact(&mut header).ok()?;
    let mut payload = vec![0u8; u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize];
    s.read_exact(&mut payload).ok()?;
    Some((header[4], payload))
}

fn hello(s: &mut std::os::unix::net::UnixStream, json: &str) {
    use std::io::Write;
    let mut frame = (json.len() as u32).to_le_bytes().to_vec();
    frame.push(1);
    frame.extend_from_slice(json.as_bytes());
    s.write_all(&frame).unwrap();
}

#[test]
fn a_client_that_passes_no_descriptors_gets_its_output_relayed_and_a_wrong_count_is_refused() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("raw", 1);
    let d = Daemon::start("raw", &policy(&users, &[0]));
    // Without descriptors the daemon relays what the run writes, as frames of kind 2
    // (stdout) and 3 (stderr), then the exit code.
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    hello(
        &mut s,
        r#"{"type":"hello","protocol":2,"ask":{"what":"run","args":["syscount","-d","1s"],"command_pid":null}}"#,
    );
    let (mut out, mut err, mut exit) = (String::new(), String::new(), None);
    while let Some((kind, payload)) = read_frame(&mut s) {
        let text = String::from_utf8_lossy(&payload).into_owned();
        match kind {
            2 => out += &text,
            3 => err += &text,
            _ if text.contains("\"exit\"") => exit = Some(text),
            _ => {}
        }
    }
    assert_eq!(exit.as_deref(), Some(r#"{"type":"exit","code":0}"#), "{err}");
    assert!(err.contains("Attached 1 probe"), "{err}");
    assert!(out.contains("Top 10 syscalls:"), "{out}");
    // A hello that names a descriptor it did not pass: one error, the connection closed.
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    hello(
        &mut s,
        r#"{"type":"hello","protocol":2,"ask":{"what":"run","args":["syscount"],"command_pid":null,"fds":["stdout"]}}"#,
    );
    let (kind, payload) = read_frame(&mut s).expect("an answer");
    assert_eq!(kind, 1);
    let want = r#"{"type":"error","message":"the hello names 1 descriptors, and 0 came with it"}"#;
    assert_eq!(String::from_utf8_lossy(&payload), want);
    assert!(read_frame(&mut s).is_none(), "the connection is closed");
    assert!(d.runs().is_empty(), "{:?}", d.runs());
}

#[test]
fn a_tenant_allowed_kernel_addresses_gets_kernel_stacks_named() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("ksym", 1);
    let policy = one_tenant(&users, 0, &["syscall", "profile"], "vetted", "kernel_addresses = true\n");
    let d = Daemon::start("ksym", &policy);
    // Its getppid storm spends most of its time in the kernel: its samples' kernel stacks
    // are named, though the run reads them after it has become the user (who is shown
    // every kernel address as 0).
    let cmd = format!("{} 3000000", d.getppid_loop().display());
    let o = run(d.run(&users, 0, &["profile", "--param", "hz=999", "-c", &cmd]).current_dir(&d.dir));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("entry_SYSCALL_64"), "kernel frames named: {out:.3000}");
}

#[test]
fn a_tenant_allowed_any_plugin_sends_its_own_file_and_cannot_send_what_it_cannot_read() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("any", 1);
    let policy = one_tenant(&users, 0, &["syscall"], "any", "");
    let d = Daemon::start("any", &policy);
    // Its own plugin file, a relative path from its own directory: the client opens it as
    // the user and sends it; the run loads what was sent and counts exactly.
    let mine = d.home(&users, 0, &["countcheck"]);
    let cmd = format!("{} 20000", d.getppid_loop().display());
    let o = run(d.run(&users, 0, &["./countcheck.wasm", "--param", "top=0", "-c", &cmd]).current_dir(&mine));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(20_000), "{out}");
    assert_eq!(map_value(&out, "syscall_streamed", "getppid"), Some(20_000), "{out}");
    // A file only root may read is never read for the user: its client cannot open it.
    let secret = d.dir.join("secret.wasm");
    std::fs::copy(wasm("countcheck"), &secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(&mut d.run(&users, 0, &[&secret.display().to_string()]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let want = format!("wasmtap: error: cannot open plugin file {}: Permission denied", secret.display());
    assert!(err.starts_with(&want), "{err}");
    assert!(d.runs().is_empty(), "{:?}", d.runs());
}

#[test]
fn a_tenant_records_and_draws_flame_graphs_into_files_of_its_own() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("rec", 1);
    let policy = one_tenant(&users, 0, &["syscall", "profile"], "vetted", "");
    let d = Daemon::start("rec", &policy);
    let home = d.dir.join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(users.0[0].1), Some(users.0[0].2)).unwrap();
    // `record` as root runs it: the client creates the recording as the user, the run
    // writes it, and the user replays it without the daemon.
    let cmd = format!("{} 30000", d.getppid_loop().display());
    let o = run(d.run_verb("record", &users, 0, &["syscount", "-o", "calls.rec", "-c", &cmd]).current_dir(&home));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let meta = std::fs::metadata(home.join("calls.rec")).unwrap();
    assert_eq!((std::os::unix::fs::MetadataExt::uid(&meta), meta.permissions().mode() & 0o777), (users.0[0].1, 0o600));
    std::fs::copy(wasm("syscount"), home.join("syscount.wasm")).unwrap();
    let replay = ["replay", "calls.rec", "./syscount.wasm", "--param", "top=0"];
    let o = run(users.command(0, &d.client()).args(replay).current_dir(&home));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(map_value(&stdout(&o), "syscall", "getppid"), Some(30_000), "{}", stdout(&o));
    // A recording that exists already is not overwritten.
    let o = run(d.run_verb("record", &users, 0, &["syscount", "-o", "calls.rec", "-d", "1s"]).current_dir(&home));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("calls.rec"), "{}", stderr(&o));
    // A flame graph, likewise.
    let cmd = format!("{} 1000000", d.getppid_loop().display());
    let args = ["profile", "--param", "stacks=user", "--param", "hz=999", "--flamegraph", "cpu.svg", "-c", &cmd];
    let o = run(d.run(&users, 0, &args).current_dir(&home));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(home.join("cpu.svg")).unwrap();
    // Its samples: the workload's user stacks, named (main, calling libc's syscall).
    assert!(svg.starts_with("<?xml") && svg.contains(">main") && svg.contains("syscall"), "{svg}");
    assert!(d.runs().is_empty(), "{:?}", d.runs());
}

#[test]
fn a_tenant_lists_the_kernels_tracepoints_through_the_daemon_and_a_binarys_functions_itself() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("lst", 2);
    // User 1 exists but is in no tenant.
    let d = Daemon::start("lst", &policy(&users, &[0]));
    let list = |i: usize, pattern: &str| {
        run(users.command(i, &d.client()).args(["list", pattern, "--daemon"]).arg(&d.socket).current_dir(&d.dir))
    };
    // tracefs is root's: the daemon lists, into the user's own stdout.
    let o = list(0, "tracepoint:sched:sched_switch");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("tracepoint:sched:sched_switch") && stdout(&o).contains("prev_pid"), "{}", stdout(&o));
    let o = list(0, "tracepoint:nosuch:*");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no probe matches `tracepoint:nosuch:*`"), "{}", stderr(&o));
    // A binary's functions need no privilege: read here, as the user.
    let o = list(0, &format!("uprobe:{}:main", d.getppid_loop().display()));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(":main"), "{}", stdout(&o));
    // A user no tenant names is refused, as for a run.
    let o = list(1, "tracepoint:sched:*");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("may not trace through this host's wasmtap daemon"), "{}", stderr(&o));
}

#[test]
fn a_tenant_allowed_signed_plugins_runs_one_signed_by_a_trusted_key_and_nothing_else() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("sig", 1);
    let policy = one_tenant(&users, 0, &["syscall"], "signed", "signed_by = [\"team-a\"]\n");
    let trust = "vetted = true\n[[key]]\nname = \"team-a\"\npublic-key = \"team-a.pub\"\n";
    let d = Daemon::start_trusting("sig", &policy, Some(trust));
    // The tenant's own directory, with countcheck packed, and signed by team-a or team-b or not at all.
    let mine = d.home(&users, 0, &[]);
    let (uid, gid) = (users.0[0].1, users.0[0].2);
    for (file, key) in [("by-a.wasm", Some("team-a")), ("by-b.wasm", Some("team-b")), ("unsigned.wasm", None)] {
        let path = mine.join(file);
        std::fs::copy(wasm("countcheck"), &path).unwrap();
        let o = run(wasmtap().arg("plugin").arg("pack").arg(&path));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        if let Some(key) = key {
            let o =
                run(wasmtap().args(["plugin", "sign"]).arg(&path).arg("--key").arg(d.dir.join(format!("{key}.key"))));
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        }
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
    }
    let cmd = format!("{} 20000", d.getppid_loop().display());
    let o = run(d.run(&users, 0, &["./by-a.wasm", "--param", "top=0", "-c", &cmd]).current_dir(&mine));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(20_000), "{out}");
    // Unsigned, or signed by a key the tenant's rule does not name: refused before any run starts.
    let rule = format!(
        "tenant[0] of {}:1 under the trust policy {}",
        d.dir.join("policy.toml").display(),
        d.dir.join("trust.toml").display()
    );
    for (file, why) in [
        ("./unsigned.wasm", "it carries no signature".to_string()),
        ("./by-b.wasm", "it is signed only by keys this policy does not trust: team-b (ed25519:".to_string()),
    ] {
        let o = run(d.run(&users, 0, &[file, "-d", "1s"]).current_dir(&mine));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        let want = format!(
            "wasmtap: error: plugin `{file}` refused by {rule} (it runs the vetted plugins, plugins signed by team-a): {why}"
        );
        assert!(err.starts_with(&want), "{err}\nwanted: {want}");
    }
    // A client cannot bring a trust policy of its own.
    std::fs::write(mine.join("mine.toml"), "any = true\n").unwrap();
    let o = run(d.run(&users, 0, &["./unsigned.wasm", "--trust", "mine.toml", "-d", "1s"]).current_dir(&mine));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--trust: through the daemon, plugins are trusted by the operator's policy"),
        "{}",
        stderr(&o)
    );
    assert!(d.runs().is_empty(), "{:?}", d.runs());
    // A rule naming a key the trust policy lacks: the daemon does not start.
    let bad = one_tenant(&users, 0, &["syscall"], "signed", "signed_by = [\"team-c\"]\n");
    std::fs::write(d.dir.join("bad.toml"), bad).unwrap();
    let o = run(wasmtap()
        .args(["daemon", "--policy"])
        .arg(d.dir.join("bad.toml"))
        .arg("--trust")
        .arg(d.dir.join("trust.toml"))
        .arg("--socket")
        .arg(d.dir.join("bad.sock")));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bad.toml:1: `tenant[0].signed_by`: no key `team-c` in the trust policy"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_tenant_plugin_that_allocates_without_bound_is_stopped_alone_and_the_other_tenant_counts_exactly() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("mem", 2);
    // Tenant 0 may run its own files, with 32 MiB a plugin; tenant 1 runs vetted plugins.
    let policy = one_tenant(&users, 0, &["syscall"], "any", "[tenant.quotas]\nmemory_mib = 32\n")
        + &one_tenant(&users, 1, &["syscall"], "vetted", "");
    let d = Daemon::start("mem", &policy);
    let mine = d.home(&users, 0, &["membomb"]);
    let loop_a = format!("{} 200000", d.getppid_loop().display());
    let loop_b = format!("{} 300000", d.getppid_loop().display());
    let mut bomb = d.run(&users, 0, &["./membomb.wasm", "--memory-mib", "512", "-c", &loop_a]);
    bomb.current_dir(&mine);
    let a = Session::start(bomb, &d.dir, "a");
    let b = Session::start(d.run(&users, 1, &["syscount", "--param", "top=0", "-c", &loop_b]), &d.dir, "b");
    let (code_a, _, err_a) = a.finish();
    let (code_b, out_b, err_b) = b.finish();
    // The bomb: held to its tenant's 32 MiB however much it asked for, disabled alone
    // (exit 1, finished with problems), its later events counted as dropped.
    assert_eq!(code_a, 1, "{err_a}");
    assert!(err_a.contains("plugin `membomb` disabled in on-batch: exceeded its memory limit of 32 MiB"), "{err_a}");
    // The other tenant, meanwhile: every one of its calls, counted in the kernel.
    assert_eq!(code_b, 0, "{err_b}");
    assert_eq!(map_value(&out_b, "syscall", "getppid"), Some(300_000), "{out_b}");
    // And the daemon serves on.
    let o = run(&mut d.run(
        &users,
        1,
        &["syscount", "--param", "top=0", "-c", &format!("{} 1000", d.getppid_loop().display())],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(map_value(&stdout(&o), "syscall", "getppid"), Some(1000));
    assert!(d.runs().is_empty(), "{:?}", d.runs());
}

/// A GET over HTTP/1.0 on 127.0.0.1: the body of a 200 answer.
fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

/// The value of the one series whose line starts with `name{` and holds every label in
/// `labels`.
fn series(scrape: &str, name: &str, labels: &[String]) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x.as_str())))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .next()
}

#[test]
fn the_daemons_endpoint_serves_each_exporting_sessions_exact_counts_labelled_with_its_user_and_no_other_tenants() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let users = Users::make("met", 2);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // User 0's sessions are exported; user 1's rule does not say so.
    let policy = format!(
        "[daemon]\nmetrics = \"127.0.0.1:{port}\"\n\n{}metrics = true\n\n{}",
        one_tenant(&users, 0, &["syscall", "proc"], "vetted", ""),
        one_tenant(&users, 1, &["syscall", "proc"], "vetted", "")
    );
    let d = Daemon::start("met", &policy);
    let empty = scrape(port).expect("the endpoint answers with no session");
    assert!(!empty.contains("wasmtap_daemon_sessions{"), "{empty}");
    // Each user's command: its getppid calls, then a pause in which the scrapes are taken.
    let loop_ = d.getppid_loop();
    let start = |i: usize, n: u32| {
        let cmd = format!("sh -c '{} {n}; sleep 6'", loop_.display());
        let args = ["syscount", "--param", "by=syscall-process", "--param", "top=0", "-o", "json", "-c", &cmd];
        let mut c = d.run(&users, i, &args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let (a, b) = (start(0, 30_000), start(1, 20_000));
    let want = ["syscall=\"getppid\"".to_string(), "comm=\"getppid_loop\"".to_string()];
    let user = |i: usize| format!("user=\"{}\"", users.name(i));
    let name = "wasmtap_syscount_syscall_process_total";
    let started = Instant::now();
    let mut last = String::new();
    let mut seen = None;
    while started.elapsed() < Duration::from_secs(20) {
        last = scrape(port).expect("scrape");
        let labels: Vec<String> = want.iter().cloned().chain([user(0)]).collect();
        seen = series(&last, name, &labels);
        if seen == Some(30_000.0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(seen, Some(30_000.0), "user 0's exact count while its session runs:\n{last}");
    // The series name its session; user 1's session runs, is counted as a session, and
    // none of its series is there.
    assert!(last.lines().any(|l| l.starts_with(name) && l.contains(&user(0)) && l.contains("session=\"")), "{last}");
    assert!(
        !last.lines().any(|l| !l.starts_with('#') && l.contains(&user(1)) && !l.starts_with("wasmtap_daemon_")),
        "{last}"
    );
    assert_eq!(series(&last, "wasmtap_daemon_sessions", &[user(1)]), Some(1.0), "{last}");
    assert_eq!(series(&last, "wasmtap_daemon_sessions_exported", &[user(1)]), Some(0.0), "{last}");
    assert_eq!(series(&last, "wasmtap_daemon_sessions_exported", &[user(0)]), Some(1.0), "{last}");
    // One valid exposition.
    let file = d.dir.join("scrape.txt");
    std::fs::write(&file, &last).unwrap();
    let check = Command::new("promtool").args(["check", "metrics"]).stdin(std::fs::File::open(&file).unwrap()).output();
    let check = check.expect("run promtool");
    assert!(check.status.success(), "promtool: {}{}\n{last}", stdout(&check), stderr(&check));
    // Both users' own reports are exact, as without the endpoint.
    for (child, n) in [(a, 30_000), (b, 20_000)] {
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(map_json(&out, "@syscall_process", "getppid,getppid_loop"), Some(n), "{out}");
    }
    // A session that ended is gone from the endpoint.
    let after = scrape(port).expect("scrape");
    assert!(!after.contains(name), "{after}");
    d.wait_until_no_runs("the sessions' commands");
}

//! Fleet export end to end, against the real consumers: Debian's Prometheus scrapes
//! `--serve` and answers queries, `promtool check metrics` checks a scrape of every
//! vetted plugin at once, and an OTLP/HTTP receiver built on the OpenTelemetry
//! project's protobuf package (`tests/otlp_receiver.py`) decodes `--otlp` pushes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmtap_tests::*;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A GET over HTTP/1.0: the status code and the body.
fn http_get(port: u16, path: &str) -> Option<(u32, String)> {
    http_get_accepting(port, path, "*/*")
}

/// A GET over HTTP/1.0 with this `Accept` header.
fn http_get_accepting(port: u16, path: &str, accept: &str) -> Option<(u32, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n").ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn dir(name: &str) -> PathBuf {
    let d = target_dir().join(format!("fleet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Debian's Prometheus on 127.0.0.1, scraping one target every second into storage of
/// its own; stopped, and its storage removed, when dropped.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Prometheus {
    fn start(dir: PathBuf, target: u16) -> Prometheus {
        let port = free_port();
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: wasmtap\n    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .stderr(Stdio::from(std::fs::File::create(dir.join("prometheus.err")).unwrap()))
            .spawn()
            .expect("start prometheus (Debian's `prometheus`; ./x setup installs it)");
        let p = Prometheus { child, dir, port };
        let started = Instant::now();
        while http_get(port, "/-/ready").is_none_or(|(code, _)| code != 200) {
            assert!(started.elapsed() < Duration::from_secs(30), "prometheus did not start: {}", p.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.err")).unwrap_or_default()
    }

    /// An instant query's result vector.
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let (code, body) = http_get(self.port, &format!("/api/v1/query?query={}", urlencode(q))).expect("query");
        assert_eq!(code, 200, "{q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The single value of an instant query, when it has one.
    fn value(&self, q: &str) -> Option<String> {
        let r = self.query(q);
        r.first().and_then(|s| s["value"][1].as_str()).map(str::to_string)
    }

    /// Wait until `q` has the value `want` (or until 30 s passed); the value last seen.
    fn wait_for(&self, q: &str, want: &str) -> Option<String> {
        let started = Instant::now();
        loop {
            let v = self.value(q);
            if v.as_deref() == Some(want) || started.elapsed() > Duration::from_secs(30) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn interrupt(s: &Session) {
    let st = Command::new("kill").args(["-INT", &s.child.id().to_string()]).status().unwrap();
    assert!(st.success());
}

#[test]
fn prometheus_scrapes_exactly_a_million_getppid_of_the_workload_and_runqlat_is_queryable() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let d = dir("prom");
    let port = free_port();
    let mut cmd = wasmtap();
    cmd.args(["run", "syscount", "runqlat", "--param", "syscount.by=syscall-process", "--param", "syscount.top=0"])
        .arg("--serve")
        .arg(format!("127.0.0.1:{port}"));
    let run = Session::start(cmd, &d, "wasmtap");
    assert!(run.stderr().contains(&format!("serving metrics at http://127.0.0.1:{port}/metrics")), "{}", run.stderr());
    let prom = Prometheus::start(d.join("prometheus"), port);
    assert_eq!(prom.wait_for("up{job=\"wasmtap\"}", "1").as_deref(), Some("1"), "{}", prom.log());

    let o = Command::new(workload("getppid_loop")).arg("1000000").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let q = "wasmtap_syscount_syscall_process_total{syscall=\"getppid\",comm=\"getppid_loop\"}";
    assert_eq!(prom.wait_for(q, "1000000").as_deref(), Some("1000000"), "{}", run.stderr());
    // Scraped again since: still exactly the workload's calls, not one more.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(prom.value(q).as_deref(), Some("1000000"));
    // The series' every sample went up or stayed: a counter that never went down.
    let resets = prom.value(&format!("resets({q}[1m])"));
    assert_eq!(resets.as_deref(), Some("0"));

    // runqlat: a histogram in seconds that histogram_quantile reads.
    let p99 =
        prom.value("histogram_quantile(0.99, sum by (le) (wasmtap_runqlat_seconds_bucket))").expect("runqlat's p99");
    let p99: f64 = p99.parse().unwrap();
    assert!(p99.is_finite() && p99 > 0.0 && p99 < 10.0, "p99 run queue latency {p99} s");
    // The run's accounting, per plugin.
    let delivered = prom.value("wasmtap_events_delivered_total{plugin=\"runqlat\"}");
    assert!(delivered.is_some(), "accounting is exported");

    interrupt(&run);
    let (code, out, err) = run.finish();
    assert_eq!(code, 0, "{err}");
    // The end prints the run's totals, as a run without --serve would.
    assert!(out.contains("@syscall_process[getppid, getppid_loop]: 1000000"), "{out}");
    let storage = prom.dir.clone();
    drop(prom);
    assert!(!storage.exists(), "the Prometheus storage is removed");
    let _ = std::fs::remove_dir_all(&d);
}

/// Every vetted plugin, from the plugins directory.
fn vetted() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins");
    let mut names: Vec<String> =
        std::fs::read_dir(root).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn promtool_accepts_a_scrape_taken_mid_run_with_every_vetted_plugin_at_once() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let d = dir("promtool");
    let port = free_port();
    let plugins = vetted();
    assert!(plugins.len() >= 13, "{plugins:?}");
    let mut cmd = wasmtap();
    cmd.arg("run").args(&plugins);
    cmd.args([
        "--param",
        "script.program=tracepoint:syscalls:sys_enter_getppid { @calls[comm] = count(); @ns = hist(nsecs % 1000); }",
    ]);
    cmd.args(["--param", "syscount.latency=true", "--serve"]).arg(format!("127.0.0.1:{port}"));
    let run = Session::start(cmd, &d, "wasmtap");
    let o = Command::new(workload("getppid_loop")).arg("20000").output().unwrap();
    assert!(o.status.success());
    let o =
        Command::new("sh").args(["-c", "for i in 1 2 3; do /bin/true; cat /etc/hostname >/dev/null; done"]).output();
    assert!(o.unwrap().status.success());
    // Two export intervals: every plugin with an interval has reported.
    std::thread::sleep(Duration::from_millis(2500));
    let (code, scrape) = http_get(port, "/metrics").expect("scrape");
    assert_eq!(code, 200);
    std::fs::write(d.join("scrape.txt"), &scrape).unwrap();
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(d.join("scrape.txt")).unwrap())
        .output()
        .expect("run promtool");
    assert!(check.status.success(), "promtool: {}{}\n{scrape}", stdout(&check), stderr(&check));
    // Asked the way Prometheus asks, the same families come as OpenMetrics, which the
    // Prometheus project's own OpenMetrics parser (strict: `_total`, `+Inf`, `# EOF`) reads.
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (code, om) = http_get_accepting(port, "/metrics", accept).expect("scrape");
    assert_eq!(code, 200);
    std::fs::write(d.join("scrape.om"), &om).unwrap();
    let python = target_dir().join("otlp-venv/bin/python");
    let parse = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
                 for f in p(sys.stdin.read()): print(f.name, f.type, len(f.samples))";
    let parsed = Command::new(&python)
        .args(["-c", parse])
        .stdin(std::fs::File::open(d.join("scrape.om")).unwrap())
        .output()
        .expect("run the OpenMetrics parser");
    assert!(parsed.status.success(), "OpenMetrics parser: {}\n{om}", stderr(&parsed));
    let om_families: Vec<String> = stdout(&parsed).lines().map(|l| l.split(' ').next().unwrap().to_string()).collect();
    let classic: Vec<String> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, ty) = l.split_once(' ').unwrap();
            if ty == "counter" { name.trim_end_matches("_total") } else { name }.to_string()
        })
        .collect();
    // The run went on between the two scrapes: a family may have come since.
    assert!(classic.iter().all(|f| om_families.contains(f)), "{classic:?}\n{om_families:?}");
    // Each plugin's accounting is there, and the aggregations of those that count.
    for p in &plugins {
        assert!(scrape.contains(&format!("wasmtap_events_delivered_total{{plugin=\"{p}\"}}")), "{p}\n{scrape}");
    }
    for family in [
        "# TYPE wasmtap_syscount_syscall_total counter",
        "# TYPE wasmtap_syscount_total_seconds_total counter",
        "# TYPE wasmtap_runqlat_seconds histogram",
        "# TYPE wasmtap_syslatency_seconds histogram",
        "# TYPE wasmtap_profile_samples_total counter",
    ] {
        assert!(scrape.contains(family), "{family}\n{scrape}");
    }
    // A one-liner has no interval of its own: its maps reach the metrics at its end, and
    // the run said so.
    assert!(run.stderr().contains("script: it has no `interval` parameter"), "{}", run.stderr());
    interrupt(&run);
    let (code, _, err) = run.finish();
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The receiver's requests, one JSON object each.
fn received(path: &Path) -> Vec<serde_json::Value> {
    json_lines(&std::fs::read_to_string(path).unwrap_or_default())
}

#[test]
fn an_otlp_receiver_decodes_the_exact_count_and_the_histogram() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let d = dir("otlp");
    let python = target_dir().join("otlp-venv/bin/python");
    assert!(python.is_file(), "{} is missing: ./x setup installs the receiver's packages", python.display());
    let port = free_port();
    let out = d.join("received.jsonl");
    let mut receiver = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("otlp_receiver.py"))
        .arg(port.to_string())
        .arg(&out)
        .stderr(std::fs::File::create(d.join("receiver.err")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "the receiver did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let loop_cmd = format!("{} 1000000", workload("getppid_loop").display());
    let o = run(wasmtap()
        .args(["run", "syscount", "runqlat", "--param", "syscount.by=syscall-process", "-c", &loop_cmd])
        .arg("--otlp")
        .arg(format!("http://127.0.0.1:{port}")));
    let _ = receiver.kill();
    let _ = receiver.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let requests = received(&out);
    assert!(
        !requests.is_empty(),
        "no push arrived: {}",
        std::fs::read_to_string(d.join("receiver.err")).unwrap_or_default()
    );
    // The last push is the run's end: the exact count, cumulative and monotonic.
    let last = requests.last().unwrap();
    let resource = &last["resource"];
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(resource["host.name"], hostname.trim());
    assert_eq!(resource["service.name"], "wasmtap");
    assert!(resource["os.version"].as_str().is_some_and(|k| !k.is_empty()));
    let points = last["points"].as_array().unwrap();
    let getppid = points
        .iter()
        .find(|p| {
            p["name"] == "wasmtap.syscount.syscall_process"
                && p["attributes"]["syscall"] == "getppid"
                && p["attributes"]["comm"] == "getppid_loop"
        })
        .unwrap_or_else(|| panic!("{last}"));
    assert_eq!(getppid["value"], 1_000_000, "{getppid}\n{}", stdout(&o));
    assert_eq!((getppid["kind"].as_str(), getppid["temporality"].as_str()), (Some("sum"), Some("cumulative")));
    assert_eq!(getppid["monotonic"], true);
    let hist = points.iter().find(|p| p["name"] == "wasmtap.runqlat.seconds").unwrap_or_else(|| panic!("{last}"));
    assert_eq!(hist["kind"], "histogram");
    let buckets: Vec<u64> = hist["buckets"].as_array().unwrap().iter().map(u).collect();
    assert_eq!(buckets.len(), hist["bounds"].as_array().unwrap().len() + 1, "{hist}");
    assert_eq!(buckets.iter().sum::<u64>(), u(&hist["count"]), "{hist}");
    assert!(u(&hist["count"]) > 0);
    let delivered =
        points.iter().find(|p| p["name"] == "wasmtap.events.delivered" && p["attributes"]["plugin"] == "syscount");
    assert!(delivered.is_some(), "{last}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_busy_address_or_a_bad_url_is_refused_before_anything_is_traced() {
    if !require_root() {
        return;
    }
    let _g = serial();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let o = run(wasmtap().args(["run", "syscount", "-d", "1s", "--serve", &format!("127.0.0.1:{port}")]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("--serve 127.0.0.1:{port}: cannot listen there")), "{}", stderr(&o));
    assert!(!stderr(&o).contains("Attached"), "{}", stderr(&o));
    let o = run(wasmtap().args(["run", "syscount", "-d", "1s", "--serve", "localhost"]));
    assert!(stderr(&o).contains("--serve localhost: expected ADDRESS:PORT"), "{}", stderr(&o));
    let o = run(wasmtap().args(["run", "syscount", "-d", "1s", "--otlp", "collector:4318"]));
    assert!(stderr(&o).contains("--otlp collector:4318: OTLP/HTTP needs an http:// or https:// URL"), "{}", stderr(&o));
}

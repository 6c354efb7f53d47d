//! The sink as a whole: which stream each item goes to in each format, and the flame
//! graph drawn at `close`.

use std::path::Path;

use super::testing::{agg, frame, hist, scalar, stack, text, Capture};
use super::*;
use crate::wit::types::{AggKind, Column, Row, Value};

fn output(format: Format) -> (Output, Capture, Capture) {
    let (out, err) = (Capture::default(), Capture::default());
    (Output::new(format, Box::new(out.clone()), Box::new(err.clone())), out, err)
}

fn table() -> TableSpec {
    let col = |name: &str, kind, width| Column { name: name.to_string(), kind, width };
    TableSpec {
        name: "execs".to_string(),
        columns: vec![
            col("TIME", ColumnKind::Timestamp, 12),
            col("PID", ColumnKind::Integer, 7),
            col("COMM", ColumnKind::Text, 0),
        ],
    }
}

fn row() -> Row {
    Row { table: 0, values: vec![Value::Int(1_000_000_000), Value::Int(42), text("sh\u{7}")] }
}

const CLOCK: Clock = Clock { fixed_mono_ns: None, wall_offset_ns: 3_600_000_000_000 };

fn profile(hot: &str, n: i64) -> Aggregation {
    let s = |leaf: &str| stack(vec![frame(leaf, 4), frame("main", 0)]);
    agg("cpu", AggKind::Count, &["stack"], vec![scalar(&[s(hot)], n), scalar(&[s("idle")], 1)])
}

fn latency() -> Aggregation {
    agg("lat", AggKind::Quantize, &[], vec![AggEntry { key: vec![], value: hist(&[(0, 1, 2)], 0) }])
}

#[test]
fn text_prints_tables_and_maps_on_stdout() {
    let (mut o, out, err) = output(Format::Text);
    o.table_header(&table());
    o.rows("execsnoop", &table(), &[row()], &CLOCK);
    o.text("p", "free text\n");
    o.aggregations("p", &[agg("n", AggKind::Count, &["k"], vec![scalar(&[text("a")], 1)]), latency()]);
    o.close().unwrap();
    let want = "\
TIME             PID COMM
01:00:01.000      42 sh?
free text
@n[a]: 1

@lat:
[0]                    2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

";
    assert_eq!((out.text().as_str(), err.text().as_str()), (want, ""));
}

#[test]
fn json_records_start_with_their_type_and_keep_column_order() {
    let (mut o, out, _) = output(Format::Json);
    o.attached(3, true);
    o.table_header(&table());
    o.rows("execsnoop", &table(), &[row()], &CLOCK);
    o.text("p", "hi\n");
    o.aggregations("p", &[latency()]);
    o.accounting(&crate::accounting::Accounting::default(), false);
    let want = concat!(
        "{\"type\":\"attached_probes\",\"data\":{\"probes\":3}}\n",
        "{\"type\":\"row\",\"plugin\":\"execsnoop\",\"table\":\"execs\",\"data\":{\"TIME\":3601000000000,\"PID\":42,\"COMM\":\"sh\\u0007\"}}\n",
        "{\"type\":\"printf\",\"plugin\":\"p\",\"data\":\"hi\\n\"}\n",
        "{\"type\":\"hist\",\"plugin\":\"p\",\"kind\":\"quantize\",\"data\":{\"@lat\":[{\"min\":0,\"max\":0,\"count\":2}]}}\n",
        "{\"type\":\"accounting\",\"data\":{\"kernel\":{\"kinds\":{},\"pipeline_dropped\":0,\"malformed\":0},\"plugins\":[],\"command_status\":null,\"host\":{\"rss_bytes\":0,\"peak_rss_bytes\":0}}}\n",
        "{\"type\":\"lost_events\",\"data\":{\"events\":0}}\n",
    );
    assert_eq!(out.text(), want);
}

#[test]
fn folded_keeps_stdout_pure_and_warns_once_per_histogram() {
    let (mut o, out, err) = output(Format::Folded);
    o.attached(1, true);
    o.table_header(&table());
    o.rows("execsnoop", &table(), &[row()], &CLOCK);
    o.text("p", "free text\n");
    for n in [5, 7] {
        o.aggregations("prof", &[profile("hot", n), latency()]);
    }
    o.close().unwrap();
    assert_eq!(out.text(), "main;idle 1\nmain;hot 5\nmain;idle 1\nmain;hot 7\n");
    let want_err = "\
Attached 1 probe. Hit Ctrl-C to end.
TIME             PID COMM
01:00:01.000      42 sh?
free text
wasmtap: prof: @lat: histograms and percentiles have no folded form; left out
";
    assert_eq!(err.text(), want_err);
}

#[test]
fn prometheus_prints_one_block_per_report() {
    let (mut o, out, err) = output(Format::Prometheus);
    o.text("p", "free text\n");
    let syscalls = |n| agg("syscall", AggKind::Count, &["name"], vec![scalar(&[text("read")], n)]);
    o.aggregations("syscount", &[syscalls(1)]);
    o.aggregations("syscount", &[syscalls(3)]);
    let block = |n| {
        format!(
            "# HELP wasmtap_syscount_syscall_total syscall\n# TYPE wasmtap_syscount_syscall_total counter\n\
             wasmtap_syscount_syscall_total{{name=\"read\"}} {n}\n"
        )
    };
    assert_eq!(out.text(), block(1) + &block(3));
    assert_eq!(err.text(), "free text\n");
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmtap-output-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("out.svg")
}

#[test]
fn the_flame_graph_draws_the_latest_stacks() {
    let path = temp_path("latest");
    let (mut o, _, _) = output(Format::Text);
    o.set_flamegraph(path.clone()).unwrap();
    o.aggregations("prof", &[profile("stale_function", 50)]);
    o.aggregations("prof", &[profile("hot_function", 90), latency()]);
    o.close().unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
    assert!(svg.contains("<title>hot_function (90 samples, 98.90%)</title>"), "{svg}");
    assert!(!svg.contains("stale_function"), "only the latest report is drawn");
    assert!(svg.contains(">@cpu<"), "the aggregation names the graph");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn several_stack_aggregations_share_one_graph_under_their_names() {
    let mut stacks = BTreeMap::new();
    let mut add = |plugin: &str, name: &str, title: &str, lines: &[(&str, i64)]| {
        let lines = lines.iter().map(|&(l, n)| (l.to_string(), n)).collect();
        stacks.insert((plugin.to_string(), name.to_string()), Stacks { title: title.to_string(), lines });
    };
    add("a", "cpu", "", &[("main;f", 3), ("zero", 0)]);
    add("b", "cpu", "", &[("main;g", 3)]);
    add("b", "off", "Off-CPU", &[("main;h", 3)]);
    add("b", "none", "None", &[("zero", 0)]);
    let (title, lines) = flamegraph_input(&stacks);
    assert_eq!(title, "wasmtap");
    assert_eq!(lines, ["a:cpu;main;f 3", "b:cpu;main;g 3", "off;main;h 3"]);
    stacks.retain(|(_, name), _| name == "off");
    assert_eq!(flamegraph_input(&stacks), ("Off-CPU".to_string(), vec!["main;h 3".to_string()]));
}

#[test]
fn flame_graph_errors_name_the_file() {
    let (mut o, _, _) = output(Format::Text);
    let err = o.set_flamegraph(PathBuf::from("/nonexistent-dir/cpu.svg")).unwrap_err();
    assert!(err.starts_with("cannot create flame graph /nonexistent-dir/cpu.svg: "), "{err}");
    o.aggregations("prof", &[profile("hot", 3)]);
    assert_eq!(o.close(), Ok(()), "nothing to draw into");

    let (mut o, _, _) = output(Format::Text);
    let _ = std::fs::remove_file("/tmp/never-written.svg");
    o.set_flamegraph(PathBuf::from("/tmp/never-written.svg")).unwrap();
    o.aggregations("p", &[latency()]);
    let err = o.close().unwrap_err();
    assert_eq!(err, "flame graph /tmp/never-written.svg: no aggregation keyed by a stack has counts to draw");
    assert!(!Path::new("/tmp/never-written.svg").exists());
}

use prost::Message;

use super::*;
use crate::output::testing::{agg, frame, hist, quantiles, scalar, stack, text};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;

fn entry(key: &[Value], value: AggValue) -> crate::wit::types::AggEntry {
    crate::wit::types::AggEntry { key: key.to_vec(), value }
}

fn syscalls(read: i64, write: i64) -> Aggregation {
    agg("syscall", AggKind::Count, &["syscall"], vec![scalar(&[text("read")], read), scalar(&[text("write")], write)])
}

fn sample<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next())
}

#[test]
fn counts_add_up_over_the_plugins_interval_resets() {
    let sink = Sink::new(&["syscount".into()], 1);
    sink.add(0, &[syscalls(5, 1)]);
    sink.add(0, &[syscalls(3, 0)]);
    sink.add(0, &[agg("syscall", AggKind::Count, &["syscall"], vec![scalar(&[text("open")], 2)])]);
    let text = prom::exposition(&sink.snapshot());
    let series = "wasmtap_syscount_syscall_total{plugin=\"syscount\",aggregation=\"syscall\",syscall=";
    assert_eq!(sample(&text, &format!("{series}\"read\"}}")), Some("8"), "{text}");
    assert_eq!(sample(&text, &format!("{series}\"write\"}}")), Some("1"), "{text}");
    assert_eq!(sample(&text, &format!("{series}\"open\"}}")), Some("2"), "{text}");
    assert!(text.contains("# TYPE wasmtap_syscount_syscall_total counter"), "{text}");
}

#[test]
fn help_is_the_title_without_a_printed_reports_cut() {
    let mut a = syscalls(1, 1);
    a.title = "Top 10 syscalls:".into();
    let sink = Sink::new(&["syscount".into()], 1);
    sink.add(0, &[a]);
    let text = prom::exposition(&sink.snapshot());
    assert!(text.contains("# HELP wasmtap_syscount_syscall_total Syscalls\n"), "{text}");
}

#[test]
fn min_and_max_are_over_the_run_and_means_the_latest() {
    let sink = Sink::new(&["p".into()], 1);
    let report = |lo, hi, mean| {
        [
            agg("low", AggKind::Min, &[], vec![scalar(&[], lo)]),
            agg("high", AggKind::Max, &[], vec![scalar(&[], hi)]),
            agg("mean", AggKind::Avg, &[], vec![scalar(&[], mean)]),
        ]
    };
    sink.add(0, &report(4, 10, 7));
    sink.add(0, &report(6, 8, 7000));
    let text = prom::exposition(&sink.snapshot());
    assert_eq!(sample(&text, "wasmtap_p_low{"), Some("4"), "{text}");
    assert_eq!(sample(&text, "wasmtap_p_high{"), Some("10"), "{text}");
    assert_eq!(sample(&text, "wasmtap_p_mean{"), Some("7000"), "{text}");
    assert!(text.contains("# TYPE wasmtap_p_low gauge"), "{text}");
}

#[test]
fn nanosecond_histograms_are_exported_in_seconds_with_cumulative_buckets() {
    let sink = Sink::new(&["runqlat".into()], 1);
    let h = |counts: &[(i64, i64, u64)]| agg("nsecs", AggKind::Quantize, &[], vec![entry(&[], hist(counts, 0))]);
    sink.add(0, &[h(&[(1024, 2048, 3), (2048, 4096, 1)])]);
    sink.add(0, &[h(&[(1024, 2048, 1), (4096, 8192, 2)])]);
    let text = prom::exposition(&sink.snapshot());
    assert!(text.contains("# TYPE wasmtap_runqlat_seconds histogram"), "{text}");
    let bucket = |le: &str| {
        sample(
            &text,
            &format!("wasmtap_runqlat_seconds_bucket{{plugin=\"runqlat\",aggregation=\"nsecs\",le=\"{le}\"}}"),
        )
    };
    assert_eq!(bucket("0.000002047"), Some("4"), "{text}");
    assert_eq!(bucket("0.000004095"), Some("5"), "{text}");
    assert_eq!(bucket("0.000008191"), Some("7"), "{text}");
    assert_eq!(bucket("+Inf"), Some("7"), "{text}");
    assert_eq!(sample(&text, "wasmtap_runqlat_seconds_count{"), Some("7"), "{text}");
}

#[test]
fn keys_over_the_bound_go_to_one_other_series() {
    let sink = Sink::new(&["p".into()], 1);
    let entries = (0..MAX_SERIES as i64 + 5).map(|i| scalar(&[text(&format!("k{i}"))], 10_000 - i)).collect();
    sink.add(0, &[agg("calls", AggKind::Count, &["key"], entries)]);
    // A later report: known keys add up, a new one goes to [other] too.
    sink.add(0, &[agg("calls", AggKind::Count, &["key"], vec![scalar(&[text("k0")], 1), scalar(&[text("new")], 7)])]);
    let snap = sink.snapshot();
    let family = &snap.plugins[0].families[0];
    assert_eq!(family.series.len(), MAX_SERIES + 1);
    let text = prom::exposition(&snap);
    assert_eq!(sample(&text, "wasmtap_p_calls_total{plugin=\"p\",aggregation=\"calls\",key=\"k0\"}"), Some("10001"));
    // The five smallest of the first report (9000 - 4 .. 9000) and the new key's 7.
    let other: i64 = (0..5).map(|i| 10_000 - (MAX_SERIES as i64 + i)).sum::<i64>() + 7;
    assert_eq!(
        sample(&text, "wasmtap_p_calls_total{plugin=\"p\",aggregation=\"calls\",key=\"[other]\"}"),
        Some(other.to_string().as_str())
    );
    assert_eq!(family.over, 6);
}

#[test]
fn stacks_are_folded_labels_with_a_lower_bound() {
    let sink = Sink::new(&["profile".into()], 1);
    let entries = (0..MAX_STACK_SERIES as i64 + 1)
        .map(|i| scalar(&[stack(vec![frame(&format!("f{i}"), 0), frame("main", 0)])], 1000 - i))
        .collect();
    sink.add(0, &[agg("samples", AggKind::Count, &["stack"], entries)]);
    let snap = sink.snapshot();
    assert_eq!(snap.plugins[0].families[0].series.len(), MAX_STACK_SERIES + 1);
    let text = prom::exposition(&snap);
    assert!(text.contains("stack=\"main;f0\"} 1000"), "{text}");
}

#[test]
fn the_final_report_of_an_export_only_run_is_the_runs_totals() {
    let sink = Sink::new(&["syscount".into()], 1);
    sink.add(0, &[syscalls(5, 1)]);
    sink.add(0, &[syscalls(3, 2)]);
    let last = syscalls(1, 0);
    sink.add(0, std::slice::from_ref(&last));
    let totals = sink.totals(0, &[last]);
    let values: Vec<(String, i64)> = totals[0]
        .entries
        .iter()
        .map(|e| match (&e.key[0], &e.value) {
            (Value::Text(k), AggValue::Scalar(v)) => (k.clone(), *v),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(values, [("read".to_string(), 9), ("write".to_string(), 3)]);
}

#[test]
fn accounting_is_exported_per_plugin_and_reason() {
    let sink = Sink::new(&["syscount".into()], 1);
    let stats = PluginStats {
        name: "syscount".into(),
        delivered: 10,
        filtered: 2,
        dropped_budget: 3,
        probes: vec![crate::accounting::ProbeStats { ring_dropped: 4, generated: 19, ..Default::default() }],
        ..Default::default()
    };
    sink.account(&[stats]);
    let text = prom::exposition(&sink.snapshot());
    assert_eq!(sample(&text, "wasmtap_events_delivered_total{plugin=\"syscount\"}"), Some("10"));
    assert_eq!(sample(&text, "wasmtap_events_generated_total{plugin=\"syscount\"}"), Some("19"));
    assert_eq!(sample(&text, "wasmtap_events_dropped_total{plugin=\"syscount\",reason=\"ring_full\"}"), Some("4"));
    assert_eq!(sample(&text, "wasmtap_events_dropped_total{plugin=\"syscount\",reason=\"budget\"}"), Some("3"));
}

#[test]
fn names_and_labels_are_valid_and_unique() {
    let sink = Sink::new(&["my-plugin".into()], 1);
    sink.add(
        0,
        &[
            agg("calls", AggKind::Count, &["plugin", "le"], vec![scalar(&[text("a\"b\\c\nd"), text("x")], 1)]),
            agg("calls_total", AggKind::Count, &[], vec![scalar(&[], 2)]),
            agg("total_us", AggKind::Sum, &[], vec![scalar(&[], 1_500_000)]),
        ],
    );
    let text = prom::exposition(&sink.snapshot());
    assert!(text.contains("wasmtap_my_plugin_calls_total{plugin=\"my-plugin\",aggregation=\"calls\",plugin_2=\"a\\\"b\\\\c\\nd\",le_2=\"x\"} 1"), "{text}");
    assert!(
        text.contains("wasmtap_my_plugin_calls_2_total{plugin=\"my-plugin\",aggregation=\"calls_total\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("wasmtap_my_plugin_total_seconds_total{plugin=\"my-plugin\",aggregation=\"total_us\"} 1.5"),
        "{text}"
    );
}

#[test]
fn units_come_from_bpftrace_style_names() {
    assert_eq!(Unit::of("nsecs"), ("", Unit::Seconds(1e9)));
    assert_eq!(Unit::of("avg_ns"), ("avg", Unit::Seconds(1e9)));
    assert_eq!(Unit::of("total_us"), ("total", Unit::Seconds(1e6)));
    assert_eq!(Unit::of("nanoseconds"), ("", Unit::Seconds(1e9)));
    assert_eq!(Unit::of("bytes"), ("", Unit::Bytes));
    assert_eq!(Unit::of("read_bytes"), ("read", Unit::Bytes));
    assert_eq!(Unit::of("process"), ("process", Unit::None));
    assert_eq!(Unit::of("bonus"), ("bonus", Unit::None), "a word ending in `us` is not microseconds");
}

#[test]
fn the_otlp_request_carries_cumulative_sums_and_explicit_bucket_histograms() {
    let sink = Sink::new(&["syscount".into(), "runqlat".into()], 1_000);
    sink.add(0, &[syscalls(5, 1)]);
    sink.add(0, &[syscalls(3, 0)]);
    let h = agg(
        "nsecs",
        AggKind::Quantize,
        &[],
        vec![entry(&[], hist(&[(1024, 2048, 3), (2048, 4096, 1), (8192, i64::MAX, 2)], 0))],
    );
    sink.add(1, &[h]);
    let p = agg("lat", AggKind::Percentiles, &[], vec![entry(&[], quantiles(10, 100, &[(500_000, 9)]))]);
    sink.add(1, &[p]);
    let host = otlp::Host { host_name: "h".into(), kernel: "6.18".into() };
    let bytes = otlp::request(&sink.snapshot(), &host).encode_to_vec();
    let req = ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap();
    let rm = &req.resource_metrics[0];
    let attrs: Vec<&str> = rm.resource.as_ref().unwrap().attributes.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(attrs, ["service.name", "service.version", "host.name", "os.type", "os.version"]);
    let metrics = &rm.scope_metrics[0].metrics;
    let m = metrics.iter().find(|m| m.name == "wasmtap.syscount.syscall").unwrap();
    let Some(Data::Sum(sum)) = &m.data else { panic!("{m:?}") };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "cumulative");
    let read = sum
        .data_points
        .iter()
        .find(|p| p.attributes.iter().any(|a| format!("{:?}", a.value).contains("\"read\"")))
        .unwrap();
    assert_eq!(read.value, Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(8)));
    assert_eq!(read.start_time_unix_nano, 1_000);
    let m = metrics.iter().find(|m| m.name == "wasmtap.runqlat.seconds").unwrap();
    assert_eq!(m.unit, "s");
    let Some(Data::Histogram(h)) = &m.data else { panic!("{m:?}") };
    let p = &h.data_points[0];
    assert_eq!(p.explicit_bounds, [2047e-9, 4095e-9]);
    assert_eq!(p.bucket_counts, [3, 1, 2], "the last is the overflow");
    assert_eq!(p.count, 6);
    let m = metrics.iter().find(|m| m.name == "wasmtap.runqlat.lat").unwrap();
    let Some(Data::Summary(s)) = &m.data else { panic!("{m:?}") };
    assert_eq!((s.data_points[0].count, s.data_points[0].quantile_values[0].value), (10, 9.0));
}

#[test]
fn a_snapshot_sent_to_the_daemon_renders_as_the_run_renders_it_and_hostile_frames_are_refused() {
    let sink = Sink::new(&["syscount".into(), "runqlat".into()], 7);
    sink.add(0, &[syscalls(5, 1)]);
    let h = agg("usecs", AggKind::Quantize, &["cpu"], vec![entry(&[Value::Int(1)], hist(&[(1, 2, 3), (4, 8, 1)], 9))]);
    let p = agg("lat", AggKind::Percentiles, &[], vec![entry(&[], quantiles(10, 100, &[(500_000, 9)]))]);
    sink.add(1, &[h, p]);
    let mut stats = crate::accounting::PluginStats { name: "syscount".into(), delivered: 6, ..Default::default() };
    stats.dropped_budget = 2;
    sink.account(&[stats]);
    let snapshot = sink.snapshot();
    let mut framed = Vec::new();
    wire::write_frame(&mut framed, &wire::encode(&snapshot)).unwrap();
    let payload = wire::read_frame(&mut framed.as_slice()).unwrap().unwrap();
    let back = wire::decode(&payload).unwrap();
    assert_eq!(prom::exposition(&back), prom::exposition(&snapshot));
    // The daemon's labels come first, and a key named like one of them is renamed.
    let users = agg("u", AggKind::Count, &["user"], vec![scalar(&[text("x")], 1)]);
    let sink = Sink::new(&["p".into()], 1);
    sink.add(0, &[users]);
    let text = prom::encode(&prom::families(&sink.snapshot(), &[("session", "3".into()), ("user", "ann".into())]));
    assert!(
        text.contains("wasmtap_p_u_total{session=\"3\",user=\"ann\",plugin=\"p\",aggregation=\"u\",user_2=\"x\"} 1"),
        "{text}"
    );
    // Hostile frames: not a snapshot, a series that does not fit, a length over the bound
    // (refused before anything of it is read), a stream cut short.
    assert!(wire::decode(b"[1,2]").unwrap_err().starts_with("not a snapshot"));
    let misfit = String::from_utf8(payload.clone()).unwrap().replacen("[\"read\"]", "[\"read\",\"extra\"]", 1);
    assert!(wire::decode(misfit.as_bytes()).unwrap_err().contains("does not fit"), "{misfit}");
    let huge = ((wire::MAX_FRAME + 1) as u32).to_le_bytes();
    assert!(wire::read_frame(&mut huge.as_slice()).unwrap_err().to_string().contains("more than the"));
    assert!(wire::read_frame(&mut &framed[..framed.len() - 1]).is_err());
    assert!(wire::read_frame(&mut &[][..]).unwrap().is_none());
}

#[test]
fn sources_merge_by_family_and_a_family_of_another_type_is_left_out() {
    let a = Sink::new(&["p".into()], 1);
    a.add(0, &[agg("n", AggKind::Count, &[], vec![scalar(&[], 1)])]);
    let b = Sink::new(&["p".into()], 1);
    b.add(0, &[agg("n", AggKind::Count, &[], vec![scalar(&[], 2)])]);
    let c = Sink::new(&["p".into()], 1);
    c.add(0, &[agg("n_total", AggKind::Max, &[], vec![scalar(&[], 3)])]);
    let fam = |s: &Sink, id: &str| prom::families(&s.snapshot(), &[("session", id.to_string())]);
    let (merged, conflicts) = prom::merge(vec![fam(&a, "1"), fam(&b, "2"), fam(&c, "3")]);
    let text = prom::encode(&merged);
    assert_eq!(text.matches("# TYPE wasmtap_p_n_total counter").count(), 1, "{text}");
    assert!(
        text.contains("session=\"1\"") && text.contains("session=\"2\"") && !text.contains("session=\"3\""),
        "{text}"
    );
    assert_eq!(conflicts, 1);
}

#[test]
fn openmetrics_is_served_to_a_scraper_that_asks_with_counters_named_its_way_and_an_eof() {
    let prometheus_asks = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert!(openmetrics::asked(Some(prometheus_asks)));
    assert!(!openmetrics::asked(Some("text/plain;version=0.0.4")));
    assert!(!openmetrics::asked(Some("application/openmetrics-text; q=0")));
    assert!(!openmetrics::asked(None));
    let sink = Sink::new(&["syscount".into()], 1);
    sink.add(0, &[syscalls(5, 1)]);
    let h = agg("nsecs", AggKind::Quantize, &[], vec![entry(&[], hist(&[(1024, 2048, 3), (2048, 4096, 1)], 0))]);
    let p = agg("lat", AggKind::Percentiles, &[], vec![entry(&[], quantiles(10, 100, &[(500_000, 9)]))]);
    sink.add(0, &[h, p]);
    let text = openmetrics::encode(&prom::families(&sink.snapshot(), &[]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
    assert!(text.contains("# TYPE wasmtap_syscount_syscall counter\n"), "{text}");
    assert!(
        text.contains(
            "wasmtap_syscount_syscall_total{plugin=\"syscount\",aggregation=\"syscall\",syscall=\"read\"} 5\n"
        ),
        "{text}"
    );
    assert!(text.contains("# TYPE wasmtap_syscount_seconds histogram\n"), "{text}");
    assert!(
        text.contains("wasmtap_syscount_seconds_bucket{plugin=\"syscount\",aggregation=\"nsecs\",le=\"+Inf\"} 4\n"),
        "{text}"
    );
    assert!(text.contains("wasmtap_syscount_seconds_count{plugin=\"syscount\",aggregation=\"nsecs\"} 4\n"), "{text}");
    assert!(
        text.contains("wasmtap_syscount_lat{plugin=\"syscount\",aggregation=\"lat\",quantile=\"0.5\"} 9\n"),
        "{text}"
    );
    // Every sample belongs to the family typed just before it.
    let mut family = "";
    for l in &lines {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap();
        } else if !l.starts_with('#') {
            assert!(l.starts_with(family), "{l} outside {family}\n{text}");
        }
    }
}

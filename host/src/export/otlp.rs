//! A snapshot as an OTLP metrics export request (`ExportMetricsServiceRequest`, the
//! OpenTelemetry project's generated types), for OTLP/HTTP with protobuf bodies.
//!
//! Cumulative temporality throughout, from the run's start: counts and sums are
//! monotonic sums, min/max/avg/stddev gauges, histograms explicit-bucket histograms
//! (bounds are the buckets' inclusive upper ends), percentiles summaries. Attributes
//! are the plugin, the aggregation and the key parts, as Prometheus's labels are; names
//! are `wasmtap.<plugin>.<aggregation>` with the unit in the metric's `unit` (UCUM).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, summary_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{cumulative, unset, Accounted, Family, Snapshot, Total, Unit, COUNTERS, DROPPED};
use crate::wit::types::AggKind;

/// What the resource says of this host and run.
#[derive(Clone, Debug, Default)]
pub struct Host {
    pub host_name: String,
    pub kernel: String,
}

impl Host {
    /// This machine's name and kernel release, from /proc.
    pub fn this() -> Host {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
        Host { host_name: read("/proc/sys/kernel/hostname"), kernel: read("/proc/sys/kernel/osrelease") }
    }
}

pub fn request(snapshot: &Snapshot, host: &Host) -> ExportMetricsServiceRequest {
    let resource = Resource {
        attributes: vec![
            text("service.name", "wasmtap"),
            text("service.version", env!("CARGO_PKG_VERSION")),
            text("host.name", &host.host_name),
            text("os.type", "linux"),
            text("os.version", &host.kernel),
        ],
        ..Default::default()
    };
    let times = Times { start: snapshot.started_unix_ns, now: snapshot.taken_unix_ns };
    let mut metrics = accounting(&snapshot.accounting, times);
    for p in &snapshot.plugins {
        metrics.extend(p.families.iter().filter_map(|f| aggregation(&p.plugin, f, times)));
    }
    let scope = InstrumentationScope {
        name: "wasmtap".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics { scope: Some(scope), metrics, ..Default::default() }],
            ..Default::default()
        }],
    }
}

#[derive(Clone, Copy)]
struct Times {
    start: u64,
    now: u64,
}

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;

fn aggregation(plugin: &str, f: &Family, t: Times) -> Option<Metric> {
    let (stem, unit) = Unit::of(&f.name);
    let stem = if stem.is_empty() { unit.suffix() } else { stem };
    let divisor = unit.divisor();
    let attrs = |values: &[String]| {
        let mut a = vec![text("plugin", plugin), text("aggregation", &f.name)];
        a.extend(f.key_names.iter().zip(values).map(|(k, v)| text(k, v)));
        a
    };
    let number = |values: &[String], v: i64| NumberDataPoint {
        attributes: attrs(values),
        start_time_unix_nano: t.start,
        time_unix_nano: t.now,
        value: Some(match unit {
            Unit::Seconds(_) => number_data_point::Value::AsDouble(v as f64 / divisor),
            _ => number_data_point::Value::AsInt(v),
        }),
        ..Default::default()
    };
    let data = match f.kind {
        AggKind::Count | AggKind::Sum => metric::Data::Sum(Sum {
            data_points: f.series.iter().filter_map(|(k, tot)| scalar(tot).map(|v| number(k, v))).collect(),
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        }),
        AggKind::Min | AggKind::Max | AggKind::Avg | AggKind::Stddev => metric::Data::Gauge(Gauge {
            data_points: f
                .series
                .iter()
                .filter(|(_, tot)| !unset(f.kind, tot))
                .filter_map(|(k, tot)| scalar(tot).map(|v| number(k, v)))
                .collect(),
        }),
        AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => metric::Data::Histogram(Histogram {
            data_points: f
                .series
                .iter()
                .filter_map(|(k, tot)| {
                    let Total::Histogram { buckets, sum } = tot else { return None };
                    let (bounds, count) = cumulative(buckets, divisor);
                    // Per-bucket counts: the cumulative ones apart, then the overflow.
                    let mut counts = Vec::with_capacity(bounds.len() + 1);
                    let mut before = 0;
                    for &(_, c) in &bounds {
                        counts.push(c - before);
                        before = c;
                    }
                    counts.push(count - before);
                    Some(HistogramDataPoint {
                        attributes: attrs(k),
                        start_time_unix_nano: t.start,
                        time_unix_nano: t.now,
                        count,
                        sum: Some(*sum as f64 / divisor),
                        bucket_counts: counts,
                        explicit_bounds: bounds.iter().map(|b| b.0).collect(),
                        ..Default::default()
                    })
                })
                .collect(),
            aggregation_temporality: CUMULATIVE,
        }),
        AggKind::Percentiles => metric::Data::Summary(Summary {
            data_points: f
                .series
                .iter()
                .filter_map(|(k, tot)| {
                    let Total::Quantiles { count, sum, points } = tot else { return None };
                    Some(SummaryDataPoint {
                        attributes: attrs(k),
                        start_time_unix_nano: t.start,
                        time_unix_nano: t.now,
                        count: *count,
                        sum: *sum as f64 / divisor,
                        quantile_values: points
                            .iter()
                            .map(|&(m, v)| summary_data_point::ValueAtQuantile {
                                quantile: f64::from(m) / 1e6,
                                value: v as f64 / divisor,
                            })
                            .collect(),
                        ..Default::default()
                    })
                })
                .collect(),
        }),
    };
    Some(Metric {
        name: format!("wasmtap.{plugin}.{stem}"),
        description: f.help(),
        unit: unit.ucum().to_string(),
        data: Some(data),
        ..Default::default()
    })
}

fn scalar(t: &Total) -> Option<i64> {
    match t {
        Total::Scalar(v) => Some(*v),
        _ => None,
    }
}

/// The accounting as monotonic sums, by plugin (and by reason for the lost events).
fn accounting(acct: &[Accounted], t: Times) -> Vec<Metric> {
    if acct.is_empty() {
        return Vec::new();
    }
    let sum = |name: &str, description: &str, points: Vec<(Vec<KeyValue>, u64)>| Metric {
        name: name.to_string(),
        description: description.to_string(),
        unit: "1".to_string(),
        data: Some(metric::Data::Sum(Sum {
            data_points: points
                .into_iter()
                .map(|(attributes, v)| NumberDataPoint {
                    attributes,
                    start_time_unix_nano: t.start,
                    time_unix_nano: t.now,
                    value: Some(number_data_point::Value::AsInt(v as i64)),
                    ..Default::default()
                })
                .collect(),
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        })),
        ..Default::default()
    };
    // `events_delivered` as `wasmtap.events.delivered`.
    let name = |stem: &str| format!("wasmtap.{}", stem.replacen('_', ".", 1));
    let mut out: Vec<Metric> = COUNTERS
        .iter()
        .map(|(stem, description, field)| {
            sum(&name(stem), description, acct.iter().map(|a| (vec![text("plugin", &a.plugin)], field(a))).collect())
        })
        .collect();
    let dropped = acct
        .iter()
        .flat_map(|a| a.dropped.iter().map(|&(reason, n)| (vec![text("plugin", &a.plugin), text("reason", reason)], n)))
        .collect();
    out.push(sum(&name(DROPPED.0), DROPPED.1, dropped));
    out
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_string())) }),
        ..Default::default()
    }
}

//! A snapshot as Prometheus metric families, written in the classic text exposition
//! (format 0.0.4) by the `prometheus` crate's encoder: what every Prometheus scrapes and
//! what `promtool check metrics` checks.
//!
//! Names are `wasmtap_<plugin>_<aggregation>`, then the unit (`_seconds`, `_bytes`, from
//! the aggregation's name: see [`Unit`]), then `_total` on counters. Counts and sums
//! are counters; min, max, avg and stddev gauges; log2, linear and log-linear histograms
//! histograms with `le` buckets; percentiles summaries. Every series is labelled with
//! its `plugin` and `aggregation` and with the aggregation's key parts.

use std::collections::HashSet;

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary,
};
use prometheus::{Encoder, TextEncoder};

use super::{cumulative, unset, Accounted, Family, Snapshot, Total, Unit, COUNTERS, DROPPED};
use crate::output::{label_names, metric_name};
use crate::wit::types::AggKind;

/// The content type of what [`exposition`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The whole snapshot as one exposition: the accounting, then each plugin's
/// aggregations.
pub fn exposition(snapshot: &Snapshot) -> String {
    encode(&families(snapshot, &[]))
}

/// Metric families as one exposition.
pub fn encode(families: &[MetricFamily]) -> String {
    let mut buf = Vec::new();
    match TextEncoder::new().encode(families, &mut buf) {
        Ok(()) => String::from_utf8(buf).unwrap_or_default(),
        // Only a family without samples or a sample of the wrong type is refused; both
        // are left out by `families`.
        Err(e) => format!("# wasmtap: cannot encode the metrics: {e}\n"),
    }
}

/// The snapshot's metric families, every series labelled first with `constant` (the
/// daemon's `session` and `user`).
pub fn families(snapshot: &Snapshot, constant: &[(&str, String)]) -> Vec<MetricFamily> {
    let mut used = HashSet::new();
    let mut out = accounting(&mut used, &snapshot.accounting, constant);
    for p in &snapshot.plugins {
        for f in &p.families {
            if let Some(family) = aggregation(&mut used, &p.plugin, f, constant) {
                out.push(family);
            }
        }
    }
    out
}

/// Several sources' families as one set: the series of families of the same name and
/// type together (the first's help stays). A family whose name another source uses with
/// another type is left out; how many were is returned.
pub fn merge(sources: Vec<Vec<MetricFamily>>) -> (Vec<MetricFamily>, usize) {
    let mut out: Vec<MetricFamily> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut conflicts = 0;
    for f in sources.into_iter().flatten() {
        match at.get(f.name()) {
            Some(&i) if out[i].get_field_type() == f.get_field_type() => {
                let mut f = f;
                let metrics = f.take_metric();
                out[i].mut_metric().extend(metrics);
            }
            Some(_) => conflicts += 1,
            None => {
                at.insert(f.name().to_string(), out.len());
                out.push(f);
            }
        }
    }
    (out, conflicts)
}

/// A gauge family of one series per `(labels, value)`.
pub fn gauges(name: &str, help: &str, series: Vec<(Vec<(&str, String)>, f64)>) -> MetricFamily {
    let metrics = series
        .into_iter()
        .map(|(labels, v)| {
            let mut m = Metric::from_label(labels.iter().map(|(k, v)| label(k, v)).collect());
            let mut g = Gauge::default();
            g.set_value(v);
            m.set_gauge(g);
            m
        })
        .collect();
    family(name.to_string(), help, MetricType::GAUGE, metrics)
}

fn constant_labels(constant: &[(&str, String)]) -> Vec<LabelPair> {
    constant.iter().map(|(k, v)| label(k, v)).collect()
}

/// The kind's metric type.
fn metric_type(kind: AggKind) -> MetricType {
    match kind {
        AggKind::Count | AggKind::Sum => MetricType::COUNTER,
        AggKind::Min | AggKind::Max | AggKind::Avg | AggKind::Stddev => MetricType::GAUGE,
        AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => MetricType::HISTOGRAM,
        AggKind::Percentiles => MetricType::SUMMARY,
    }
}

/// The family name of an aggregation: valid, unit-suffixed, `_total` on counters, and
/// unique with every sample name it implies among those `used`.
pub fn family_name(used: &mut HashSet<String>, plugin: &str, name: &str, kind: AggKind) -> (String, Unit) {
    let (stem, unit) = Unit::of(name);
    let ty = metric_type(kind);
    let mut base = metric_name(&format!("wasmtap_{plugin}_{stem}"));
    if base.ends_with('_') {
        base.pop();
    }
    if unit != Unit::None {
        base = format!("{base}_{}", unit.suffix());
    }
    let base = match ty {
        MetricType::COUNTER => base.strip_suffix("_total").map(str::to_string).unwrap_or(base),
        _ => base,
    };
    let total = if ty == MetricType::COUNTER { "_total" } else { "" };
    let suffixes: &[&str] = match ty {
        MetricType::HISTOGRAM => &["", "_bucket", "_sum", "_count"],
        MetricType::SUMMARY => &["", "_sum", "_count"],
        _ => &[""],
    };
    for n in 1.. {
        let candidate = match n {
            1 => format!("{base}{total}"),
            _ => format!("{base}_{n}{total}"),
        };
        let names: Vec<String> = suffixes.iter().map(|s| format!("{candidate}{s}")).collect();
        if names.iter().all(|s| !used.contains(s)) {
            used.extend(names);
            return (candidate, unit);
        }
    }
    unreachable!("some suffix is free")
}

fn aggregation(
    used: &mut HashSet<String>,
    plugin: &str,
    f: &Family,
    constant: &[(&str, String)],
) -> Option<MetricFamily> {
    if f.series.is_empty() {
        return None;
    }
    let (name, unit) = family_name(used, plugin, &f.name, f.kind);
    let reserved: Vec<&str> = ["plugin", "aggregation"].into_iter().chain(constant.iter().map(|(k, _)| *k)).collect();
    let keys = label_names(&f.key_names, &reserved);
    let divisor = unit.divisor();
    let mut metrics = Vec::with_capacity(f.series.len());
    for (values, total) in &f.series {
        let mut labels = constant_labels(constant);
        labels.extend([label("plugin", plugin), label("aggregation", &f.name)]);
        labels.extend(keys.iter().zip(values).map(|(k, v)| label(k, v)));
        let mut m = Metric::from_label(labels);
        match total {
            Total::Scalar(v) => {
                // A min or max with no sample yet has nothing to show.
                if unset(f.kind, total) {
                    continue;
                }
                let value = *v as f64 / divisor;
                if metric_type(f.kind) == MetricType::COUNTER {
                    let mut c = Counter::default();
                    c.set_value(value);
                    m.set_counter(c);
                } else {
                    let mut g = Gauge::default();
                    g.set_value(value);
                    m.set_gauge(g);
                }
            }
            Total::Histogram { buckets, sum } => {
                let (bounds, count) = cumulative(buckets, divisor);
                let mut h = Histogram::default();
                h.set_bucket(
                    bounds
                        .into_iter()
                        .map(|(le, n)| {
                            let mut b = Bucket::default();
                            b.set_upper_bound(le);
                            b.set_cumulative_count(n);
                            b
                        })
                        .collect(),
                );
                h.set_sample_count(count);
                h.set_sample_sum(*sum as f64 / divisor);
                m.set_histogram(h);
            }
            Total::Quantiles { count, sum, points } => {
                let mut s = Summary::default();
                s.set_quantile(
                    points
                        .iter()
                        .map(|&(millionths, v)| {
                            let mut q = Quantile::default();
                            q.set_quantile(f64::from(millionths) / 1e6);
                            q.set_value(v as f64 / divisor);
                            q
                        })
                        .collect(),
                );
                s.set_sample_count(*count);
                s.set_sample_sum(*sum as f64 / divisor);
                m.set_summary(s);
            }
        }
        metrics.push(m);
    }
    (!metrics.is_empty()).then(|| family(name, &f.help(), metric_type(f.kind), metrics))
}

/// The accounting: each plugin's events by fate, its faults and restarts.
fn accounting(used: &mut HashSet<String>, acct: &[Accounted], constant: &[(&str, String)]) -> Vec<MetricFamily> {
    if acct.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (stem, help, field) in COUNTERS {
        let name = format!("wasmtap_{stem}_total");
        used.insert(name.clone());
        let metrics = acct
            .iter()
            .map(|a| {
                let mut labels = constant_labels(constant);
                labels.push(label("plugin", &a.plugin));
                counter(labels, field(a) as f64)
            })
            .collect();
        out.push(family(name, help, MetricType::COUNTER, metrics));
    }
    let (stem, help) = DROPPED;
    let name = format!("wasmtap_{stem}_total");
    used.insert(name.clone());
    let dropped = acct
        .iter()
        .flat_map(|a| {
            a.dropped.iter().map(|&(reason, n)| {
                let mut labels = constant_labels(constant);
                labels.extend([label("plugin", &a.plugin), label("reason", reason)]);
                counter(labels, n as f64)
            })
        })
        .collect();
    out.push(family(name, help, MetricType::COUNTER, dropped));
    out
}

fn counter(labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut m = Metric::from_label(labels);
    let mut c = Counter::default();
    c.set_value(value);
    m.set_counter(c);
    m
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

fn family(name: String, help: &str, ty: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name);
    f.set_help(help.to_string());
    f.set_field_type(ty);
    f.set_metric(metrics);
    f
}

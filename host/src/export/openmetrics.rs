//! The same metric families in the OpenMetrics 1.0 text format, for a scraper that asks
//! for it (`Accept: application/openmetrics-text`, as Prometheus does by default). The
//! classic format stays the default: promtool 2.42 checks only that one.
//!
//! The differences that matter here: a counter's family is named without `_total` and its
//! sample with it, a histogram always ends with its `+Inf` bucket, and the exposition ends
//! with `# EOF`.

use std::fmt::Write;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use crate::output::escape;

/// The content type of what [`encode`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics.
pub fn asked(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let mut params = part.split(';').map(str::trim);
            let ty = params.next().unwrap_or("");
            // `q=0` is a refusal.
            ty.eq_ignore_ascii_case("application/openmetrics-text")
                && !params.any(|p| p.replace(' ', "").trim_end_matches('0').trim_end_matches('.') == "q=")
        })
    })
}

/// The families as one OpenMetrics exposition. Families without series are left out.
pub fn encode(families: &[MetricFamily]) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.get_metric().is_empty()) {
        let ty = f.get_field_type();
        let name = match ty {
            MetricType::COUNTER => f.name().strip_suffix("_total").unwrap_or(f.name()),
            _ => f.name(),
        };
        let kind = match ty {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::HISTOGRAM => "histogram",
            MetricType::SUMMARY => "summary",
            MetricType::UNTYPED => "unknown",
        };
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "# HELP {name} {}", escape(f.help(), false));
        for m in f.get_metric() {
            sample(&mut out, name, ty, m);
        }
    }
    out.push_str("# EOF\n");
    out
}

fn sample(out: &mut String, name: &str, ty: MetricType, m: &Metric) {
    let labels = m.get_label();
    match ty {
        MetricType::COUNTER => line(out, &format!("{name}_total"), labels, None, m.get_counter().get_value()),
        MetricType::GAUGE => line(out, name, labels, None, m.get_gauge().get_value()),
        MetricType::HISTOGRAM => {
            let h = m.get_histogram();
            let mut inf = false;
            for b in h.get_bucket() {
                inf |= b.upper_bound().is_infinite();
                let le = number(b.upper_bound());
                line(out, &format!("{name}_bucket"), labels, Some(("le", &le)), b.cumulative_count() as f64);
            }
            if !inf {
                line(out, &format!("{name}_bucket"), labels, Some(("le", "+Inf")), h.get_sample_count() as f64);
            }
            line(out, &format!("{name}_count"), labels, None, h.get_sample_count() as f64);
            line(out, &format!("{name}_sum"), labels, None, h.get_sample_sum());
        }
        MetricType::SUMMARY => {
            let s = m.get_summary();
            for q in s.get_quantile() {
                line(out, name, labels, Some(("quantile", &number(q.quantile()))), q.value());
            }
            line(out, &format!("{name}_count"), labels, None, s.sample_count() as f64);
            line(out, &format!("{name}_sum"), labels, None, s.sample_sum());
        }
        MetricType::UNTYPED => {}
    }
}

fn line(out: &mut String, name: &str, labels: &[LabelPair], extra: Option<(&str, &str)>, value: f64) {
    out.push_str(name);
    let pairs: Vec<(&str, &str)> = labels.iter().map(|l| (l.name(), l.value())).chain(extra).collect();
    if !pairs.is_empty() {
        out.push('{');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v, true));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", number(value));
}

/// A number as OpenMetrics writes it: `+Inf`, `-Inf`, `NaN`, else the shortest form
/// that reads back the same.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

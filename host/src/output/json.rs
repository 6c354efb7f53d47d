//! NDJSON records, in bpftrace's `-f json` shapes where they fit: `map` for scalars,
//! `hist` for histograms (buckets with inclusive `min` and `max`), and `quantiles` for
//! percentiles, each with the plugin and the aggregation's kind beside `type`.
//!
//! Members are written in order (`type` first, then `plugin`; `min`, `max`, `count`;
//! entries as printed): serde_json's `Map` would sort them.

use serde_json::Value as Json;

use super::entries::{kind_name, merged, percentile_label};
use super::folded;
use crate::wit::types::{AggEntry, AggKind, AggValue, Aggregation, Histogram, Quantiles, Value};

/// A JSON object built member by member.
pub(super) struct Object(String);

impl Object {
    pub(super) fn new() -> Object {
        Object(String::from("{"))
    }

    /// A member whose value is already JSON text.
    pub(super) fn raw(mut self, key: &str, json: &str) -> Object {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&quote(key));
        self.0.push(':');
        self.0.push_str(json);
        self
    }

    pub(super) fn str(self, key: &str, s: &str) -> Object {
        self.raw(key, &quote(s))
    }

    pub(super) fn int(self, key: &str, n: impl Into<i128>) -> Object {
        self.raw(key, &n.into().to_string())
    }

    pub(super) fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// A JSON string literal.
pub(super) fn quote(s: &str) -> String {
    Json::from(s).to_string()
}

/// The record of one aggregation: `{"type":"map","plugin":…,"kind":"count","data":{"@name":…}}`.
pub(super) fn aggregation(plugin: &str, agg: &Aggregation, entries: &[&AggEntry]) -> String {
    let record = match agg.kind {
        AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => "hist",
        AggKind::Percentiles => "quantiles",
        _ => "map",
    };
    let merged = merged(agg.kind, entries.iter().map(|e| (key(&e.key), &e.value)));
    let body = match (agg.key_names.is_empty(), merged.first()) {
        (true, Some((_, value))) => value_json(value),
        _ => merged.iter().fold(Object::new(), |o, (k, v)| o.raw(k, &value_json(v))).finish(),
    };
    let data = Object::new().raw(&format!("@{}", agg.name), &body).finish();
    Object::new().str("type", record).str("plugin", plugin).str("kind", kind_name(agg.kind)).raw("data", &data).finish()
}

/// A key as one string, like bpftrace's: parts joined by `,`, stacks folded.
fn key(parts: &[Value]) -> String {
    let part = |v: &Value| match v {
        Value::Int(i) => i.to_string(),
        Value::Text(s) => s.clone(),
        Value::Stack(frames) => folded::stack(frames),
    };
    parts.iter().map(part).collect::<Vec<_>>().join(",")
}

fn value_json(value: &AggValue) -> String {
    match value {
        AggValue::Scalar(v) => v.to_string(),
        AggValue::Histogram(h) => histogram(h),
        AggValue::Quantiles(q) => quantiles(q),
    }
}

/// `[{"min":0,"max":0,"count":1},…]`: bounds inclusive; an underflow bucket has no
/// `min` and an overflow bucket no `max`, as in bpftrace.
fn histogram(h: &Histogram) -> String {
    let buckets: Vec<String> = h
        .buckets
        .iter()
        .map(|b| {
            let mut o = Object::new();
            if b.low != i64::MIN {
                o = o.int("min", b.low);
            }
            if b.high != i64::MAX {
                o = o.int("max", i128::from(b.high) - 1);
            }
            o.int("count", b.count).finish()
        })
        .collect();
    format!("[{}]", buckets.join(","))
}

/// `{"count":N,"sum":S,"p50":V,"p99.9":V}`.
fn quantiles(q: &Quantiles) -> String {
    let o = Object::new().int("count", q.count).int("sum", q.sum);
    q.points.iter().fold(o, |o, p| o.int(&format!("p{}", percentile_label(p.millionths)), p.value)).finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::testing::{agg, frame, hist, quantiles as q, scalar, stack, text};
    use crate::wit::types::AggOrder;

    fn render(plugin: &str, a: &Aggregation) -> String {
        aggregation(plugin, a, &super::super::entries::sorted(a))
    }

    #[test]
    fn scalars_are_bpftrace_maps_in_printed_order() {
        let mut a = agg(
            "syscall",
            AggKind::Count,
            &["name"],
            vec![scalar(&[text("read")], 12), scalar(&[text("getppid")], 1_000_000), scalar(&[text("b\"\n")], 3)],
        );
        assert_eq!(
            render("syscount", &a),
            r#"{"type":"map","plugin":"syscount","kind":"count","data":{"@syscall":{"b\"\n":3,"read":12,"getppid":1000000}}}"#
        );
        a.order = AggOrder::ValueDescending;
        a.top = 1;
        assert_eq!(
            render("p", &a),
            r#"{"type":"map","plugin":"p","kind":"count","data":{"@syscall":{"getppid":1000000}}}"#
        );
    }

    #[test]
    fn unkeyed_and_multi_part_keys_are_as_in_bpftrace() {
        let a = agg("total", AggKind::Avg, &[], vec![scalar(&[], -7)]);
        assert_eq!(render("p", &a), r#"{"type":"map","plugin":"p","kind":"avg","data":{"@total":-7}}"#);
        let a = agg("c", AggKind::Sum, &["comm", "pid"], vec![scalar(&[text("swapper/0"), Value::Int(5)], i64::MIN)]);
        assert_eq!(
            render("p", &a),
            r#"{"type":"map","plugin":"p","kind":"sum","data":{"@c":{"swapper/0,5":-9223372036854775808}}}"#
        );
        let empty = agg("e", AggKind::Count, &[], vec![]);
        assert_eq!(render("p", &empty), r#"{"type":"map","plugin":"p","kind":"count","data":{"@e":{}}}"#);
    }

    #[test]
    fn histograms_have_inclusive_bounds_and_open_ends() {
        let h = hist(&[(i64::MIN, 0, 1), (0, 1, 1), (1, 2, 0), (2, 4, 0), (4, 8, 1), (100, i64::MAX, 2)], 1000);
        let a = agg("h", AggKind::Lquantize, &[], vec![AggEntry { key: vec![], value: h }]);
        assert_eq!(
            render("p", &a),
            concat!(
                r#"{"type":"hist","plugin":"p","kind":"lquantize","data":{"@h":["#,
                r#"{"max":-1,"count":1},{"min":0,"max":0,"count":1},{"min":1,"max":1,"count":0},"#,
                r#"{"min":2,"max":3,"count":0},{"min":4,"max":7,"count":1},{"min":100,"count":2}]}}"#
            )
        );
        let keyed = agg(
            "k",
            AggKind::Quantize,
            &["comm"],
            vec![AggEntry { key: vec![text("x")], value: hist(&[(1024, 2048, u64::MAX)], 0) }],
        );
        assert_eq!(
            render("p", &keyed),
            r#"{"type":"hist","plugin":"p","kind":"quantize","data":{"@k":{"x":[{"min":1024,"max":2047,"count":18446744073709551615}]}}}"#
        );
        let both = agg(
            "b",
            AggKind::Quantize,
            &[],
            vec![AggEntry { key: vec![], value: hist(&[(i64::MIN, i64::MAX, 1)], 0) }],
        );
        assert_eq!(render("p", &both), r#"{"type":"hist","plugin":"p","kind":"quantize","data":{"@b":[{"count":1}]}}"#);
    }

    #[test]
    fn percentiles_are_an_object_per_key() {
        let a = agg(
            "lat",
            AggKind::Percentiles,
            &["disk"],
            vec![AggEntry { key: vec![text("sda")], value: q(10, 500, &[(500_000, 40), (999_000, 90)]) }],
        );
        assert_eq!(
            render("p", &a),
            r#"{"type":"quantiles","plugin":"p","kind":"percentiles","data":{"@lat":{"sda":{"count":10,"sum":500,"p50":40,"p99.9":90}}}}"#
        );
    }

    #[test]
    fn stack_keys_are_folded_and_merged() {
        let a = agg(
            "cpu",
            AggKind::Count,
            &["stack", "comm"],
            vec![
                scalar(&[stack(vec![frame("f", 1), frame("main", 0)]), text("sh")], 2),
                scalar(&[stack(vec![frame("f", 5), frame("main", 0)]), text("sh")], 3),
            ],
        );
        assert_eq!(render("p", &a), r#"{"type":"map","plugin":"p","kind":"count","data":{"@cpu":{"main;f,sh":5}}}"#);
    }
}

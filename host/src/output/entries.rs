//! What every renderer does to an aggregation's entries first: keep the top N, order
//! them, and merge entries whose keys render the same.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use crate::wit::types::{AggEntry, AggKind, AggOrder, AggValue, Aggregation, Bucket, Histogram, Value};

/// An entry's value for sorting: the scalar, or the number of samples of a histogram or
/// of percentiles.
pub(super) fn weight(value: &AggValue) -> i128 {
    match value {
        AggValue::Scalar(v) => i128::from(*v),
        AggValue::Histogram(h) => h.buckets.iter().map(|b| i128::from(b.count)).sum(),
        AggValue::Quantiles(q) => i128::from(q.count),
    }
}

/// The entries to print: the `top` largest by value (ties by key; 0 keeps all), then in
/// the order the aggregation asks for.
pub(super) fn sorted(agg: &Aggregation) -> Vec<&AggEntry> {
    let by_value = |a: &&AggEntry, b: &&AggEntry| weight(&a.value).cmp(&weight(&b.value));
    let by_key = |a: &&AggEntry, b: &&AggEntry| cmp_keys(&a.key, &b.key);
    let mut entries: Vec<&AggEntry> = agg.entries.iter().collect();
    if agg.top > 0 && entries.len() > agg.top as usize {
        entries.sort_by(|a, b| by_value(a, b).reverse().then_with(|| by_key(a, b)));
        entries.truncate(agg.top as usize);
    }
    match agg.order {
        AggOrder::ValueAscending => entries.sort_by(|a, b| by_value(a, b).then_with(|| by_key(a, b))),
        AggOrder::ValueDescending => entries.sort_by(|a, b| by_value(a, b).reverse().then_with(|| by_key(a, b))),
        AggOrder::Key => entries.sort_by(by_key),
    }
    entries
}

/// Keys part by part: integers by number, text by bytes, stacks frame by frame from the
/// outermost; integers before text before stacks.
pub(super) fn cmp_keys(a: &[Value], b: &[Value]) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Int(_) => 0,
            Value::Text(_) => 1,
            Value::Stack(_) => 2,
        }
    }
    let part = |x: &Value, y: &Value| match (x, y) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Text(x), Value::Text(y)) => x.cmp(y),
        (Value::Stack(x), Value::Stack(y)) => {
            x.iter().rev().map(|f| (&f.symbol, f.addr)).cmp(y.iter().rev().map(|f| (&f.symbol, f.addr)))
        }
        _ => rank(x).cmp(&rank(y)),
    };
    a.iter().zip(b).map(|(x, y)| part(x, y)).find(|o| o.is_ne()).unwrap_or_else(|| a.len().cmp(&b.len()))
}

/// Entries under their rendered key, those with equal keys merged (stacks that differ
/// only in offsets fold to one line), in the order of first appearance.
pub(super) fn merged<'a>(
    kind: AggKind,
    entries: impl IntoIterator<Item = (String, &'a AggValue)>,
) -> Vec<(String, AggValue)> {
    let mut out: Vec<(String, AggValue)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (key, value) in entries {
        match index.get(&key) {
            Some(&i) => merge_into(kind, &mut out[i].1, value),
            None => {
                index.insert(key.clone(), out.len());
                out.push((key, value.clone()));
            }
        }
    }
    out
}

/// Combine two values of one key as the aggregation's function would have. Means,
/// deviations and percentiles cannot be combined without their samples: the first
/// (the larger, in value order) stays.
fn merge_into(kind: AggKind, into: &mut AggValue, other: &AggValue) {
    match (into, other) {
        (AggValue::Scalar(a), AggValue::Scalar(b)) => {
            *a = match kind {
                AggKind::Min => (*a).min(*b),
                AggKind::Max => (*a).max(*b),
                AggKind::Avg | AggKind::Stddev => *a,
                _ => a.saturating_add(*b),
            }
        }
        (AggValue::Histogram(a), AggValue::Histogram(b)) => *a = merge_histograms(a, b),
        _ => {}
    }
}

/// Bucket counts of equal bounds added.
fn merge_histograms(a: &Histogram, b: &Histogram) -> Histogram {
    let mut counts: BTreeMap<(i64, i64), u64> = BTreeMap::new();
    for bucket in a.buckets.iter().chain(&b.buckets) {
        let n = counts.entry((bucket.low, bucket.high)).or_insert(0);
        *n = n.saturating_add(bucket.count);
    }
    Histogram {
        buckets: counts.into_iter().map(|((low, high), count)| Bucket { low, high, count }).collect(),
        sum: a.sum.saturating_add(b.sum),
    }
}

/// bpftrace's name for a quantile given in millionths: `50`, `99.9`, `99.99`.
pub(super) fn percentile_label(millionths: u32) -> String {
    let (whole, frac) = (millionths / 10_000, millionths % 10_000);
    match frac {
        0 => whole.to_string(),
        _ => format!("{whole}.{}", format!("{frac:04}").trim_end_matches('0')),
    }
}

/// The kind as the JSON records name it.
pub(crate) fn kind_name(kind: AggKind) -> &'static str {
    match kind {
        AggKind::Count => "count",
        AggKind::Sum => "sum",
        AggKind::Min => "min",
        AggKind::Max => "max",
        AggKind::Avg => "avg",
        AggKind::Stddev => "stddev",
        AggKind::Quantize => "quantize",
        AggKind::Lquantize => "lquantize",
        AggKind::Llquantize => "llquantize",
        AggKind::Percentiles => "percentiles",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::testing::{agg, frame, hist, quantiles, scalar, stack, text};

    fn keys(entries: &[&AggEntry]) -> Vec<String> {
        entries.iter().map(|e| crate::output::text::key(&e.key)).collect()
    }

    #[test]
    fn top_keeps_the_largest_then_orders_as_asked() {
        let entries =
            vec![scalar(&[text("a")], 5), scalar(&[text("b")], 9), scalar(&[text("c")], 1), scalar(&[text("d")], 9)];
        let mut a = agg("x", AggKind::Count, &["k"], entries);
        a.top = 3;
        assert_eq!(keys(&sorted(&a)), ["a", "b", "d"]);
        a.order = AggOrder::ValueDescending;
        assert_eq!(keys(&sorted(&a)), ["b", "d", "a"]);
        a.order = AggOrder::Key;
        a.top = 0;
        assert_eq!(keys(&sorted(&a)), ["a", "b", "c", "d"]);
    }

    #[test]
    fn histograms_and_percentiles_sort_by_their_sample_count() {
        let entries = vec![
            AggEntry { key: vec![text("many")], value: hist(&[(0, 1, 3), (1, 2, 4)], 4) },
            AggEntry { key: vec![text("few")], value: hist(&[(0, 1, 2)], 0) },
            AggEntry { key: vec![text("q")], value: quantiles(5, 10, &[(500_000, 2)]) },
        ];
        let mut a = agg("h", AggKind::Quantize, &["k"], entries);
        assert_eq!(keys(&sorted(&a)), ["few", "q", "many"]);
        a.top = 1;
        assert_eq!(keys(&sorted(&a)), ["many"]);
    }

    #[test]
    fn key_order_compares_numbers_as_numbers() {
        let entries = vec![scalar(&[Value::Int(10)], 1), scalar(&[Value::Int(9)], 1), scalar(&[Value::Int(-3)], 1)];
        let mut a = agg("x", AggKind::Sum, &["n"], entries);
        a.order = AggOrder::Key;
        assert_eq!(keys(&sorted(&a)), ["-3", "9", "10"]);
    }

    #[test]
    fn equal_keys_merge_as_their_function_would() {
        let values = [AggValue::Scalar(3), AggValue::Scalar(-7), AggValue::Scalar(5)];
        let run = |kind| merged(kind, values.iter().map(|v| ("k".to_string(), v)));
        let first = |kind| match run(kind).as_slice() {
            [(_, AggValue::Scalar(v))] => *v,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (first(AggKind::Count), first(AggKind::Min), first(AggKind::Max), first(AggKind::Avg)),
            (1, -7, 5, 3)
        );
        let huge = [AggValue::Scalar(i64::MAX), AggValue::Scalar(1)];
        let m = merged(AggKind::Sum, huge.iter().map(|v| ("k".to_string(), v)));
        assert!(matches!(m[0].1, AggValue::Scalar(i64::MAX)), "saturates");

        let hs = [hist(&[(0, 1, 1), (2, 4, 1)], 2), hist(&[(2, 4, 5), (4, 8, 1)], 20)];
        let m = merged(AggKind::Quantize, hs.iter().map(|v| ("k".to_string(), v)));
        let AggValue::Histogram(h) = &m[0].1 else { panic!() };
        let got: Vec<_> = h.buckets.iter().map(|b| (b.low, b.high, b.count)).collect();
        assert_eq!((got, h.sum), (vec![(0, 1, 1), (2, 4, 6), (4, 8, 1)], 22));
    }

    #[test]
    fn stacks_order_from_the_outermost_frame() {
        let a = [stack(vec![frame("leaf", 1), frame("b", 2)])];
        let b = [stack(vec![frame("leaf", 1), frame("a", 2)])];
        assert_eq!(cmp_keys(&a, &b), Ordering::Greater);
        assert_eq!(cmp_keys(&[Value::Int(1)], &[text("1")]), Ordering::Less);
        assert_eq!(cmp_keys(&[Value::Int(1)], &[Value::Int(1), Value::Int(0)]), Ordering::Less);
    }

    #[test]
    fn percentile_labels_trim_zeros() {
        let got: Vec<String> =
            [500_000, 900_000, 990_000, 999_000, 999_900, 1_000_000, 1, 0].map(percentile_label).to_vec();
        assert_eq!(got, ["50", "90", "99", "99.9", "99.99", "100", "0.0001", "0"]);
    }
}

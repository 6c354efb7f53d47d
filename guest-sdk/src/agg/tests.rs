use super::*;
use crate::{testing, Bucket, Comm, Histogram, Percentile, Quantiles, Syscall};

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

/// `(low, high, count)` of each bucket of a histogram value.
fn buckets(value: &AggValue) -> Vec<(i64, i64, u64)> {
    match value {
        AggValue::Histogram(h) => h.buckets.iter().map(|b| (b.low, b.high, b.count)).collect(),
        other => panic!("not a histogram: {other:?}"),
    }
}

/// Keys and scalar values of an exported aggregation, in its order.
fn scalars(agg: &Aggregation) -> Vec<(Vec<Value>, i64)> {
    agg.entries
        .iter()
        .map(|e| match e.value {
            AggValue::Scalar(v) => (e.key.clone(), v),
            ref other => panic!("not a scalar: {other:?}"),
        })
        .collect()
}

#[test]
fn scalar_functions_compute_what_dtrace_prints() {
    let samples = [4, -2, 10, 7];
    let mut aggs = [Agg::count(), Agg::sum(), Agg::min(), Agg::max(), Agg::avg(), Agg::stddev()];
    for agg in &mut aggs {
        for v in samples {
            agg.add("k", v);
        }
    }
    let got: Vec<i64> = aggs.iter().map(|a| a.value(&"k").unwrap()).collect();
    // avg 19 / 4 = 4; stddev: sumsq 169 / 4 = 42, 42 - 4 * 4 = 26, isqrt 5.
    assert_eq!(got, [4, 19, -2, 10, 4, 5]);
    let kinds: Vec<AggKind> = aggs.iter().map(Agg::kind).collect();
    let want = [AggKind::Count, AggKind::Sum, AggKind::Min, AggKind::Max, AggKind::Avg, AggKind::Stddev];
    assert_eq!(kinds, want);

    let mut weighted = Agg::avg();
    weighted.add_n("k", 10, 3); // quantize(v, incr)-style increments
    weighted.add("k", 2);
    assert_eq!(weighted.value(&"k"), Some(8));
    let mut count = Agg::count();
    count.add_n(7u32, 0, 40);
    count.add(7u32, -1);
    assert_eq!(count.get(&7), Some(AggValue::Scalar(41)));
    assert_eq!((count.get(&8), count.value(&8)), (None, None));
}

#[test]
fn quantize_exports_every_bucket_between_the_extremes() {
    let mut agg = Agg::quantize();
    for v in [0, 1, 1, 5, 100] {
        agg.add(Comm::new(b"sh"), v);
    }
    let out = agg.to_aggregation("q", "ns", &["comm"], AggOrder::Key, 0);
    assert_eq!((out.kind, out.key_names.clone()), (AggKind::Quantize, vec!["comm".to_string()]));
    let want = [(0, 1, 1), (1, 2, 2), (2, 4, 0), (4, 8, 1), (8, 16, 0), (16, 32, 0), (32, 64, 0), (64, 128, 1)];
    assert_eq!(buckets(&out.entries[0].value), want);
    let AggValue::Histogram(Histogram { sum, .. }) = out.entries[0].value else { unreachable!() };
    assert_eq!(sum, 107);
    assert_eq!(agg.value(&Comm::new(b"sh")), Some(5), "a histogram sorts by its number of samples");
}

#[test]
fn linear_and_log_linear_histograms_use_dtraces_buckets() {
    let mut lin = Agg::lquantize(0, 100, 10).unwrap();
    for v in [-5, 15, 35, 250] {
        lin.add((), v);
    }
    let value = lin.get(&()).unwrap();
    let mut want = vec![(i64::MIN, 0, 1), (0, 10, 0), (10, 20, 1), (20, 30, 0), (30, 40, 1)];
    want.extend((40..100).step_by(10).map(|low| (low, low + 10, 0)));
    want.push((100, i64::MAX, 1));
    assert_eq!(buckets(&value), want);
    assert_eq!(lin.kind(), AggKind::Lquantize);

    let mut ll = Agg::llquantize(10, 0, 2, 10).unwrap();
    for v in [3, 40, 45, 5000] {
        ll.add((), v);
    }
    let rows = buckets(&ll.get(&()).unwrap());
    assert_eq!(rows.first(), Some(&(3, 4, 1)));
    assert_eq!(rows.iter().find(|b| b.0 == 40), Some(&(40, 50, 2)));
    assert_eq!(rows.last(), Some(&(1000, i64::MAX, 1)));
    assert_eq!(rows.len(), 26, "3..9, 10..90 and 100..900 by their steps, then >= 1000");

    assert!(Agg::<()>::lquantize(0, 100, 0).unwrap_err().starts_with("lquantize(0, 100, 0): step"));
    assert!(Agg::<()>::llquantize(10, 0, 2, 15).unwrap_err().contains("evenly divide"));
}

#[test]
fn percentiles_report_their_points_with_count_and_sum() {
    let mut agg = Agg::percentiles();
    for v in 1..=1000 {
        agg.add("k", v);
    }
    let points = [(500_000, 500), (900_000, 900), (990_000, 990), (999_000, 999)];
    let want = Quantiles {
        count: 1000,
        sum: 500_500,
        points: points.into_iter().map(|(millionths, value)| Percentile { millionths, value }).collect(),
    };
    let Some(AggValue::Quantiles(got)) = agg.get(&"k") else { panic!() };
    assert_eq!((got.count, got.sum), (want.count, want.sum));
    for (got, want) in got.points.iter().zip(&want.points) {
        assert_eq!(got.millionths, want.millionths);
        assert!((got.value - want.value).abs() as f64 <= 0.01 * want.value as f64, "{got:?} vs {want:?}");
    }
    assert_eq!(agg.kind(), AggKind::Percentiles);

    let mut custom = Agg::percentiles_at(&[1_000_000, 0]).unwrap();
    custom.add("k", 7);
    custom.add("k", 3);
    let Some(AggValue::Quantiles(q)) = custom.get(&"k") else { panic!() };
    assert_eq!(q.points.iter().map(|p| (p.millionths, p.value)).collect::<Vec<_>>(), [(1_000_000, 7), (0, 3)]);
    assert!(Agg::<()>::percentiles_at(&[1_000_001]).unwrap_err().contains("1000001"));
}

#[test]
fn clear_zeroes_the_values_and_keeps_the_keys() {
    let mut aggs = [Agg::count(), Agg::min(), Agg::quantize(), Agg::percentiles()];
    for agg in &mut aggs {
        agg.add(1u32, 5);
        agg.clear();
        assert_eq!(agg.len(), 1, "{:?}", agg.kind());
        assert_eq!(agg.value(&1), Some(0));
    }
    assert_eq!(aggs[1].get(&1), Some(AggValue::Scalar(0)), "a cleared min reads 0");
    assert_eq!(aggs[2].get(&1), Some(AggValue::Histogram(Histogram { buckets: vec![], sum: 0 })));
    let Some(AggValue::Quantiles(q)) = aggs[3].get(&1) else { panic!() };
    assert_eq!((q.count, q.points.len(), q.points[0].value), (0, 4, 0));
    aggs[0].add(1, 0);
    assert_eq!(aggs[0].value(&1), Some(1), "counting starts again from zero");
}

#[test]
fn trunc_keeps_the_largest_values() {
    let mut agg = Agg::sum();
    for (k, v) in [("a", 5), ("b", 1), ("c", 9), ("d", 3)] {
        agg.add(k, v);
    }
    agg.trunc(10);
    assert_eq!(agg.len(), 4);
    agg.trunc(2);
    let mut keys: Vec<&str> = agg.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["a", "c"]);
    agg.trunc(0);
    assert!(agg.is_empty());
}

#[test]
fn normalize_divides_what_is_exported_not_what_is_kept() {
    let mut agg = Agg::count();
    for _ in 0..25 {
        agg.add("k", 0);
    }
    agg.normalize(10);
    assert_eq!(agg.value(&"k"), Some(2));
    agg.normalize(0);
    assert_eq!(agg.value(&"k"), Some(25), "0 is taken as 1");
    agg.normalize(5);
    agg.denormalize();
    assert_eq!(agg.value(&"k"), Some(25));

    let mut hist = Agg::quantize();
    hist.add_n((), 3, 30);
    hist.normalize(10);
    assert_eq!(buckets(&hist.get(&()).unwrap()), [(2, 4, 3)], "DTrace divides bucket counts too");
}

#[test]
fn a_full_aggregation_rejects_new_keys_and_reports_the_drops_once() {
    testing::take_logs();
    let mut agg = Agg::count().with_limit(2, Eviction::RejectNew);
    for k in [1u32, 2, 3, 3, 1, 4] {
        agg.add(k, 0);
    }
    assert_eq!((agg.len(), agg.dropped()), (2, 3));
    assert_eq!(agg.value(&1), Some(2), "known keys still count");
    let _ = agg.to_aggregation("c", "", &["k"], AggOrder::Key, 0);
    let _ = agg.to_aggregation("c", "", &["k"], AggOrder::Key, 0);
    let logs = testing::take_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0], (Level::Warn, "@c: 3 samples of new keys dropped (limit: 2 keys)".to_string()));
    assert_eq!(Agg::<u32>::count().with_limit(0, Eviction::RejectNew).limit, 1);
}

#[test]
fn eviction_makes_room_by_value_or_by_age() {
    let mut smallest = Agg::sum().with_limit(3, Eviction::EvictSmallest);
    let mut oldest = Agg::sum().with_limit(3, Eviction::EvictLeastRecent);
    for agg in [&mut smallest, &mut oldest] {
        agg.add("a", 10);
        agg.add("b", 1);
        agg.add("c", 5);
        agg.add("a", 1); // "b" is now the least recently updated, and the smallest
        agg.add("c", 1);
        agg.add("d", 2);
        assert_eq!((agg.len(), agg.dropped(), agg.get(&"b")), (3, 1, None));
        agg.add("e", 100);
    }
    let keys = |agg: &Agg<&'static str>| {
        let mut k: Vec<&str> = agg.iter().map(|(k, _)| *k).collect();
        k.sort_unstable();
        k
    };
    assert_eq!(keys(&smallest), ["a", "c", "e"], "d (2) was the smallest");
    assert_eq!(keys(&oldest), ["c", "d", "e"], "a was updated least recently");
    testing::take_logs();
    let _ = oldest.to_aggregation("lru", "", &["k"], AggOrder::Key, 0);
    assert!(testing::take_logs()[0].1.contains("2 least recently updated keys evicted"));
}

#[test]
fn eviction_takes_a_sixteenth_of_a_large_limit_at_once() {
    let mut agg = Agg::count().with_limit(64, Eviction::EvictLeastRecent);
    (0..64u32).for_each(|k| agg.add(k, 0));
    agg.add(64, 0);
    assert_eq!((agg.len(), agg.dropped()), (61, 4));
    assert!((0..4).all(|k| agg.get(&k).is_none()) && agg.get(&4).is_some());

    let mut lowered = agg.with_limit(10, Eviction::EvictLeastRecent);
    lowered.add(100, 0);
    assert_eq!(lowered.len(), 10, "a lowered limit holds from the next new key on");
}

#[test]
fn aggregations_merge_like_their_samples() {
    let mut a = Agg::stddev();
    let mut b = Agg::stddev();
    let mut all = Agg::stddev();
    for (i, v) in [3, 17, -4, 8, 100, 2].into_iter().enumerate() {
        if i % 2 == 0 { &mut a } else { &mut b }.add("k", v);
        all.add("k", v);
    }
    b.add("only-b", 1);
    a.merge(&b).unwrap();
    assert_eq!((a.value(&"k"), a.len()), (all.value(&"k"), 2));

    let mut p = Agg::percentiles_at(&[500_000]).unwrap();
    let mut q = Agg::percentiles();
    p.add("k", 10);
    q.add("k", 20);
    q.add("k", 30);
    p.merge(&q).unwrap();
    let Some(AggValue::Quantiles(got)) = p.get(&"k") else { panic!() };
    assert_eq!((got.count, got.sum, got.points.len(), got.points[0].value), (3, 60, 1, 20));

    let err = Agg::quantize().merge(&Agg::<&str>::count()).unwrap_err();
    assert_eq!(err, "cannot merge a count aggregation into a quantize one");
    assert!(Agg::<u8>::lquantize(0, 10, 1).unwrap().merge(&Agg::lquantize(0, 10, 2).unwrap()).is_err());
}

#[test]
fn kernel_snapshots_fold_in_with_translated_keys() {
    let int = |n| vec![Value::Int(n)];
    let hist = |b: &[(i64, i64, u64)], sum| {
        let buckets = b.iter().map(|&(low, high, count)| Bucket { low, high, count }).collect();
        AggValue::Histogram(Histogram { buckets, sum })
    };
    testing::set_aggregations(move |id, reset| {
        assert_eq!((id, reset), (0, true));
        vec![
            AggEntry { key: int(0), value: hist(&[(1, 2, 2), (8, 16, 1)], 10) },
            AggEntry { key: int(1), value: hist(&[(4, 8, 1)], 5) },
            // A second entry for 0 (as after translating two keys to one) merges.
            AggEntry { key: int(0), value: hist(&[(2, 4, 1)], 3) },
            AggEntry { key: vec![text("odd")], value: hist(&[(2, 4, 1)], 3) },
        ]
    });
    let mut agg = Agg::quantize();
    let key = |k: Vec<Value>| match k[..] {
        [Value::Int(nr)] => Some(Syscall(nr)),
        _ => None,
    };
    agg.merge_entries(crate::read_aggregation(0, true).unwrap(), key).unwrap();
    let want = [(1, 2, 2), (2, 4, 1), (4, 8, 0), (8, 16, 1)];
    assert_eq!(buckets(&agg.get(&Syscall(0)).unwrap()), want);
    let out = agg.to_aggregation("ns", "", &["syscall"], AggOrder::ValueAscending, 0);
    assert_eq!(out.entries.iter().map(|e| e.key.clone()).collect::<Vec<_>>(), [[text("write")], [text("read")]]);

    let mut counts = Agg::count();
    let snapshot = vec![AggEntry { key: int(1), value: hist(&[(3, 4, 1)], 3) }];
    assert!(counts.merge_entries(snapshot, key).unwrap_err().contains("histogram"));
    let odd_bucket = vec![AggEntry { key: int(1), value: hist(&[(3, 4, 1)], 3) }];
    assert!(agg.merge_entries(odd_bucket, key).unwrap_err().contains("[3, 4)"));
}

#[test]
fn without_a_stand_in_kernel_snapshots_are_empty() {
    assert!(crate::read_aggregation(3, false).unwrap().is_empty());
}

#[test]
fn from_entries_merges_what_it_can_and_passes_the_rest() {
    let int = |n| vec![Value::Int(n)];
    let entries = vec![
        AggEntry { key: int(1), value: AggValue::Scalar(5) },
        AggEntry { key: int(2), value: AggValue::Scalar(7) },
        AggEntry { key: int(1), value: AggValue::Scalar(4) },
        AggEntry { key: int(3), value: AggValue::Scalar(1) },
    ];
    let out = from_entries("c", "t", &["pid"], AggKind::Count, AggOrder::ValueDescending, 2, entries.clone());
    assert_eq!((out.kind, out.top, out.title.as_str()), (AggKind::Count, 2, "t"));
    assert_eq!(scalars(&out), [(int(1), 9), (int(2), 7)]);
    let out = from_entries("m", "", &["pid"], AggKind::Min, AggOrder::Key, 0, entries.clone());
    assert_eq!(scalars(&out), [(int(1), 4), (int(2), 7), (int(3), 1)]);

    let gappy = Histogram {
        buckets: vec![Bucket { low: 1, high: 2, count: 1 }, Bucket { low: 8, high: 16, count: 2 }],
        sum: 20,
    };
    let entry = AggEntry { key: int(1), value: AggValue::Histogram(gappy.clone()) };
    let out = from_entries("q", "", &["pid"], AggKind::Quantize, AggOrder::Key, 0, vec![entry.clone()]);
    assert_eq!(buckets(&out.entries[0].value), [(1, 2, 1), (2, 4, 0), (4, 8, 0), (8, 16, 2)]);
    let out = from_entries("l", "", &["pid"], AggKind::Lquantize, AggOrder::Key, 0, vec![entry.clone()]);
    assert_eq!(out.entries, [entry], "linear buckets pass through");
    let out = from_entries("a", "", &["pid"], AggKind::Avg, AggOrder::ValueAscending, 0, entries);
    assert_eq!(scalars(&out).len(), 4, "averages cannot merge: each entry is kept");
}

#[test]
fn entries_sort_by_value_or_key_and_top_keeps_the_largest() {
    let mut agg = Agg::sum();
    for (k, v) in [("b", 3), ("a", 3), ("c", 9), ("d", -1)] {
        agg.add(k, v);
    }
    fn keys(rows: Vec<(&&'static str, i64)>) -> Vec<(&'static str, i64)> {
        rows.into_iter().map(|(k, v)| (*k, v)).collect()
    }
    assert_eq!(keys(agg.sorted(AggOrder::ValueAscending)), [("d", -1), ("a", 3), ("b", 3), ("c", 9)]);
    assert_eq!(keys(agg.sorted(AggOrder::ValueDescending)), [("c", 9), ("a", 3), ("b", 3), ("d", -1)]);
    assert_eq!(keys(agg.sorted(AggOrder::Key)), [("a", 3), ("b", 3), ("c", 9), ("d", -1)]);
    assert_eq!(keys(agg.top(2)), [("c", 9), ("a", 3)]);

    let out = agg.to_aggregation("s", "", &["k"], AggOrder::ValueAscending, 3);
    assert_eq!(scalars(&out), [("a", 3), ("b", 3), ("c", 9)].map(|(k, v)| (vec![text(k)], v)));
    assert!(agg.remove(&"c") && !agg.remove(&"c"));
    assert_eq!(agg.len(), 3);
}

#[test]
fn an_aggregation_without_a_key_has_one_entry_with_no_parts() {
    let mut total = Agg::count();
    total.add((), 0);
    total.add((), 0);
    let out = total.to_aggregation("events", "", &[], AggOrder::Key, 0);
    assert_eq!(out.entries, [AggEntry { key: vec![], value: AggValue::Scalar(2) }]);
    assert!(out.key_names.is_empty());
}

//! What an aggregation keeps per key, and how that becomes the value it reports.

use wasmtap_abi::hist::{log2_bucket, log2_range, Linear, LogLinear, LOG2_LOWEST};

use super::bins::Bins;
use super::sketch::Sketch;
use crate::{AggKind, AggValue, Bucket, Histogram, Percentile, Quantiles};

/// The function an aggregation applies, with its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Stddev,
    Hist(Layout),
    /// The quantiles reported, in millionths.
    Percentiles(Box<[u32]>),
}

impl Func {
    /// The function's name in D (`count`, `lquantize`...).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Func::Count => "count",
            Func::Sum => "sum",
            Func::Min => "min",
            Func::Max => "max",
            Func::Avg => "avg",
            Func::Stddev => "stddev",
            Func::Hist(Layout::Log2) => "quantize",
            Func::Hist(Layout::Linear(_)) => "lquantize",
            Func::Hist(Layout::LogLinear(_)) => "llquantize",
            Func::Percentiles(_) => "percentiles",
        }
    }

    pub(crate) fn kind(&self) -> AggKind {
        match self {
            Func::Count => AggKind::Count,
            Func::Sum => AggKind::Sum,
            Func::Min => AggKind::Min,
            Func::Max => AggKind::Max,
            Func::Avg => AggKind::Avg,
            Func::Stddev => AggKind::Stddev,
            Func::Hist(Layout::Log2) => AggKind::Quantize,
            Func::Hist(Layout::Linear(_)) => AggKind::Lquantize,
            Func::Hist(Layout::LogLinear(_)) => AggKind::Llquantize,
            Func::Percentiles(_) => AggKind::Percentiles,
        }
    }

    /// The state of a key with no samples.
    pub(crate) fn empty(&self) -> Stat {
        match self {
            Func::Hist(_) => Stat::Hist(Hist::default()),
            Func::Percentiles(_) => Stat::Sketch(Box::default()),
            _ => Stat::Scalar(Moments::default()),
        }
    }

    /// Whether states of `self` and `other` merge: the same function and buckets
    /// (percentile sketches merge whatever quantiles they report).
    pub(crate) fn merges_with(&self, other: &Func) -> bool {
        matches!((self, other), (Func::Percentiles(_), Func::Percentiles(_))) || self == other
    }
}

/// The buckets of a histogram, numbered from 0 in value order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `quantize`: bucket `log2_bucket(v) + 64`.
    Log2,
    Linear(Linear),
    LogLinear(LogLinear),
}

impl Layout {
    fn bucket(&self, v: i64) -> u32 {
        match self {
            Layout::Log2 => (log2_bucket(v) - LOG2_LOWEST) as u32,
            Layout::Linear(l) => l.bucket(v),
            Layout::LogLinear(l) => l.bucket(v),
        }
    }

    fn range(&self, b: u32) -> (i64, i64) {
        match self {
            Layout::Log2 => log2_range(i32::try_from(b).unwrap_or(i32::MAX).saturating_add(LOG2_LOWEST)),
            Layout::Linear(l) => l.range(b),
            Layout::LogLinear(l) => l.range(b),
        }
    }
}

/// The state of one key.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stat {
    Scalar(Moments),
    Hist(Hist),
    Sketch(Box<Sketch>),
}

impl Stat {
    /// Add `v`, `n` times.
    pub(crate) fn add(&mut self, func: &Func, v: i64, n: u64) {
        match (self, func) {
            // Only a standard deviation needs the squares (128-bit products, slow in Wasm).
            (Stat::Scalar(m), f) => m.add(v, n, matches!(f, Func::Stddev)),
            (Stat::Hist(h), Func::Hist(layout)) => h.add(layout.bucket(v), v, n),
            (Stat::Sketch(s), _) => s.add(v, n),
            (Stat::Hist(_), _) => {}
        }
    }

    /// Add `other`'s samples; both come from functions that [merge](Func::merges_with).
    pub(crate) fn merge(&mut self, other: &Stat) {
        match (self, other) {
            (Stat::Scalar(a), Stat::Scalar(b)) => a.merge(b),
            (Stat::Hist(a), Stat::Hist(b)) => a.merge(b),
            (Stat::Sketch(a), Stat::Sketch(b)) => a.merge(b),
            _ => {}
        }
    }

    /// Fold in a value as the host reports it (a kernel aggregation's snapshot).
    pub(crate) fn merge_value(&mut self, func: &Func, value: &AggValue) -> Result<(), String> {
        match (self, func, value) {
            (Stat::Scalar(m), Func::Count, AggValue::Scalar(n)) => m.count = m.count.saturating_add_signed(*n),
            (Stat::Scalar(m), Func::Sum | Func::Min | Func::Max, AggValue::Scalar(v)) => m.add(*v, 1, false),
            (Stat::Hist(h), Func::Hist(layout), AggValue::Histogram(hist)) => h.merge_histogram(layout, hist)?,
            (_, Func::Avg | Func::Stddev, AggValue::Scalar(_)) => {
                return Err(format!("{} values cannot be merged from their printed value", func.name()))
            }
            (_, Func::Percentiles(_), AggValue::Quantiles(_)) => {
                return Err("percentile estimates cannot be merged; merge the sketches (Agg::merge)".into())
            }
            (_, _, value) => return Err(format!("a {} does not fit a {} aggregation", shape(value), func.name())),
        }
        Ok(())
    }

    /// What entries sort by: the value of a scalar; the number of samples of a
    /// histogram (divided by `normal`, like its buckets) or of percentiles.
    pub(crate) fn rank(&self, func: &Func, normal: u64) -> i64 {
        match self {
            Stat::Scalar(m) => m.value(func, normal),
            Stat::Hist(h) => saturate(h.count / normal),
            Stat::Sketch(s) => saturate(s.count()),
        }
    }

    /// The value reported, scalars and histogram counts divided by `normal`.
    pub(crate) fn value(&self, func: &Func, normal: u64) -> AggValue {
        match (self, func) {
            (Stat::Scalar(m), _) => AggValue::Scalar(m.value(func, normal)),
            (Stat::Hist(h), Func::Hist(layout)) => AggValue::Histogram(h.histogram(layout, normal)),
            (Stat::Sketch(s), Func::Percentiles(points)) => AggValue::Quantiles(Quantiles {
                count: s.count(),
                sum: s.sum(),
                points: points.iter().map(|&q| Percentile { millionths: q, value: s.quantile(q) }).collect(),
            }),
            (Stat::Hist(h), _) => AggValue::Histogram(Histogram { buckets: Vec::new(), sum: h.sum }),
            (Stat::Sketch(s), _) => AggValue::Quantiles(Quantiles { count: s.count(), sum: s.sum(), points: vec![] }),
        }
    }
}

/// What an entry reported by the host sorts by (see [`Stat::rank`]).
pub(crate) fn rank_of(value: &AggValue) -> i64 {
    match value {
        AggValue::Scalar(v) => *v,
        AggValue::Histogram(h) => saturate(h.buckets.iter().fold(0u64, |n, b| n.saturating_add(b.count))),
        AggValue::Quantiles(q) => saturate(q.count),
    }
}

fn shape(value: &AggValue) -> &'static str {
    match value {
        AggValue::Scalar(_) => "scalar",
        AggValue::Histogram(_) => "histogram",
        AggValue::Quantiles(_) => "set of quantiles",
    }
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Count, sum, sum of squares, minimum and maximum: every scalar function's state, kept
/// the way DTrace keeps it (64-bit count and sum, 128-bit sum of squares; wrapping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Moments {
    count: u64,
    sum: i64,
    sumsq: u128,
    min: i64,
    max: i64,
}

impl Default for Moments {
    fn default() -> Self {
        Moments { count: 0, sum: 0, sumsq: 0, min: i64::MAX, max: i64::MIN }
    }
}

impl Moments {
    /// Add `v` `n` times; with `squares`, to the sum of squares too.
    #[inline]
    fn add(&mut self, v: i64, n: u64, squares: bool) {
        if n == 0 {
            return;
        }
        self.count = self.count.wrapping_add(n);
        self.sum = self.sum.wrapping_add(v.wrapping_mul(n as i64));
        if squares {
            let square = u128::from(v.unsigned_abs()) * u128::from(v.unsigned_abs());
            self.sumsq = self.sumsq.wrapping_add(if n == 1 { square } else { square.wrapping_mul(u128::from(n)) });
        }
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn merge(&mut self, o: &Moments) {
        self.count = self.count.wrapping_add(o.count);
        self.sum = self.sum.wrapping_add(o.sum);
        self.sumsq = self.sumsq.wrapping_add(o.sumsq);
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// The scalar `func` reports, divided by `normal` like DTrace's `normalize()`;
    /// 0 for a key without samples (its `min` and `max` too).
    fn value(&self, func: &Func, normal: u64) -> i64 {
        let divide = |v: i64| (i128::from(v) / i128::from(normal.max(1))) as i64;
        match func {
            _ if self.count == 0 => 0,
            Func::Count => saturate(self.count / normal.max(1)),
            Func::Sum => divide(self.sum),
            Func::Min => divide(self.min),
            Func::Max => divide(self.max),
            // dt_print_average: sum / normal / count, in integers.
            Func::Avg => (i128::from(self.sum) / i128::from(normal.max(1)) / i128::from(self.count)) as i64,
            Func::Stddev => self.stddev(normal),
            Func::Hist(_) | Func::Percentiles(_) => 0,
        }
    }

    /// DTrace's `stddev()`, as libdtrace prints it (`dt_stddev` in illumos-gate's
    /// usr/src/lib/libdtrace/common/dt_consume.c): the integer square root of
    /// `sumsq / normal / normal / count - (|sum / normal / count|)^2`, every division an
    /// integer one (unsigned 128-bit for the squares, signed 64-bit for the mean).
    /// Truncating the mean before squaring is DTrace's; it overstates the deviation of
    /// samples with a large mean and a small spread.
    fn stddev(&self, normal: u64) -> i64 {
        let normal = normal.max(1);
        let avg_of_squares = self.sumsq / u128::from(normal) / u128::from(normal) / u128::from(self.count);
        let avg = i128::from(self.sum) / i128::from(normal) / i128::from(self.count);
        let square_of_avg = avg.unsigned_abs() * avg.unsigned_abs();
        // Never negative for real samples (Cauchy-Schwarz); a wrapped sum could make it so.
        let diff = avg_of_squares.saturating_sub(square_of_avg);
        i64::try_from(diff.isqrt()).unwrap_or(i64::MAX)
    }
}

/// A histogram's buckets and the sum of its samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hist {
    bins: Bins<u32>,
    count: u64,
    sum: i64,
}

impl Hist {
    fn add(&mut self, bucket: u32, v: i64, n: u64) {
        self.bins.add(bucket, n);
        self.count = self.count.saturating_add(n);
        self.sum = self.sum.wrapping_add(v.wrapping_mul(n as i64));
    }

    fn merge(&mut self, o: &Hist) {
        self.bins.merge(&o.bins);
        self.count = self.count.saturating_add(o.count);
        self.sum = self.sum.wrapping_add(o.sum);
    }

    /// Add a reported histogram whose buckets are all buckets of `layout`.
    fn merge_histogram(&mut self, layout: &Layout, hist: &Histogram) -> Result<(), String> {
        let mut ours = Vec::with_capacity(hist.buckets.len());
        for b in hist.buckets.iter().filter(|b| b.count > 0) {
            let i = layout.bucket(b.low);
            if layout.range(i) != (b.low, b.high) {
                return Err(format!("bucket [{}, {}) is not one of this aggregation's", b.low, b.high));
            }
            ours.push((i, b.count));
        }
        for (i, n) in ours {
            self.bins.add(i, n);
            self.count = self.count.saturating_add(n);
        }
        self.sum = self.sum.wrapping_add(hist.sum);
        Ok(())
    }

    /// Every bucket from the lowest to the highest with a sample, empty ones included,
    /// counts and sum divided by `normal`.
    fn histogram(&self, layout: &Layout, normal: u64) -> Histogram {
        let normal = normal.max(1);
        let mut buckets = Vec::new();
        if let Some((low, high)) = self.bins.bounds() {
            let mut counts = self.bins.iter().peekable();
            for i in low..=high {
                let count = counts.next_if(|&(j, _)| j == i).map_or(0, |(_, n)| n);
                let (low, high) = layout.range(i);
                buckets.push(Bucket { low, high, count: count / normal });
            }
        }
        Histogram { buckets, sum: (i128::from(self.sum) / i128::from(normal)) as i64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(samples: &[i64]) -> Moments {
        let mut m = Moments::default();
        samples.iter().for_each(|&v| m.add(v, 1, true));
        m
    }

    /// DTrace's arithmetic, written out in the test independently of `Moments`.
    fn dtrace_stddev(samples: &[i64]) -> i64 {
        let n = samples.len() as i128;
        let sum: i128 = samples.iter().map(|&v| i128::from(v)).sum();
        let sumsq: i128 = samples.iter().map(|&v| i128::from(v) * i128::from(v)).sum();
        let mean = sum / n; // truncated toward zero, like C
        let var = (sumsq / n - mean * mean) as u128;
        // Integer square root by bisection: the largest r with r * r <= var.
        let (mut low, mut high) = (0u128, 1 << 64);
        while low < high {
            let mid = (low + high).div_ceil(2);
            match mid.checked_mul(mid) {
                Some(square) if square <= var => low = mid,
                _ => high = mid - 1,
            }
        }
        low as i64
    }

    #[test]
    fn stddev_is_dtraces_integer_formula() {
        let cases: [(&[i64], i64); 6] = [
            (&[2, 4, 4, 4, 5, 5, 7, 9], 2),
            (&[1, 2], 1),                    // the exact answer is 0.5: DTrace truncates
            (&[1_000_000, 1_000_001], 1000), // the mean is truncated before squaring
            (&[-5, 5], 5),
            (&[7], 0),
            (&[i64::MIN, i64::MAX], 9_223_372_036_854_775_807),
        ];
        for (samples, want) in cases {
            assert_eq!(moments(samples).value(&Func::Stddev, 1), want, "{samples:?}");
            assert_eq!(dtrace_stddev(samples), want, "{samples:?} (test's own arithmetic)");
        }
        assert_eq!(Moments::default().value(&Func::Stddev, 1), 0);
    }

    #[test]
    fn stddev_agrees_with_independent_arithmetic_on_random_samples() {
        let mut x = 88172645463325252u64;
        for round in 0..200 {
            let len = 1 + round % 37;
            let samples: Vec<i64> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x as i64) >> (3 + round % 58)
                })
                .collect();
            let got = moments(&samples).value(&Func::Stddev, 1);
            assert_eq!(got, dtrace_stddev(&samples), "{samples:?}");
            // When the mean is an integer, DTrace's answer is the floor of the exact
            // population deviation, up to the truncation of sumsq / n.
            let n = samples.len() as f64;
            let mean = samples.iter().map(|&v| v as f64).sum::<f64>() / n;
            let exact = (samples.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
            if mean.fract() == 0.0 && samples.iter().all(|v| v.unsigned_abs() < 1 << 40) {
                assert!((got as f64 - exact).abs() <= 1.0 + exact * 1e-12, "{got} vs {exact}: {samples:?}");
            }
        }
    }

    #[test]
    fn normalize_divides_like_dtrace() {
        let m = moments(&[10, 20, 30, 45]);
        assert_eq!(m.value(&Func::Count, 2), 2);
        assert_eq!(m.value(&Func::Sum, 10), 10);
        assert_eq!((m.value(&Func::Min, 10), m.value(&Func::Max, 10)), (1, 4));
        assert_eq!(m.value(&Func::Avg, 1), 26, "105 / 4, truncated");
        assert_eq!(m.value(&Func::Avg, 10), 2, "105 / 10 / 4");
        // sumsq 3425 / 10 / 10 / 4 = 8; mean 105 / 10 / 4 = 2; sqrt(8 - 4) = 2.
        assert_eq!(m.value(&Func::Stddev, 10), 2);
        assert_eq!(moments(&[-7, -8]).value(&Func::Avg, 1), -7, "truncated toward zero");
    }

    #[test]
    fn histograms_report_every_bucket_between_the_extremes() {
        let layout = Layout::Log2;
        let mut h = Hist::default();
        for v in [1, 5, 6, 40] {
            h.add(layout.bucket(v), v, 1);
        }
        let hist = h.histogram(&layout, 1);
        let rows: Vec<(i64, i64, u64)> = hist.buckets.iter().map(|b| (b.low, b.high, b.count)).collect();
        assert_eq!(rows, [(1, 2, 1), (2, 4, 0), (4, 8, 2), (8, 16, 0), (16, 32, 0), (32, 64, 1)]);
        assert_eq!(hist.sum, 52);
        assert!(Hist::default().histogram(&layout, 1).buckets.is_empty());
        assert_eq!(h.histogram(&layout, 2).buckets[2].count, 1, "normalized counts");
    }

    #[test]
    fn reported_histograms_merge_bucket_by_bucket_if_the_buckets_match() {
        let layout = Layout::Linear(Linear::new(0, 100, 10).unwrap());
        let mut h = Hist::default();
        h.add(layout.bucket(15), 15, 2);
        let theirs = Histogram {
            buckets: vec![
                Bucket { low: i64::MIN, high: 0, count: 1 },
                Bucket { low: 10, high: 20, count: 3 },
                Bucket { low: 50, high: 60, count: 0 },
            ],
            sum: -5 + 10 * 3,
        };
        h.merge_histogram(&layout, &theirs).unwrap();
        let rows: Vec<u64> = h.histogram(&layout, 1).buckets.iter().map(|b| b.count).collect();
        assert_eq!(rows, [1, 0, 5]);
        assert_eq!((h.count, h.sum), (6, 30 + 25));

        let odd = Histogram { buckets: vec![Bucket { low: 10, high: 15, count: 1 }], sum: 0 };
        assert!(h.merge_histogram(&layout, &odd).unwrap_err().contains("[10, 15)"));
        assert_eq!(h.count, 6, "nothing merged");
    }

    #[test]
    fn host_values_merge_as_their_function_says() {
        let mut count = Func::Count.empty();
        count.merge_value(&Func::Count, &AggValue::Scalar(5)).unwrap();
        count.merge_value(&Func::Count, &AggValue::Scalar(7)).unwrap();
        assert_eq!(count.value(&Func::Count, 1), AggValue::Scalar(12));
        let mut min = Func::Min.empty();
        for v in [5, -2, 9] {
            min.merge_value(&Func::Min, &AggValue::Scalar(v)).unwrap();
        }
        assert_eq!(min.value(&Func::Min, 1), AggValue::Scalar(-2));
        let mut avg = Func::Avg.empty();
        assert!(avg.merge_value(&Func::Avg, &AggValue::Scalar(1)).is_err());
        let hist = AggValue::Histogram(Histogram { buckets: vec![], sum: 0 });
        assert!(count.merge_value(&Func::Count, &hist).unwrap_err().contains("histogram"));
    }
}

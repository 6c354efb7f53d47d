//! Histogram buckets: the one definition that the SDK, the host and the kernel
//! collectors (in C) share.
//!
//! Three layouts, each DTrace's:
//!
//! - power-of-two buckets, `quantize` (bpftrace `hist`): [`log2_bucket`], [`log2_range`];
//! - linear buckets with an underflow and an overflow bucket, `lquantize` (bpftrace
//!   `lhist`): [`Linear`];
//! - log-linear buckets, `llquantize`: [`LogLinear`].
//!
//! A bucket holds the values `low <= v < high` of its range `(low, high)`. A range whose
//! `high` is `i64::MAX` includes it: that is the top bucket. Every `i64` falls in exactly
//! one bucket of a layout, and nothing here panics or overflows, whatever the input.
//!
//! ```
//! use wasmtap_abi::hist::{log2_bucket, log2_range, Linear};
//! assert_eq!(log2_bucket(5), 3);
//! assert_eq!(log2_range(3), (4, 8)); // DTrace's row "4" holds 4..=7
//! let lin = Linear::new(0, 100, 10).unwrap();
//! assert_eq!((lin.bucket(-1), lin.bucket(15), lin.bucket(100)), (0, 2, 11));
//! assert_eq!(lin.range(2), (10, 20));
//! ```

/// The lowest power-of-two bucket: `i64::MIN` alone.
pub const LOG2_LOWEST: i32 = -64;
/// The highest power-of-two bucket: `2^62..=i64::MAX`.
pub const LOG2_HIGHEST: i32 = 63;

/// The power-of-two bucket of `v`: 0 for 0; `1 + floor(log2 v)` for `v > 0` (1 → 1,
/// 2..=3 → 2, 4..=7 → 3, up to 63); `-(1 + floor(log2 |v|))` for `v < 0` (-1 → -1,
/// -3..=-2 → -2, down to -64 for `i64::MIN`).
pub const fn log2_bucket(v: i64) -> i32 {
    let bits = 64 - v.unsigned_abs().leading_zeros() as i32;
    if v < 0 {
        -bits
    } else {
        bits
    }
}

/// The values `[low, high)` of power-of-two bucket `b` (see [`log2_bucket`]): `(0, 1)`
/// for 0, `(2^(b-1), 2^b)` above it, `(-2^|b| + 1, -2^(|b|-1) + 1)` below it. Bucket 63
/// ends at `i64::MAX` inclusive; bucket -64 holds `i64::MIN` alone. `b` outside
/// [`LOG2_LOWEST`]..=[`LOG2_HIGHEST`] is taken as the nearest of the two.
pub const fn log2_range(b: i32) -> (i64, i64) {
    let b = if b < LOG2_LOWEST {
        LOG2_LOWEST
    } else if b > LOG2_HIGHEST {
        LOG2_HIGHEST
    } else {
        b
    };
    match b {
        0 => (0, 1),
        LOG2_HIGHEST => (1 << 62, i64::MAX),
        1.. => (1 << (b - 1), 1 << b),
        LOG2_LOWEST => (i64::MIN, i64::MIN + 1),
        // -63..=-1: |v| in [2^(k-1), 2^k), so v in (-2^k, -2^(k-1)]; -2^63 + 1 still fits.
        _ => {
            let k = -b;
            ((-(1i128 << k) + 1) as i64, -(1i64 << (k - 1)) + 1)
        }
    }
}

/// Linear buckets, DTrace's `lquantize(v, min, max, step)`: an underflow bucket 0 for
/// `v < min`, buckets `1..=levels` of width `step` from `min`, and an overflow bucket
/// `levels + 1` from `min + levels * step` up. `levels = (max - min) / step`, rounded
/// down like DTrace does, so the overflow bucket may start below `max`.
///
/// Build it with [`Linear::new`], which checks DTrace's rules; on other field values
/// the methods do not panic, but their buckets mean nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Linear {
    pub min: i64,
    pub max: i64,
    pub step: i64,
}

impl Linear {
    /// The most levels DTrace allows (a 16-bit quantity).
    pub const MAX_LEVELS: u32 = 65535;

    /// Buckets of width `step` from `min` to `max`. Like DTrace: `step > 0`, `max > min`,
    /// and `(max - min) / step` between 1 and [`Linear::MAX_LEVELS`].
    pub fn new(min: i64, max: i64, step: i64) -> Result<Linear, &'static str> {
        if step <= 0 {
            return Err("step must be positive");
        }
        if max <= min {
            return Err("max must be greater than min");
        }
        match (i128::from(max) - i128::from(min)) / i128::from(step) {
            0 => Err("step too large: there must be at least one level ((max - min) / step >= 1)"),
            n if n > i128::from(Linear::MAX_LEVELS) => Err("step too small: at most 65535 levels ((max - min) / step)"),
            _ => Ok(Linear { min, max, step }),
        }
    }

    /// Buckets between the underflow and the overflow bucket.
    pub fn levels(&self) -> u32 {
        let n = (i128::from(self.max) - i128::from(self.min)) / self.step_i128();
        n.clamp(1, i128::from(Linear::MAX_LEVELS)) as u32
    }

    /// Buckets in all, underflow and overflow included: `levels + 2`.
    pub fn buckets(&self) -> u32 {
        self.levels() + 2
    }

    /// The bucket of `v`: 0 below `min`, `levels + 1` from `min + levels * step` up.
    pub fn bucket(&self, v: i64) -> u32 {
        if v < self.min {
            return 0;
        }
        let k = (i128::from(v) - i128::from(self.min)) / self.step_i128();
        let levels = self.levels();
        if k < i128::from(levels) {
            k as u32 + 1
        } else {
            levels + 1
        }
    }

    /// The values `[low, high)` of bucket `b`: `(i64::MIN, min)` for the underflow bucket,
    /// `(min + levels * step, i64::MAX)` (inclusive) for the overflow bucket and any `b`
    /// past it.
    pub fn range(&self, b: u32) -> (i64, i64) {
        let levels = self.levels();
        let at = |k: u32| saturate(i128::from(self.min) + i128::from(k) * self.step_i128());
        match b {
            0 => (i64::MIN, self.min),
            b if b > levels => (at(levels), i64::MAX),
            b => (at(b - 1), at(b)),
        }
    }

    fn step_i128(&self) -> i128 {
        i128::from(self.step.max(1))
    }
}

/// Log-linear buckets, DTrace's `llquantize(v, factor, low, high, steps)`: an underflow
/// bucket 0 for `v < factor^low`; then for each order of magnitude `m` in `low..=high`,
/// linear buckets over `[factor^m, factor^(m+1))`, `steps` of them per magnitude (fewer
/// when `factor^(m+1) < steps`: then each holds one integer), minus those that would
/// overlap the magnitude below; and an overflow bucket from `factor^(high+1)` up.
///
/// `LogLinear { factor: 10, low: 0, high: 2, steps: 10 }` has the buckets `< 1`,
/// `1, 2, .., 9`, `10, 20, .., 90`, `100, 200, .., 900` and `>= 1000` (29 in all), like
/// DTrace prints them.
///
/// Build it with [`LogLinear::new`], which checks DTrace's rules; on other field values
/// the methods do not panic, but their buckets mean nothing.
//
// Checked against illumos-gate (github.com/illumos/illumos-gate):
// `dtrace_aggregate_llquantize_bucket` in usr/src/uts/common/dtrace/dtrace.c (how a value
// finds its bucket), `dt_print_llquantize` in usr/src/lib/libdtrace/common/dt_consume.c
// (the value printed on each row: a second, independent walk that the tests replay), and
// the `llquantize()` argument checks of `dt_compile_agg` in
// usr/src/lib/libdtrace/common/dt_cc.c. Re-implemented here, not copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogLinear {
    pub factor: u16,
    pub low: u16,
    pub high: u16,
    pub steps: u16,
}

impl LogLinear {
    /// Log-linear buckets, with DTrace's rules: `factor >= 2`; `high > low`;
    /// `steps >= factor`; `factor` divides `steps` and `steps` divides a power of
    /// `factor`; `factor^(high + 2)` fits in 64 bits (so `factor^(high + 1)`, where the
    /// overflow bucket starts, fits in an `i64`).
    pub fn new(factor: u16, low: u16, high: u16, steps: u16) -> Result<LogLinear, &'static str> {
        if factor < 2 {
            return Err("factor must be 2 or more");
        }
        if low >= high {
            return Err("high magnitude must be greater than low magnitude");
        }
        if steps < factor {
            return Err("factor must be less than or equal to the steps per magnitude");
        }
        let mut power = u32::from(factor);
        while power < u32::from(steps) {
            power *= u32::from(factor);
        }
        if !steps.is_multiple_of(factor) || !power.is_multiple_of(u32::from(steps)) {
            return Err("factor must evenly divide the steps per magnitude, and the steps a power of factor");
        }
        let mut top = 1u64;
        for _ in 0..=u32::from(high) + 1 {
            top = top.checked_mul(u64::from(factor)).ok_or("factor raised to high magnitude + 2 overflows 64 bits")?;
        }
        Ok(LogLinear { factor, low, high, steps })
    }

    /// Buckets in all, underflow and overflow included.
    pub fn buckets(&self) -> u32 {
        let inner: u32 = self.magnitudes().map(|m| m.buckets).sum();
        inner + 2
    }

    /// The bucket of `v`: 0 below `factor^low`, [`buckets`](Self::buckets)` - 1` from
    /// `factor^(high + 1)` up.
    pub fn bucket(&self, v: i64) -> u32 {
        let v = i128::from(v);
        if v < self.power(self.low) {
            return 0;
        }
        let mut base = 1;
        for m in self.magnitudes() {
            if v < m.end {
                return base + ((v - m.start) / m.width) as u32;
            }
            base += m.buckets;
        }
        base
    }

    /// The values `[low, high)` of bucket `b`: `(i64::MIN, factor^low)` for the underflow
    /// bucket, `(factor^(high + 1), i64::MAX)` (inclusive) for the overflow bucket and any
    /// `b` past it.
    pub fn range(&self, b: u32) -> (i64, i64) {
        if b == 0 {
            return (i64::MIN, saturate(self.power(self.low)));
        }
        let mut base = 1;
        let mut top = self.power(self.low);
        for m in self.magnitudes() {
            if b < base + m.buckets {
                let low = m.start + i128::from(b - base) * m.width;
                return (saturate(low), saturate(low + m.width));
            }
            base += m.buckets;
            top = m.end;
        }
        (saturate(top), i64::MAX)
    }

    /// `factor^n`, saturating far beyond any valid bucket boundary.
    fn power(&self, n: u16) -> i128 {
        (0..n).fold(1i128, |p, _| p.saturating_mul(i128::from(self.factor)).min(1 << 100))
    }

    /// The orders of magnitude `low..=high`, lowest first.
    fn magnitudes(&self) -> impl Iterator<Item = Magnitude> {
        let factor = i128::from(self.factor.max(2));
        let steps = i128::from(self.steps.max(1));
        let mut start = self.power(self.low);
        (self.low..=self.high).map(move |_| {
            let end = (start * factor).min(1 << 100);
            // `steps` buckets over [0, end), at most one per integer; those below `start`
            // belong to the magnitudes below.
            let per = steps.min(end);
            let width = (end / per).max(1);
            let m = Magnitude { start, end, width, buckets: ((end - start) / width) as u32 };
            start = end;
            m
        })
    }
}

/// One order of magnitude of a [`LogLinear`] layout: buckets of `width` over `[start, end)`.
struct Magnitude {
    start: i128,
    end: i128,
    width: i128,
    buckets: u32,
}

fn saturate(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// Edge values and a deterministic pseudo-random sweep over all magnitudes.
    fn samples() -> impl Iterator<Item = i64> {
        let edges = (0..64).flat_map(|k: u32| {
            let p = 1i64.checked_shl(k).unwrap_or(i64::MIN);
            [p, p.wrapping_sub(1), p.wrapping_add(1), p.wrapping_neg(), p.wrapping_neg().wrapping_add(1)]
        });
        let fixed = [0, 1, -1, 2, -2, 3, -3, i64::MAX, i64::MIN, i64::MIN + 1, i64::MAX - 1];
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let random = (0..20_000).map(move |i| {
            // xorshift64*, then a random shift so that small magnitudes are covered too.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            (r as i64) >> (i % 64)
        });
        edges.chain(fixed).chain(random)
    }

    fn contains((low, high): (i64, i64), v: i64) -> bool {
        low <= v && (v < high || high == i64::MAX)
    }

    #[test]
    fn log2_buckets_are_dtrace_quantize_rows() {
        let cases = [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (7, 3),
            (8, 4),
            (-1, -1),
            (-2, -2),
            (-3, -2),
            (-4, -3),
            (-7, -3),
            (-8, -4),
            (i64::MAX, 63),
            (1 << 62, 63),
            ((1 << 62) - 1, 62),
            (i64::MIN, -64),
            (i64::MIN + 1, -63),
        ];
        for (v, b) in cases {
            assert_eq!(log2_bucket(v), b, "log2_bucket({v})");
        }
        assert_eq!(log2_range(0), (0, 1));
        assert_eq!(log2_range(3), (4, 8), "row 4 holds 4..=7");
        assert_eq!(log2_range(-3), (-7, -3), "row -4 holds -7..=-4");
        assert_eq!(log2_range(63), (1 << 62, i64::MAX));
        assert_eq!(log2_range(-63), (i64::MIN + 1, -(1 << 62) + 1));
        assert_eq!(log2_range(-64), (i64::MIN, i64::MIN + 1));
        assert_eq!((log2_range(500), log2_range(-500)), (log2_range(63), log2_range(-64)));
    }

    #[test]
    fn log2_ranges_tile_the_i64_line() {
        for b in LOG2_LOWEST..LOG2_HIGHEST {
            assert_eq!(log2_range(b).1, log2_range(b + 1).0, "bucket {b} ends where {} starts", b + 1);
        }
        for v in samples() {
            let b = log2_bucket(v);
            assert!((LOG2_LOWEST..=LOG2_HIGHEST).contains(&b));
            assert!(contains(log2_range(b), v), "{v} in bucket {b} {:?}", log2_range(b));
        }
    }

    #[test]
    fn linear_follows_lquantize() {
        let lin = Linear::new(0, 100, 10).unwrap();
        assert_eq!((lin.levels(), lin.buckets()), (10, 12));
        let cases = [(i64::MIN, 0), (-1, 0), (0, 1), (9, 1), (10, 2), (99, 10), (100, 11), (i64::MAX, 11)];
        for (v, b) in cases {
            assert_eq!(lin.bucket(v), b, "bucket({v})");
        }
        assert_eq!(lin.range(0), (i64::MIN, 0));
        assert_eq!(lin.range(1), (0, 10));
        assert_eq!(lin.range(10), (90, 100));
        assert_eq!(lin.range(11), (100, i64::MAX));
        assert_eq!(lin.range(99), lin.range(11));

        // (max - min) / step rounds down, as in DTrace: the overflow bucket starts at 20.
        let odd = Linear::new(-5, 20, 10).unwrap();
        assert_eq!((odd.levels(), odd.range(3), odd.bucket(19)), (2, (15, i64::MAX), 3));
    }

    #[test]
    fn linear_rejects_what_dtrace_rejects() {
        assert!(Linear::new(0, 10, 0).is_err());
        assert!(Linear::new(0, 10, -1).is_err());
        assert!(Linear::new(10, 10, 1).is_err());
        assert!(Linear::new(10, 0, 1).is_err());
        assert!(Linear::new(0, 10, 11).unwrap_err().contains("too large"));
        assert!(Linear::new(0, 65536, 1).unwrap_err().contains("too small"));
        assert!(Linear::new(0, 65535, 1).is_ok());
        assert!(Linear::new(i64::MIN, i64::MAX, i64::MAX).is_ok());
    }

    #[test]
    fn linear_ranges_tile_the_i64_line_even_at_the_extremes() {
        let layouts = [
            Linear::new(0, 100, 10).unwrap(),
            Linear::new(-1000, 1000, 7).unwrap(),
            Linear::new(i64::MIN, i64::MAX, i64::MAX).unwrap(),
            Linear::new(i64::MAX - 10, i64::MAX, 3).unwrap(),
            Linear::new(i64::MIN, i64::MIN + 65535, 1).unwrap(),
        ];
        for lin in layouts {
            for b in 0..lin.buckets() - 1 {
                assert_eq!(lin.range(b).1, lin.range(b + 1).0, "{lin:?} bucket {b}");
            }
            for v in samples() {
                let b = lin.bucket(v);
                assert!(b < lin.buckets());
                assert!(contains(lin.range(b), v), "{lin:?}: {v} in bucket {b} {:?}", lin.range(b));
            }
        }
        let bad = Linear { min: 5, max: 0, step: 0 };
        let _ = (bad.bucket(i64::MIN), bad.bucket(i64::MAX), bad.range(u32::MAX), bad.levels());
    }

    #[test]
    fn log_linear_matches_dtraces_documented_rows() {
        let ll = LogLinear::new(10, 0, 2, 10).unwrap();
        assert_eq!(ll.buckets(), 29);
        let lows: Vec<i64> = (0..ll.buckets()).map(|b| ll.range(b).0).collect();
        let mut want = vec![i64::MIN];
        want.extend((1..10).chain((10..100).step_by(10)).chain((100..1000).step_by(100)));
        want.push(1000);
        assert_eq!(lows, want);
        let cases = [(-5, 0), (0, 0), (1, 1), (9, 9), (10, 10), (19, 10), (20, 11), (99, 18), (100, 19)];
        for (v, b) in cases.into_iter().chain([(999, 27), (1000, 28), (i64::MAX, 28)]) {
            assert_eq!(ll.bucket(v), b, "bucket({v})");
        }
        assert_eq!(ll.range(0), (i64::MIN, 1));
        assert_eq!(ll.range(10), (10, 20));
        assert_eq!(ll.range(28), (1000, i64::MAX));

        // More steps than the first magnitudes hold: one bucket per integer there.
        let fine = LogLinear::new(10, 0, 3, 100).unwrap();
        let lows: Vec<i64> = (1..fine.buckets()).map(|b| fine.range(b).0).collect();
        let mut want: Vec<i64> = (1..100).collect();
        want.extend((100..1000).step_by(10).chain((1000..10_000).step_by(100)));
        want.push(10_000);
        assert_eq!(lows, want);
    }

    /// DTrace's printer labels rows by a walk of its own (`dt_print_llquantize`): from
    /// `factor^low`, add `next / steps` (at least 1, `next` the next power) until the
    /// next power is reached, for each magnitude `low..=high`; then `>= factor^(high+1)`.
    fn printed_rows(factor: i64, low: u16, high: u16, steps: i64) -> Vec<i64> {
        let mut value = factor.pow(u32::from(low));
        let mut rows = vec![value]; // the underflow row reads `< value`
        let mut next = value * factor;
        let mut order = low;
        while order <= high {
            rows.push(value);
            value += if next > steps { next / steps } else { 1 };
            if value == next {
                next = value.saturating_mul(factor);
                order += 1;
            }
        }
        rows.push(value);
        rows
    }

    #[test]
    fn log_linear_buckets_agree_with_dtraces_printed_rows() {
        for (f, lo, hi, st) in
            [(10, 0, 2, 10), (10, 1, 4, 20), (2, 0, 10, 4), (4, 2, 6, 16), (4, 0, 3, 8), (3, 0, 5, 9), (10, 0, 3, 100)]
        {
            let ll = LogLinear::new(f, lo, hi, st).unwrap();
            let rows = printed_rows(i64::from(f), lo, hi, i64::from(st));
            assert_eq!(rows.len() as u32, ll.buckets(), "{ll:?}");
            assert_eq!(ll.range(0).1, rows[0], "{ll:?} underflow");
            for b in 1..ll.buckets() {
                assert_eq!(ll.range(b).0, rows[b as usize], "{ll:?} bucket {b}");
            }
        }
    }

    #[test]
    fn log_linear_ranges_tile_the_i64_line() {
        let layouts = [
            LogLinear::new(10, 0, 2, 10).unwrap(),
            LogLinear::new(2, 0, 61, 2).unwrap(),
            LogLinear::new(10, 3, 17, 100).unwrap(),
            LogLinear::new(2, 5, 30, 64).unwrap(),
            LogLinear::new(65535, 0, 2, 65535).unwrap(),
        ];
        for ll in layouts {
            for b in 0..ll.buckets() - 1 {
                assert_eq!(ll.range(b).1, ll.range(b + 1).0, "{ll:?} bucket {b}");
            }
            assert_eq!(ll.range(ll.buckets() - 1).1, i64::MAX);
            for v in samples() {
                let b = ll.bucket(v);
                assert!(b < ll.buckets() && contains(ll.range(b), v), "{ll:?}: {v} in {b} {:?}", ll.range(b));
            }
        }
        let bad = LogLinear { factor: 0, low: 9, high: 1, steps: 0 };
        let _ = (bad.bucket(i64::MAX), bad.range(u32::MAX), bad.buckets());
        let big = LogLinear { factor: 65535, low: 65535, high: 65535, steps: 1 };
        let _ = (big.bucket(i64::MAX), big.range(3), big.buckets());
    }

    #[test]
    fn log_linear_rejects_what_dtrace_rejects() {
        assert!(LogLinear::new(1, 0, 2, 10).unwrap_err().contains("factor"));
        assert!(LogLinear::new(10, 2, 2, 10).unwrap_err().contains("greater"));
        assert!(LogLinear::new(10, 0, 2, 5).unwrap_err().contains("less than or equal"));
        assert!(LogLinear::new(10, 0, 2, 15).unwrap_err().contains("evenly"));
        assert!(LogLinear::new(4, 0, 2, 12).unwrap_err().contains("evenly"), "12 divides no power of 4");
        assert!(LogLinear::new(4, 0, 2, 8).is_ok(), "8 divides 16");
        assert!(LogLinear::new(10, 0, 17, 10).is_ok(), "10^19 fits in 64 bits");
        assert!(LogLinear::new(10, 0, 18, 10).unwrap_err().contains("overflows"));
        assert!(LogLinear::new(2, 0, 62, 2).unwrap_err().contains("overflows"));
    }
}

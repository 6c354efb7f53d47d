//! A mergeable percentile sketch with a relative error bound, after DDSketch (Masson,
//! Rim, Lee: "DDSketch: a fast and fully-mergeable quantile sketch with relative-error
//! guarantees", VLDB 2019).
//!
//! A sample `v > 0` lands in bin `i = ceil(log_γ v)`, which holds `(γ^(i-1), γ^i]`;
//! the bin answers with `2γ^i / (γ + 1)`, within `α = (γ - 1) / (γ + 1)` of everything
//! in it. Negative samples go to a second set of bins by magnitude, zeros to a counter.
//! A quantile walks the bins in value order to the bin holding the sample of the asked
//! rank, so its answer is within `α` of that exact sample, whatever the distribution.
//!
//! The bins are built for `α = 0.5 %`; rounding the answer to an integer costs at most
//! another 0.5, which is within 0.5 % of any value from 100 up, and below 100 a bin is
//! narrower than 1 and the rounded answer exact. Answers are also clamped to the exact
//! minimum and maximum. Hence the promise: within 1 % of the exact order statistic.

use super::bins::Bins;

/// `γ = (1 + α) / (1 - α)` for the bins' `α = 0.005`.
const GAMMA: f64 = 1.010_050_251_256_281_2;
/// `ln γ`.
const LN_GAMMA: f64 = 0.010_000_083_334_583_179;
/// Bins kept per sign. 2048 bins of `γ` span a factor `γ^2048 ≈ 7.8e8`: nine decades
/// (1 ns to 0.78 s, 1 µs to 13 min) before the lowest bins are folded together.
pub(crate) const MAX_BINS: i32 = 2048;

/// Samples, their exact count, sum (wrapping), minimum and maximum, and the bins.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sketch {
    positive: Bins<i32>,
    /// Negative samples by magnitude.
    negative: Bins<i32>,
    zeros: u64,
    count: u64,
    sum: i64,
    min: i64,
    max: i64,
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch {
            positive: Bins::default(),
            negative: Bins::default(),
            zeros: 0,
            count: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
        }
    }
}

impl Sketch {
    /// Add `v`, `n` times.
    pub(crate) fn add(&mut self, v: i64, n: u64) {
        if n == 0 {
            return;
        }
        self.count = self.count.saturating_add(n);
        self.sum = self.sum.wrapping_add(v.wrapping_mul(n as i64));
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        match v {
            0 => self.zeros = self.zeros.saturating_add(n),
            1.. => add_capped(&mut self.positive, bin(v.unsigned_abs()), n),
            _ => add_capped(&mut self.negative, bin(v.unsigned_abs()), n),
        }
    }

    /// Add every sample of `other`. The result is the sketch of both sets of samples
    /// (folding aside, the same as adding them all to one sketch).
    pub(crate) fn merge(&mut self, other: &Sketch) {
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.wrapping_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.zeros = self.zeros.saturating_add(other.zeros);
        for (mine, theirs) in [(&mut self.positive, &other.positive), (&mut self.negative, &other.negative)] {
            mine.merge(theirs);
            if let Some((_, high)) = mine.bounds() {
                mine.fold_below(high - MAX_BINS + 1);
            }
        }
    }

    /// Number of samples.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the samples, wrapping at the `i64` limits.
    pub(crate) fn sum(&self) -> i64 {
        self.sum
    }

    /// The estimate of quantile `millionths / 10^6`: of the sample of rank
    /// `ceil(q * count)` (at least 1) in ascending order, so p0 is the minimum and p100
    /// the maximum (both exact). 0 without samples.
    pub(crate) fn quantile(&self, millionths: u32) -> i64 {
        if self.count == 0 {
            return 0;
        }
        let q = u128::from(millionths.min(1_000_000));
        let rank = (u128::from(self.count) * q).div_ceil(1_000_000) as u64;
        let rank = rank.clamp(1, self.count);
        if rank == 1 {
            return self.min;
        }
        if rank == self.count {
            return self.max;
        }
        let mut seen = 0u64;
        let mut reached = |n: u64| {
            seen = seen.saturating_add(n);
            seen >= rank
        };
        let estimate = 'walk: {
            for (i, n) in self.negative.iter().rev() {
                if reached(n) {
                    break 'walk -representative(i);
                }
            }
            if reached(self.zeros) {
                break 'walk 0;
            }
            for (i, n) in self.positive.iter() {
                if reached(n) {
                    break 'walk representative(i);
                }
            }
            self.max
        };
        estimate.clamp(self.min, self.max)
    }
}

/// The bin of magnitude `m >= 1`: `ceil(log_γ m)`, from 0 (for 1) to 4367 (for 2^63).
fn bin(m: u64) -> i32 {
    ((m as f64).ln() / LN_GAMMA).ceil() as i32
}

/// The value bin `i` answers with, `2γ^i / (γ + 1)`, rounded (and saturated) to an integer.
fn representative(i: i32) -> i64 {
    (2.0 * (f64::from(i) * LN_GAMMA).exp() / (GAMMA + 1.0)).round() as i64
}

/// Count `n` in bin `i`, keeping the bins within [`MAX_BINS`] of the highest: lower
/// ones are folded into the lowest bin kept, so only the smallest magnitudes lose
/// accuracy (they read as that bin's value).
fn add_capped(bins: &mut Bins<i32>, i: i32, n: u64) {
    let i = match bins.bounds() {
        Some((low, _)) if i - low >= MAX_BINS => {
            bins.fold_below(i - MAX_BINS + 1);
            i
        }
        Some((_, high)) if high - i >= MAX_BINS => high - MAX_BINS + 1,
        _ => i,
    };
    bins.add(i, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64: a small deterministic generator for test data.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in (0, 1].
        fn unit(&mut self) -> f64 {
            ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
        }

        /// Standard normal (Box-Muller).
        fn normal(&mut self) -> f64 {
            (-2.0 * self.unit().ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
        }
    }

    const QUANTILES: [u32; 6] = [500_000, 900_000, 990_000, 999_000, 0, 1_000_000];

    /// The exact order statistic the sketch promises to be within 1 % of.
    fn exact(sorted: &[i64], millionths: u32) -> i64 {
        let rank = (sorted.len() as u128 * u128::from(millionths)).div_ceil(1_000_000) as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// The worst relative error over `QUANTILES`, checking the 1 % bound on each.
    fn worst_error(name: &str, sketch: &Sketch, sorted: &[i64]) -> f64 {
        let mut worst = 0f64;
        for q in QUANTILES {
            let (got, want) = (sketch.quantile(q), exact(sorted, q));
            let err = (got - want).unsigned_abs() as f64;
            assert!(err <= 0.01 * want.unsigned_abs() as f64, "{name} q={q}: {got} vs exact {want}");
            if want != 0 {
                worst = worst.max(err / want.unsigned_abs() as f64);
            }
        }
        worst
    }

    fn check_distribution(name: &str, mut draw: impl FnMut(&mut Rng) -> i64) {
        let mut rng = Rng(0x5eed ^ name.len() as u64);
        let samples: Vec<i64> = (0..1_000_000).map(|_| draw(&mut rng)).collect();
        let (mut whole, mut first, mut second) = (Sketch::default(), Sketch::default(), Sketch::default());
        for (k, &v) in samples.iter().enumerate() {
            whole.add(v, 1);
            if k % 3 == 0 { &mut first } else { &mut second }.add(v, 1);
        }
        first.merge(&second);
        assert_eq!(first, whole, "{name}: merging two sketches is sketching the union");
        let mut sorted = samples;
        sorted.sort_unstable();
        let worst = worst_error(name, &whole, &sorted);
        assert_eq!((whole.count(), whole.sum()), (1_000_000, sorted.iter().sum::<i64>()));
        println!("{name}: worst relative error {:.4} %", worst * 100.0);
    }

    #[test]
    fn percentiles_of_a_uniform_distribution_are_within_one_percent() {
        check_distribution("uniform", |r| (r.unit() * 1e9) as i64);
    }

    #[test]
    fn percentiles_of_an_exponential_distribution_are_within_one_percent() {
        check_distribution("exponential", |r| (-r.unit().ln() * 50_000.0) as i64);
    }

    #[test]
    fn percentiles_of_a_log_normal_distribution_are_within_one_percent() {
        check_distribution("log-normal", |r| (10.0 + 2.0 * r.normal()).exp() as i64);
    }

    #[test]
    fn percentiles_of_a_pareto_distribution_are_within_one_percent() {
        check_distribution("pareto", |r| (1000.0 / r.unit().powf(1.0 / 1.5)) as i64);
    }

    #[test]
    fn negative_values_and_zeros_are_ranked_in_value_order() {
        let mut rng = Rng(7);
        let samples: Vec<i64> = (0..100_000)
            .map(|k| match k % 4 {
                0 => 0,
                _ => (rng.normal() * 1e6) as i64,
            })
            .collect();
        let mut sketch = Sketch::default();
        samples.iter().for_each(|&v| sketch.add(v, 1));
        let mut sorted = samples;
        sorted.sort_unstable();
        worst_error("mixed signs", &sketch, &sorted);
        for q in [100_000, 250_000, 400_000, 600_000, 750_000] {
            let (got, want) = (sketch.quantile(q), exact(&sorted, q));
            assert!((got - want).abs() as f64 <= 0.01 * want.abs() as f64, "q={q}: {got} vs {want}");
        }
    }

    #[test]
    fn small_integers_are_exact() {
        let mut sketch = Sketch::default();
        for v in 1..=99 {
            sketch.add(v, 1);
        }
        for v in 1..=99u32 {
            assert_eq!(sketch.quantile(v * 1_000_000 / 99), i64::from(v));
        }
        for v in [-1, -2, -50, -99, 1, 2, 50, 99] {
            let mut one = Sketch::default();
            one.add(v, 3);
            assert_eq!((one.quantile(0), one.quantile(500_000), one.quantile(1_000_000)), (v, v, v));
        }
    }

    #[test]
    fn extremes_do_not_overflow() {
        let mut sketch = Sketch::default();
        for v in [i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1, 0] {
            sketch.add(v, u64::MAX);
        }
        assert_eq!((sketch.quantile(0), sketch.quantile(1_000_000)), (i64::MIN, i64::MAX));
        assert_eq!(sketch.count(), u64::MAX);
        let p50 = sketch.quantile(500_000);
        assert!(p50 == 0 || p50.unsigned_abs() > 1 << 62, "{p50}");
        assert_eq!(Sketch::default().quantile(500_000), 0);
    }

    #[test]
    fn bins_beyond_the_cap_fold_into_the_lowest_kept() {
        let mut sketch = Sketch::default();
        sketch.add(1, 10);
        sketch.add(1_000_000_000_000, 1);
        let span = sketch.positive.bounds().map(|(lo, hi)| hi - lo);
        assert_eq!(span, Some(MAX_BINS - 1), "the bins span at most MAX_BINS");
        // The small samples now read as the lowest kept bin, about 1e12 / 7.8e8; the
        // large one is still exact, and the minimum is still exact.
        let p50 = sketch.quantile(500_000);
        assert!((1200..1400).contains(&p50), "{p50}");
        assert_eq!((sketch.quantile(0), sketch.quantile(1_000_000)), (1, 1_000_000_000_000));

        let mut low = Sketch::default();
        low.add(1_000_000_000_000, 1);
        low.add(1, 10);
        assert_eq!(low, sketch, "the order of arrival does not matter");
        let mut merged = Sketch::default();
        merged.add(1, 10);
        let mut high = Sketch::default();
        high.add(1_000_000_000_000, 1);
        merged.merge(&high);
        assert_eq!(merged, sketch, "nor does merging");
    }

    #[test]
    fn the_constants_are_what_they_say() {
        let gamma = (1.0 + 0.005) / (1.0 - 0.005);
        assert!((GAMMA - gamma).abs() < 1e-15 && (LN_GAMMA - f64::ln(gamma)).abs() < 1e-15);
        assert_eq!((bin(1), bin(2), bin(1 << 63)), (0, 70, 4367));
        assert_eq!(representative(0), 1);
        assert!((f64::from(MAX_BINS) * LN_GAMMA).exp() > 7.8e8);
    }
}

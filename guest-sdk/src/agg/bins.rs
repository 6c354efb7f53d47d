//! Sparse counters over ordered bucket indexes: the storage of histograms and of the
//! percentile sketch. Most keys touch few buckets, so a sorted vector beats a dense
//! array (an `lquantize` has up to 65537 buckets) and a hash map (no order).

/// Counts by index, sorted by index; no count is zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bins<I> {
    bins: Vec<(I, u64)>,
}

impl<I> Default for Bins<I> {
    fn default() -> Self {
        Bins { bins: Vec::new() }
    }
}

impl<I: Ord + Copy> Bins<I> {
    /// Add `n` to bin `i` (saturating).
    pub(crate) fn add(&mut self, i: I, n: u64) {
        if n == 0 {
            return;
        }
        match self.bins.binary_search_by(|b| b.0.cmp(&i)) {
            Ok(k) => self.bins[k].1 = self.bins[k].1.saturating_add(n),
            Err(k) => self.bins.insert(k, (i, n)),
        }
    }

    /// Add every bin of `other`, in one pass over both.
    pub(crate) fn merge(&mut self, other: &Bins<I>) {
        if other.bins.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.bins.len() + other.bins.len());
        let (mut a, mut b) = (self.bins.iter().copied().peekable(), other.bins.iter().copied().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 == y.0 => (x.0, x.1.saturating_add(y.1)),
                (Some(x), Some(y)) if x.0 < y.0 => *x,
                (Some(_), Some(y)) | (None, Some(y)) => *y,
                (Some(x), None) => *x,
                (None, None) => break,
            };
            if a.peek().is_some_and(|x| x.0 == next.0) {
                a.next();
            }
            if b.peek().is_some_and(|y| y.0 == next.0) {
                b.next();
            }
            out.push(next);
        }
        self.bins = out;
    }

    /// Move the counts of every bin below `floor` into bin `floor`.
    pub(crate) fn fold_below(&mut self, floor: I) {
        let k = self.bins.partition_point(|b| b.0 < floor);
        if k > 0 {
            let folded = self.bins.drain(..k).fold(0u64, |sum, b| sum.saturating_add(b.1));
            self.add(floor, folded);
        }
    }

    /// The lowest and the highest index with a count.
    pub(crate) fn bounds(&self) -> Option<(I, I)> {
        Some((self.bins.first()?.0, self.bins.last()?.0))
    }

    /// `(index, count)`, lowest index first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (I, u64)> + '_ {
        self.bins.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bins(pairs: &[(i32, u64)]) -> Bins<i32> {
        let mut b = Bins::default();
        for &(i, n) in pairs {
            b.add(i, n);
        }
        b
    }

    #[test]
    fn bins_stay_sorted_and_sparse() {
        let b = bins(&[(5, 1), (-3, 2), (5, 4), (0, 0), (9, u64::MAX), (9, 1)]);
        assert_eq!(b.iter().collect::<Vec<_>>(), [(-3, 2), (5, 5), (9, u64::MAX)]);
        assert_eq!(b.bounds(), Some((-3, 9)));
        assert_eq!(Bins::<i32>::default().bounds(), None);
    }

    #[test]
    fn merging_adds_bin_by_bin() {
        let mut a = bins(&[(1, 1), (3, 3), (7, 7)]);
        a.merge(&bins(&[(0, 10), (3, 30), (8, 80)]));
        assert_eq!(a.iter().collect::<Vec<_>>(), [(0, 10), (1, 1), (3, 33), (7, 7), (8, 80)]);
        let mut empty = Bins::default();
        empty.merge(&a);
        assert_eq!(empty, a);
    }

    #[test]
    fn folding_moves_low_counts_up() {
        let mut a = bins(&[(1, 1), (2, 2), (5, 5), (9, 9)]);
        a.fold_below(5);
        assert_eq!(a.iter().collect::<Vec<_>>(), [(5, 8), (9, 9)]);
        a.fold_below(7);
        assert_eq!(a.iter().collect::<Vec<_>>(), [(7, 8), (9, 9)]);
        a.fold_below(0);
        assert_eq!(a.iter().count(), 2);
    }
}

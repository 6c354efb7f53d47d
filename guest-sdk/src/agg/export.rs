//! The records the host receives: entries selected and sorted, and aggregations made
//! from a kernel snapshot.

use std::cmp::Ordering;

use super::stat::{rank_of, Func, Layout};
use super::{Agg, Eviction};
use crate::{AggEntry, AggKind, AggOrder, Aggregation, Value};

/// An aggregation from entries as the host reports them (a kernel aggregation's
/// snapshot from [`read_aggregation`](crate::read_aggregation)), keys unchanged:
/// entries sorted by `order`, the `top` largest kept. For `count`, `sum`, `min`, `max`
/// and `quantize`, entries with equal keys merge and histograms get their empty
/// buckets back (every bucket between the extremes); other kinds pass through as they
/// are. To translate keys (a syscall number into its name), fold the snapshot into an
/// [`Agg`] with [`Agg::merge_entries`] instead.
pub fn from_entries(
    name: &str,
    title: &str,
    key_names: &[&str],
    kind: AggKind,
    order: AggOrder,
    top: u32,
    entries: Vec<AggEntry>,
) -> Aggregation {
    let func = match kind {
        AggKind::Count => Some(Func::Count),
        AggKind::Sum => Some(Func::Sum),
        AggKind::Min => Some(Func::Min),
        AggKind::Max => Some(Func::Max),
        AggKind::Quantize => Some(Func::Hist(Layout::Log2)),
        _ => None,
    };
    if let Some(func) = func {
        let mut agg = Agg::with_func(func).with_limit(usize::MAX, Eviction::RejectNew);
        if agg.merge_entries(entries.iter().cloned(), Some).is_ok() {
            return agg.to_aggregation(name, title, key_names, order, top);
        }
    }
    let mut rows: Vec<(i64, AggEntry)> = entries.into_iter().map(|e| (rank_of(&e.value), e)).collect();
    keep_top(&mut rows, top, |a, b| b.0.cmp(&a.0).then_with(|| a.1.key.cmp(&b.1.key)));
    aggregation(name, title, key_names, kind, order, top, rows)
}

/// Sort `items` with `largest_first` and keep the first `top`, if `top > 0`.
pub(crate) fn keep_top<T>(items: &mut Vec<T>, top: u32, largest_first: impl FnMut(&T, &T) -> Ordering) {
    let top = usize::try_from(top).unwrap_or(usize::MAX);
    if top > 0 && items.len() > top {
        items.sort_unstable_by(largest_first);
        items.truncate(top);
    }
}

/// The record the host receives, entries (with the values they sort by) sorted by
/// `order`.
pub(crate) fn aggregation(
    name: &str,
    title: &str,
    key_names: &[&str],
    kind: AggKind,
    order: AggOrder,
    top: u32,
    mut entries: Vec<(i64, AggEntry)>,
) -> Aggregation {
    entries.sort_unstable_by(|a, b| by_order(order, (a.0, &a.1.key), (b.0, &b.1.key)));
    Aggregation {
        name: name.to_string(),
        title: title.to_string(),
        key_names: key_names.iter().map(|k| (*k).to_string()).collect(),
        kind,
        order,
        top,
        entries: entries.into_iter().map(|(_, e)| e).collect(),
    }
}

/// Entries compared by `order`: by value then key, or by key.
pub(super) fn by_order(order: AggOrder, a: (i64, &Vec<Value>), b: (i64, &Vec<Value>)) -> Ordering {
    match order {
        AggOrder::ValueAscending => a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)),
        AggOrder::ValueDescending => b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)),
        AggOrder::Key => a.1.cmp(b.1).then_with(|| a.0.cmp(&b.0)),
    }
}

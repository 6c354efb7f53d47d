//! Snapshots of kernel aggregations: from the collector's map or the evaluator, reset
//! exactly, turned into the contract's entries, read by each plugin through its reader.

use super::*;
use crate::sandbox::ReadError;

/// Where snapshots come from.
pub enum Backend {
    /// The kernel collector's map; `None` until the collector runs.
    Kernel {
        values: Option<Box<KernelValues>>,
        /// Cumulative values at the last reset, subtracted from later reads.
        baselines: HashMap<u32, HashMap<RawKey, RawValue>>,
    },
    Host(Box<Evaluator>),
}

/// Every kernel aggregation of a run and where their values are.
pub struct Aggregations {
    pub specs: Vec<Spec>,
    pub backend: Backend,
}

pub type SharedAggregations = Arc<Mutex<Aggregations>>;

impl Aggregations {
    /// A snapshot of aggregation `id`, optionally starting the next one from zero.
    pub fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, String> {
        let spec = self.specs.iter().find(|s| s.id == id).ok_or_else(|| format!("no kernel aggregation {id}"))?;
        let raw = match &mut self.backend {
            Backend::Host(e) => e.take(id, reset),
            Backend::Kernel { values, baselines } => {
                let values = values.as_mut().ok_or("the aggregation collector is not running")?;
                let cumulative = values.read(id, spec.slots)?;
                if matches!(spec.func, Func::Min | Func::Max) {
                    // Extremes cannot be subtracted: a reset takes the keys out instead,
                    // each read and deleted at once, so no update between is lost.
                    if reset {
                        let keys: Vec<RawKey> = cumulative.iter().map(|(k, _)| *k).collect();
                        values.take(id, &keys)?
                    } else {
                        cumulative
                    }
                } else {
                    // Counts, sums and buckets only grow: a reset remembers them and later
                    // reads subtract, so nothing that happens between two reads is lost.
                    let base = baselines.entry(id).or_default();
                    let delta = cumulative
                        .iter()
                        .map(|(k, v)| {
                            let b = base.get(k).copied().unwrap_or_default();
                            (
                                *k,
                                RawValue {
                                    count: v.count.saturating_sub(b.count),
                                    sum: v.sum.wrapping_sub(b.sum),
                                    ..*v
                                },
                            )
                        })
                        .filter(|(_, v)| v.count > 0)
                        .collect();
                    if reset {
                        *base = cumulative.into_iter().collect();
                    }
                    delta
                }
            }
        };
        Ok(entries(spec, raw))
    }

    /// Events lost to a full aggregation map in the host (replay, recording).
    pub fn host_lost(&self) -> u64 {
        match &self.backend {
            Backend::Host(e) => e.lost,
            Backend::Kernel { .. } => 0,
        }
    }

    /// Intervals lost to a full map of starts in the host (replay, recording).
    pub fn host_starts_lost(&self) -> u64 {
        match &self.backend {
            Backend::Host(e) => e.starts_lost,
            Backend::Kernel { .. } => 0,
        }
    }
}

/// Raw keys and values as the aggregation's entries: keys in declaration order, scalars
/// or histograms with every bucket between the lowest and the highest used.
pub fn entries(spec: &Spec, raw: Vec<(RawKey, RawValue)>) -> Vec<types::AggEntry> {
    let mut grouped: BTreeMap<([u64; KEYS_MAX], [u8; 16]), BTreeMap<i32, RawValue>> = BTreeMap::new();
    for (k, v) in raw {
        grouped.entry((k.parts, k.comm)).or_default().entry(k.bucket).or_default().merge(&v);
    }
    grouped
        .into_iter()
        .map(|((parts, comm), buckets)| {
            let key = spec
                .keys
                .iter()
                .enumerate()
                .map(|(i, src)| match src {
                    Src::Comm => {
                        let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
                        types::Value::Text(String::from_utf8_lossy(&comm[..end]).into_owned())
                    }
                    _ => types::Value::Int(parts[i] as i64),
                })
                .collect();
            let mut total = RawValue::default();
            for v in buckets.values() {
                total.merge(v);
            }
            let value = match spec.func {
                Func::Count => types::AggValue::Scalar(total.count as i64),
                Func::Sum => types::AggValue::Scalar(total.sum),
                Func::Min => types::AggValue::Scalar(total.min),
                Func::Max => types::AggValue::Scalar(total.max),
                Func::Log2 | Func::Linear { .. } => {
                    let lo = buckets.keys().next().copied().unwrap_or(0);
                    let hi = buckets.keys().next_back().copied().unwrap_or(0);
                    let list = (lo..=hi)
                        .map(|b| {
                            let (low, high) = spec.func.range(b);
                            types::Bucket { low, high, count: buckets.get(&b).map_or(0, |v| v.count) }
                        })
                        .collect();
                    types::AggValue::Histogram(types::Histogram { buckets: list, sum: total.sum })
                }
            };
            types::AggEntry { key, value }
        })
        .collect()
}

/// One plugin's view of the store: its own aggregation ids.
#[derive(Clone)]
pub struct PluginAggs {
    pub store: SharedAggregations,
    /// Global ids, by the plugin's index.
    pub ids: Vec<u32>,
}

impl crate::sandbox::Aggregates for PluginAggs {
    fn read(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, ReadError> {
        let global = *self.ids.get(id as usize).ok_or(ReadError::NoSuch { id, declared: self.ids.len() })?;
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        store.read(global, reset).map_err(|reason| ReadError::Failed { id, reason })
    }
}

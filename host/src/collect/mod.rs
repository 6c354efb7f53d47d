//! Where events come from: the live collectors (the only code that touches aya/BPF)
//! or a recording. Both yield [`Chunk`]s of records in the `wasmtap-abi` layout.

pub mod agg;
pub mod cgroup;
pub mod elf;
pub mod live;
pub mod probes;
pub mod recording;
pub mod table;
pub mod tracefs;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wasmtap_abi::Kind;

/// Records back to back, as the collectors wrote them.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    pub bytes: Vec<u8>,
    pub records: u64,
}

impl Chunk {
    pub fn with_capacity(n: usize) -> Chunk {
        Chunk { bytes: Vec::with_capacity(n), records: 0 }
    }
}

/// Kernel-side counts for one record kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindCounters {
    /// Rejected by an in-kernel filter.
    pub filtered: u64,
    /// Written to the ring buffer.
    pub emitted: u64,
    /// Lost because the ring buffer was full.
    pub dropped: u64,
}

/// What the collectors saw, for the accounting report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCounters {
    #[serde(with = "kind_map")]
    pub kinds: BTreeMap<Kind, KindCounters>,
    /// Records lost between the ring buffer and the plugins (pipeline full).
    pub pipeline_dropped: u64,
    /// Records the host refused as malformed.
    pub malformed: u64,
    /// Events of kernel aggregations: filtered, aggregated (`emitted`), and lost
    /// because the aggregation map was full (`dropped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated: Option<KindCounters>,
}

impl KernelCounters {
    /// Every record lost for any reason.
    pub fn dropped(&self) -> u64 {
        let agg = self.aggregated.map_or(0, |a| a.dropped);
        self.kinds.values().map(|k| k.dropped).sum::<u64>() + self.pipeline_dropped + self.malformed + agg
    }
}

/// A stable, human-readable name for a record kind.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::SysEnter => "sys_enter",
        Kind::SysExit => "sys_exit",
        Kind::Exec => "exec",
        Kind::Fork => "fork",
        Kind::Exit => "exit",
        Kind::Tracepoint => "tracepoint",
        Kind::User => "user",
        Kind::Sample => "sample",
    }
}

mod kind_map {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<Kind, KindCounters>, s: S) -> Result<S::Ok, S::Error> {
        let named: BTreeMap<&str, KindCounters> = m.iter().map(|(k, v)| (kind_name(*k), *v)).collect();
        named.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Kind, KindCounters>, D::Error> {
        let named: BTreeMap<String, KindCounters> = BTreeMap::deserialize(d)?;
        named
            .into_iter()
            .map(|(name, v)| {
                Kind::ALL
                    .into_iter()
                    .find(|k| kind_name(*k) == name)
                    .map(|k| (k, v))
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown record kind `{name}`")))
            })
            .collect()
    }
}

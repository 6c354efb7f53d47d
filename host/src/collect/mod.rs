//! Where events come from: the live collectors (the only code that touches aya/BPF)
//! or a recording. Both yield [`Chunk`]s of records in the `wasmtap-abi` layout.

pub mod agg_maps;
pub mod cgroup;
pub mod counter_rows;
pub mod elf;
pub mod fields;
pub mod live;
pub mod map_sizes;
pub mod overload;
pub mod plan;
pub mod probes;
pub mod queue;
pub mod recording;
pub mod source;
pub mod table;
pub mod tracefs;

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

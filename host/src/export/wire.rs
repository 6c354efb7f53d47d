//! A snapshot between processes: what a session's run sends the daemon at each export
//! interval, for the daemon's own `/metrics` (docs/fleet.md, "Through the daemon").
//!
//! A frame is a little-endian `u32` length and that many bytes of JSON. The daemon reads
//! what a run that has become its tenant's user writes, so it treats every frame as
//! hostile: one longer than [`MAX_FRAME`] or that does not decode ends that session's
//! metrics (its run goes on), and the daemon keeps only the latest snapshot per session.

use std::io::{Read, Write};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Accounted, Family, PluginTotals, Snapshot, Total, DROP_REASONS};
use crate::output::entries::kind_name;
use crate::wit::types::AggKind;

/// The longest frame sent or read: every plugin's series are bounded ([`super::MAX_SERIES`]
/// per aggregation), so a snapshot this large is a plugin with a great many aggregations.
pub const MAX_FRAME: usize = 16 << 20;

const KINDS: [AggKind; 10] = [
    AggKind::Count,
    AggKind::Sum,
    AggKind::Min,
    AggKind::Max,
    AggKind::Avg,
    AggKind::Stddev,
    AggKind::Quantize,
    AggKind::Lquantize,
    AggKind::Llquantize,
    AggKind::Percentiles,
];

#[derive(Serialize, Deserialize)]
struct WireSnapshot {
    started_unix_ns: u64,
    taken_unix_ns: u64,
    accounting: Vec<WireAccounted>,
    plugins: Vec<WirePlugin>,
}

#[derive(Serialize, Deserialize)]
struct WireAccounted {
    plugin: String,
    generated: u64,
    kernel_filtered: u64,
    emitted: u64,
    filtered: u64,
    delivered: u64,
    /// By reason, in [`Accounted::dropped`]'s order.
    dropped: [u64; 4],
    faults: u64,
    restarts: u64,
}

#[derive(Serialize, Deserialize)]
struct WirePlugin {
    plugin: String,
    families: Vec<WireFamily>,
}

#[derive(Serialize, Deserialize)]
struct WireFamily {
    name: String,
    title: String,
    key_names: Vec<String>,
    kind: String,
    series: Vec<(Vec<String>, Total)>,
    over: u64,
}

/// The snapshot as one frame's payload.
pub fn encode(s: &Snapshot) -> Vec<u8> {
    let wire = WireSnapshot {
        started_unix_ns: s.started_unix_ns,
        taken_unix_ns: s.taken_unix_ns,
        accounting: s
            .accounting
            .iter()
            .map(|a| WireAccounted {
                plugin: a.plugin.clone(),
                generated: a.generated,
                kernel_filtered: a.kernel_filtered,
                emitted: a.emitted,
                filtered: a.filtered,
                delivered: a.delivered,
                dropped: a.dropped.map(|(_, n)| n),
                faults: a.faults,
                restarts: a.restarts,
            })
            .collect(),
        plugins: s
            .plugins
            .iter()
            .map(|p| WirePlugin {
                plugin: p.plugin.clone(),
                families: p
                    .families
                    .iter()
                    .map(|f| WireFamily {
                        name: f.name.clone(),
                        title: f.title.clone(),
                        key_names: f.key_names.clone(),
                        kind: kind_name(f.kind).to_string(),
                        series: f.series.clone(),
                        over: f.over,
                    })
                    .collect(),
            })
            .collect(),
    };
    serde_json::to_vec(&wire).unwrap_or_default()
}

/// A frame's payload as a snapshot, checked: every series has one label per key name
/// and a total of its kind's shape.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    let wire: WireSnapshot = serde_json::from_slice(bytes).map_err(|e| format!("not a snapshot: {e}"))?;
    let accounting = wire
        .accounting
        .into_iter()
        .map(|a| Accounted {
            dropped: std::array::from_fn(|i| (DROP_REASONS[i], a.dropped[i])),
            plugin: a.plugin,
            generated: a.generated,
            kernel_filtered: a.kernel_filtered,
            emitted: a.emitted,
            filtered: a.filtered,
            delivered: a.delivered,
            faults: a.faults,
            restarts: a.restarts,
        })
        .collect();
    let mut plugins = Vec::new();
    for p in wire.plugins {
        let mut families = Vec::new();
        for f in p.families {
            let kind = KINDS
                .into_iter()
                .find(|k| kind_name(*k) == f.kind)
                .ok_or_else(|| format!("{}: unknown kind `{}`", f.name, f.kind))?;
            for (labels, total) in &f.series {
                let shaped = match (kind, total) {
                    (AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize, Total::Histogram { .. }) => true,
                    (AggKind::Percentiles, Total::Quantiles { .. }) => true,
                    (AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize | AggKind::Percentiles, _) => false,
                    (_, Total::Scalar(_)) => true,
                    _ => false,
                };
                if labels.len() != f.key_names.len() || !shaped {
                    return Err(format!("{}: a series that does not fit its aggregation", f.name));
                }
            }
            families.push(Family::wired(f.name, f.title, f.key_names, kind, f.series, f.over));
        }
        plugins.push(Arc::new(PluginTotals { plugin: p.plugin, families }));
    }
    Ok(Snapshot {
        plugins,
        accounting: Arc::new(accounting),
        started_unix_ns: wire.started_unix_ns,
        taken_unix_ns: wire.taken_unix_ns,
    })
}

/// Write one frame. A payload over [`MAX_FRAME`] is not written: an error says so.
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> std::io::Result<()> {
    if payload.len() > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a metrics snapshot of {} bytes, more than the {MAX_FRAME} sent", payload.len()),
        ));
    }
    w.write_all(&(payload.len() as u32).to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()
}

/// Read one frame: `None` at the end of the stream, an error for a frame over
/// [`MAX_FRAME`] (nothing of it is read into memory).
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, more than the {MAX_FRAME} allowed"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some(payload))
}

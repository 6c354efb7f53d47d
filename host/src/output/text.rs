//! Text rendering: aligned columns, `@name[key]: value` maps, the accounting summary.

use crate::sandbox::types::{Aggregation, ColumnKind, Row, TableSpec, Value};
use crate::sandbox::Clock;

pub(super) fn header(table: &TableSpec) -> String {
    let cells = table.columns.iter().map(|c| (c.name.clone(), c.kind, c.width as usize));
    join_cells(cells)
}

pub(super) fn row(table: &TableSpec, row: &Row, clock: &Clock) -> String {
    let cells = table.columns.iter().zip(&row.values).map(|(c, v)| {
        let s = match (v, c.kind) {
            (Value::Int(ns), ColumnKind::Timestamp) => clock_time(clock.wall_of(*ns as u64)),
            (Value::Int(i), _) => i.to_string(),
            (Value::Text(s), _) => sanitize(s),
            (Value::Stack(frames), _) => frames.iter().map(|f| f.symbol.clone()).collect::<Vec<_>>().join(";"),
        };
        (s, c.kind, c.width as usize)
    });
    join_cells(cells)
}

fn join_cells(cells: impl Iterator<Item = (String, ColumnKind, usize)>) -> String {
    let cells: Vec<_> = cells.collect();
    let last = cells.len().saturating_sub(1);
    let mut out = String::new();
    for (i, (s, kind, width)) in cells.into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match kind {
            ColumnKind::Integer => out.push_str(&format!("{s:>width$}")),
            _ if i == last => out.push_str(&s),
            _ => out.push_str(&format!("{s:<width$}")),
        }
    }
    out
}

/// Control characters from traced programs must not drive the user's terminal.
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// `HH:MM:SS.mmm` (UTC) of a wall-clock time in nanoseconds.
fn clock_time(wall_ns: u64) -> String {
    let secs = wall_ns / 1_000_000_000;
    let ms = (wall_ns / 1_000_000) % 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    format!("{h:02}:{m:02}:{s:02}.{ms:03}")
}

pub(super) fn key(parts: &[Value]) -> String {
    parts
        .iter()
        .map(|v| match v {
            Value::Int(i) => i.to_string(),
            Value::Text(s) => sanitize(s),
            Value::Stack(frames) => frames.iter().map(|f| f.symbol.clone()).collect::<Vec<_>>().join(";"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn aggregation(agg: &Aggregation, entries: &[(String, i64)]) -> String {
    let mut out = String::new();
    if !agg.title.is_empty() {
        out.push_str(&agg.title);
        out.push('\n');
    }
    for (k, v) in entries {
        if agg.key_names.is_empty() {
            out.push_str(&format!("@{}: {v}\n", agg.name));
        } else {
            out.push_str(&format!("@{}[{k}]: {v}\n", agg.name));
        }
    }
    out
}

pub(super) fn accounting(report: &crate::pipeline::Accounting) -> Vec<String> {
    let mut lines = vec![format!(
        "wasmtap: {} events from the kernel, {} filtered in the kernel, {} lost",
        report.kernel.kinds.values().map(|k| k.emitted).sum::<u64>(),
        report.kernel.kinds.values().map(|k| k.filtered).sum::<u64>(),
        report.lost()
    )];
    for (kind, k) in &report.kernel.kinds {
        lines.push(format!(
            "  {:<10} emitted {:>10}  filtered {:>10}  ring-full drops {:>8}",
            crate::collect::kind_name(*kind),
            k.emitted,
            k.filtered,
            k.dropped
        ));
    }
    if report.kernel.pipeline_dropped > 0 {
        lines.push(format!("  pipeline full: {} events dropped", report.kernel.pipeline_dropped));
    }
    for p in &report.plugins {
        let status = match &p.disabled {
            Some(why) => format!("  DISABLED: {why}"),
            None => String::new(),
        };
        lines.push(format!(
            "  plugin {:<12} delivered {:>10}  filtered {:>8}  dropped {:>8}  batches {:>6}{status}",
            p.name, p.delivered, p.filtered, p.dropped, p.batches
        ));
    }
    lines
}

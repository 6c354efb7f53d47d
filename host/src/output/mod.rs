//! The only module that prints. One stream of items, rendered as DTrace/bpftrace-style
//! text or as NDJSON whose record types follow bpftrace's `-f json` where they fit
//! (`map`, `printf`, `attached_probes`, `lost_events`) and add `row` and `accounting`.
//! See docs/output.md for every record type.

mod text;

use std::io::{self, Write};

use serde_json::{json, Map, Value as Json};

use crate::sandbox::types::{AggOrder, Aggregation, ColumnKind, Level, Row, TableSpec, Value};
use crate::sandbox::Clock;

/// How results are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human text, like the classic tools.
    Text,
    /// One JSON object per line.
    Json,
}

/// The output sink: results to `out`, diagnostics to `err`.
pub struct Output {
    format: Format,
    out: Box<dyn Write>,
    err: Box<dyn Write>,
    broken: bool,
}

impl Output {
    /// Results to stdout, diagnostics to stderr.
    pub fn stdio(format: Format) -> Output {
        Output::new(format, Box::new(io::BufWriter::new(io::stdout())), Box::new(io::stderr()))
    }

    pub fn new(format: Format, out: Box<dyn Write>, err: Box<dyn Write>) -> Output {
        Output { format, out, err, broken: false }
    }

    /// True once stdout was closed by the reader (e.g. `| head`): stop quietly.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    fn line(&mut self, s: &str) {
        if self.broken {
            return;
        }
        if let Err(e) = writeln!(self.out, "{s}") {
            if e.kind() == io::ErrorKind::BrokenPipe {
                self.broken = true;
            }
        }
    }

    fn json(&mut self, v: Json) {
        self.line(&v.to_string());
    }

    /// Flush buffered results.
    pub fn flush(&mut self) {
        if !self.broken && self.out.flush().is_err() {
            self.broken = true;
        }
    }

    /// A diagnostic line on stderr (`wasmtap: …`).
    pub fn diag(&mut self, msg: &str) {
        self.flush();
        let _ = writeln!(self.err, "wasmtap: {msg}");
    }

    /// Probes attached; text output tells the user how to stop.
    pub fn attached(&mut self, probes: usize, live: bool) {
        match self.format {
            Format::Json => self.json(json!({"type": "attached_probes", "data": {"probes": probes}})),
            Format::Text if live => {
                let _ = writeln!(
                    self.err,
                    "Attached {probes} probe{}. Hit Ctrl-C to end.",
                    if probes == 1 { "" } else { "s" }
                );
            }
            Format::Text => {}
        }
    }

    /// A table's column headings (text only).
    pub fn table_header(&mut self, table: &TableSpec) {
        if self.format == Format::Text {
            let line = text::header(table);
            self.line(&line);
        }
    }

    /// Rows of a table.
    pub fn rows(&mut self, plugin: &str, table: &TableSpec, rows: &[Row], clock: &Clock) {
        for row in rows {
            match self.format {
                Format::Text => {
                    let line = text::row(table, row, clock);
                    self.line(&line);
                }
                Format::Json => {
                    let mut data = Map::new();
                    for (col, v) in table.columns.iter().zip(&row.values) {
                        let j = match (v, col.kind) {
                            (Value::Int(i), ColumnKind::Timestamp) => json!(clock.wall_of(*i as u64)),
                            (Value::Int(i), _) => json!(i),
                            (Value::Text(s), _) => json!(s),
                            (Value::Stack(f), _) => json!(f.iter().map(|f| f.symbol.clone()).collect::<Vec<_>>()),
                        };
                        data.insert(col.name.clone(), j);
                    }
                    self.json(json!({"type": "row", "plugin": plugin, "table": table.name, "data": data}));
                }
            }
        }
    }

    /// Free text from a plugin.
    pub fn text(&mut self, plugin: &str, s: &str) {
        match self.format {
            Format::Text => {
                if !self.broken && self.out.write_all(s.as_bytes()).is_err() {
                    self.broken = true;
                }
            }
            Format::Json => self.json(json!({"type": "printf", "plugin": plugin, "data": s})),
        }
    }

    /// A log line from a plugin (stderr).
    pub fn log(&mut self, plugin: &str, level: Level, msg: &str) {
        let lvl = match level {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warning",
            Level::Error => "error",
        };
        self.diag(&format!("{plugin}: {lvl}: {msg}"));
    }

    /// Aggregations, sorted and cut as each asks.
    pub fn aggregations(&mut self, plugin: &str, aggs: &[Aggregation]) {
        for agg in aggs {
            let entries = sorted_entries(agg);
            match self.format {
                Format::Text => {
                    let block = text::aggregation(agg, &entries);
                    self.line(&block);
                }
                Format::Json => {
                    let mut m = Map::new();
                    for (key, value) in &entries {
                        m.insert(key.clone(), json!(value));
                    }
                    let mut data = Map::new();
                    data.insert(format!("@{}", agg.name), Json::Object(m));
                    self.json(json!({"type": "map", "plugin": plugin, "data": data}));
                }
            }
        }
    }

    /// The accounting report: always in JSON, in text only when asked or when events were lost.
    pub fn accounting(&mut self, report: &crate::pipeline::Accounting, verbose: bool) {
        match self.format {
            Format::Json => {
                self.json(json!({"type": "accounting", "data": report}));
                self.json(json!({"type": "lost_events", "data": {"events": report.lost()}}));
            }
            Format::Text => {
                self.flush();
                let lost = report.lost();
                if verbose || lost > 0 {
                    for line in text::accounting(report) {
                        let _ = writeln!(self.err, "{line}");
                    }
                }
            }
        }
    }
}

/// Entries as (rendered key, value): top-N by value, then in the requested order.
fn sorted_entries(agg: &Aggregation) -> Vec<(String, i64)> {
    let scalar = |v: &crate::sandbox::types::AggValue| match v {
        crate::sandbox::types::AggValue::Scalar(v) => *v,
        crate::sandbox::types::AggValue::Histogram(h) => h.buckets.iter().map(|b| b.count as i64).sum(),
        crate::sandbox::types::AggValue::Quantiles(q) => q.count as i64,
    };
    let mut entries: Vec<(String, i64)> = agg.entries.iter().map(|e| (text::key(&e.key), scalar(&e.value))).collect();
    entries.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if agg.top > 0 {
        entries.truncate(agg.top as usize);
    }
    match agg.order {
        AggOrder::ValueDescending => {}
        AggOrder::ValueAscending => entries.reverse(),
        AggOrder::Key => entries.sort_by(|a, b| a.0.cmp(&b.0)),
    }
    entries
}

//! The only module that prints. One stream of items, rendered as DTrace/bpftrace-style
//! text, as NDJSON whose record types follow bpftrace's `-f json` where they fit
//! (`map`, `hist`, `printf`, `attached_probes`, `lost_events`) and add `quantiles`,
//! `row` and `accounting`, as folded stacks, or as Prometheus text exposition; and,
//! beside any of them, an SVG flame graph of the stack aggregations.
//! See docs/output.md for every format.
//!
//! ```text
//! let mut out = Output::stdio(Format::Folded);
//! out.set_flamegraph("cpu.svg".into())?; // created now, private (crate::private)
//! out.aggregations("profile", &aggs); // `main;work;hot 90` on stdout
//! out.close()?;                       // cpu.svg drawn from the latest stacks
//! ```

pub(crate) mod entries;
mod flamegraph;
mod folded;
mod json;
mod prometheus;
mod text;

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Write};
use std::path::PathBuf;

use crate::clock::Clock;
use crate::watchdog::Watched;
use crate::wit::types::{AggEntry, Aggregation, ColumnKind, Level, TableSpec};
use crate::wit::Cell;
use json::{quote, Object};

pub use flamegraph::flamegraph_svg;
pub use folded::stack as folded_stack;
pub(crate) use prometheus::escape;
pub use prometheus::{label_names, metric_name};

/// The folded lines of one stack aggregation, kept for the flame graph.
#[derive(Debug)]
struct Stacks {
    title: String,
    lines: Vec<(String, i64)>,
}

/// How results are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human text, like the classic tools.
    Text,
    /// One JSON object per line.
    Json,
    /// Folded stacks (`main;f;g 12`), the input of flamegraph.pl; tables and text go to stderr.
    Folded,
    /// Prometheus text exposition, one block per report; tables and text go to stderr.
    Prometheus,
}

/// The output sink: results to `out`, diagnostics to `err`.
pub struct Output {
    format: Format,
    out: Box<dyn Write>,
    err: Box<dyn Write>,
    broken: bool,
    /// The file `close` draws the flame graph into, created up front.
    flamegraph: Option<(PathBuf, std::fs::File)>,
    /// The latest folded lines of each stack aggregation, by (plugin, name).
    stacks: BTreeMap<(String, String), Stacks>,
    /// Aggregations already reported as having no folded form.
    unfolded: HashSet<(String, String)>,
    /// Bytes written so far, results and diagnostics: what plugins' output is charged by.
    written: u64,
}

impl Output {
    /// Results to stdout, diagnostics to stderr.
    pub fn stdio(format: Format) -> Output {
        // Watched: a write that blocks (a reader that stopped reading) is what the
        // watchdog names when the run makes no progress.
        let (out, err) = (Watched(io::stdout()), Watched(io::stderr()));
        Output::new(format, Box::new(io::BufWriter::new(out)), Box::new(err))
    }

    pub fn new(format: Format, out: Box<dyn Write>, err: Box<dyn Write>) -> Output {
        Output {
            format,
            out,
            err,
            broken: false,
            flamegraph: None,
            stacks: BTreeMap::new(),
            unfolded: HashSet::new(),
            written: 0,
        }
    }

    /// Draw the stack aggregations as an SVG flame graph into `path` at
    /// [`close`](Output::close). The file is created now, private and new (see
    /// [`crate::private`]): a live run can no longer create files once it has dropped
    /// its privileges, and a bad path is better reported before tracing than after.
    pub fn set_flamegraph(&mut self, path: PathBuf) -> Result<(), String> {
        let file = crate::private::create("flame graph", &path).map_err(|e| e.to_string())?;
        self.flamegraph = Some((path, file));
        Ok(())
    }

    /// Draw the flame graph into `file`, already open (one a daemon's client created and
    /// sent); `name` is how messages call it.
    pub fn set_flamegraph_file(&mut self, name: PathBuf, file: std::fs::File) {
        self.flamegraph = Some((name, file));
    }

    /// True once stdout was closed by the reader (e.g. `| head`): stop quietly.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Bytes written so far to results and diagnostics.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn write(&mut self, s: &str) {
        self.written += s.len() as u64;
        if !self.broken {
            if let Err(e) = self.out.write_all(s.as_bytes()) {
                if e.kind() == io::ErrorKind::BrokenPipe {
                    self.broken = true;
                }
            }
        }
    }

    fn line(&mut self, s: &str) {
        self.write(s);
        self.write("\n");
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
        self.err_line(&format!("wasmtap: {msg}"));
    }

    /// A line on stderr.
    fn err_line(&mut self, line: &str) {
        self.written += line.len() as u64 + 1;
        let _ = writeln!(self.err, "{line}");
    }

    /// Probes attached; text output tells the user how to stop.
    pub fn attached(&mut self, probes: usize, live: bool) {
        match self.format {
            Format::Json => {
                let data = Object::new().int("probes", probes as u64).finish();
                self.line(&Object::new().str("type", "attached_probes").raw("data", &data).finish());
            }
            _ if live => {
                let _ = writeln!(
                    self.err,
                    "Attached {probes} probe{}. Hit Ctrl-C to end.",
                    if probes == 1 { "" } else { "s" }
                );
            }
            _ => {}
        }
    }

    /// A table's column headings (text only; on stderr beside folded and Prometheus output).
    pub fn table_header(&mut self, table: &TableSpec) {
        let line = text::header(table);
        match self.format {
            Format::Text => self.line(&line),
            Format::Json => {}
            _ => self.err_line(&line),
        }
    }

    /// Rows of a table, as lifted from a plugin.
    #[cfg(test)]
    pub fn rows(&mut self, plugin: &str, table: &TableSpec, rows: &[crate::wit::types::Row], clock: &Clock) {
        let mut cells = Vec::new();
        for row in rows {
            cells.clear();
            cells.extend(row.values.iter().map(Cell::from));
            self.row(plugin, table, &cells, clock);
        }
    }

    /// One row of a table, as cells.
    pub fn row(&mut self, plugin: &str, table: &TableSpec, cells: &[Cell<'_>], clock: &Clock) {
        match self.format {
            Format::Text => self.line(&text::row(table, cells, clock)),
            Format::Json => self.line(&row_json(plugin, table, cells, clock)),
            _ => self.err_line(&text::row(table, cells, clock)),
        }
    }

    /// Free text from a plugin; control characters other than newlines and tabs are
    /// shown as `?`, so a plugin cannot drive the user's terminal.
    pub fn text(&mut self, plugin: &str, s: &str) {
        match self.format {
            Format::Text => self.write(&text::sanitize_lines(s)),
            Format::Json => {
                self.line(&Object::new().str("type", "printf").str("plugin", plugin).str("data", s).finish())
            }
            _ => {
                let s = text::sanitize_lines(s);
                self.written += s.len() as u64;
                let _ = self.err.write_all(s.as_bytes());
            }
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
        self.diag(&format!("{plugin}: {lvl}: {}", text::sanitize(msg)));
    }

    /// Aggregations, sorted and cut as each asks; one report (one Prometheus block).
    pub fn aggregations(&mut self, plugin: &str, aggs: &[Aggregation]) {
        let sorted: Vec<(&Aggregation, Vec<&AggEntry>)> = aggs.iter().map(|a| (a, entries::sorted(a))).collect();
        if self.flamegraph.is_some() {
            self.remember_stacks(plugin, &sorted);
        }
        match self.format {
            Format::Text => sorted.iter().for_each(|(agg, entries)| self.write(&text::aggregation(agg, entries))),
            Format::Json => {
                sorted.iter().for_each(|(agg, entries)| self.line(&json::aggregation(plugin, agg, entries)))
            }
            Format::Folded => sorted.iter().for_each(|(agg, entries)| self.folded(plugin, agg, entries)),
            Format::Prometheus => self.write(&prometheus::exposition(plugin, &sorted)),
        }
    }

    fn folded(&mut self, plugin: &str, agg: &Aggregation, entries: &[&AggEntry]) {
        let (lines, skipped) = folded::lines(agg, entries);
        for (frames, n) in lines {
            self.line(&format!("{frames} {n}"));
        }
        if skipped && self.unfolded.insert((plugin.to_string(), agg.name.clone())) {
            self.diag(&format!("{plugin}: @{}: histograms and percentiles have no folded form; left out", agg.name));
        }
    }

    fn remember_stacks(&mut self, plugin: &str, sorted: &[(&Aggregation, Vec<&AggEntry>)]) {
        for (agg, entries) in sorted.iter().filter(|(agg, _)| folded::has_stack(agg)) {
            let (lines, _) = folded::lines(agg, entries);
            self.stacks.insert((plugin.to_string(), agg.name.clone()), Stacks { title: agg.title.clone(), lines });
        }
    }

    /// The end of the output: flush, and draw the flame graph if one was asked for. An
    /// error names the file.
    pub fn close(&mut self) -> Result<(), String> {
        self.flush();
        let Some((path, mut file)) = self.flamegraph.take() else { return Ok(()) };
        let (title, lines) = flamegraph_input(&self.stacks);
        let svg = if lines.is_empty() {
            Err(format!("flame graph {}: no aggregation keyed by a stack has counts to draw", path.display()))
        } else {
            flamegraph_svg(&title, &lines).map_err(|e| format!("{}: {e}", path.display()))
        };
        let svg = svg.inspect_err(|_| {
            // Best effort: after a live run drops its privileges the directory may not
            // allow it, and the dispatch thread's seccomp filter refuses unlink.
            let _ = std::fs::remove_file(&path);
        })?;
        file.write_all(&svg).map_err(|e| format!("cannot write flame graph {}: {e}", path.display()))
    }

    /// The accounting report: always in JSON, in text only when asked or when events were lost.
    pub fn accounting(&mut self, report: &crate::accounting::Accounting, verbose: bool) {
        match self.format {
            Format::Json => {
                let data = serde_json::to_string(report).unwrap_or_else(|_| "null".to_string());
                self.line(&Object::new().str("type", "accounting").raw("data", &data).finish());
                let lost = Object::new().int("events", report.lost()).finish();
                self.line(&Object::new().str("type", "lost_events").raw("data", &lost).finish());
            }
            _ => {
                self.flush();
                if verbose || report.has_problems() {
                    for line in text::accounting(report) {
                        let _ = writeln!(self.err, "{line}");
                    }
                }
            }
        }
    }
}

/// `{"type":"row","plugin":…,"table":…,"data":{…}}`, columns in their order.
fn row_json(plugin: &str, table: &TableSpec, cells: &[Cell<'_>], clock: &Clock) -> String {
    let mut data = Object::new();
    for (col, v) in table.columns.iter().zip(cells) {
        data = match (*v, col.kind) {
            (Cell::Int(i), ColumnKind::Timestamp) => data.int(&col.name, clock.wall_of(i as u64)),
            (Cell::Int(i), _) => data.int(&col.name, i),
            (Cell::Text(s), _) => data.str(&col.name, s),
            (Cell::Stack(frames), _) => data.raw(&col.name, &quote(&folded::stack(frames))),
        };
    }
    let o = Object::new().str("type", "row").str("plugin", plugin).str("table", &table.name);
    o.raw("data", &data.finish()).finish()
}

/// One graph of every remembered stack aggregation: alone, its lines as they are; with
/// others, under a root frame named after it (and its plugin, where names repeat).
fn flamegraph_input(stacks: &BTreeMap<(String, String), Stacks>) -> (String, Vec<String>) {
    let drawn: Vec<_> = stacks.iter().filter(|(_, s)| s.lines.iter().any(|&(_, n)| n > 0)).collect();
    let title = match drawn.as_slice() {
        [((_, name), s)] if s.title.is_empty() => format!("@{name}"),
        [(_, s)] => s.title.clone(),
        _ => "wasmtap".to_string(),
    };
    let mut lines = Vec::new();
    for ((plugin, name), s) in &drawn {
        let repeated = drawn.iter().filter(|((_, n), _)| n == name).count() > 1;
        let root = match (drawn.len(), repeated) {
            (1, _) => String::new(),
            (_, false) => format!("{name};"),
            (_, true) => format!("{plugin}:{name};"),
        };
        lines.extend(s.lines.iter().filter(|&&(_, n)| n > 0).map(|(frames, n)| format!("{root}{frames} {n}")));
    }
    (title, lines)
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;

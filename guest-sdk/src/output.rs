//! What a plugin produces while handling events: table rows and free text.

use std::fmt;

use crate::bindings::wasmtap::plugin::host;
use crate::{Level, Row, Value};

/// Where buffered output goes: the host's imports, or a recorder in tests.
pub(crate) trait Sink {
    fn emit(&mut self, rows: &[Row]);
    fn print(&mut self, text: &str);
    fn log(&mut self, level: Level, msg: &str);
}

/// The real host, through the WIT imports.
pub(crate) struct HostSink;

impl Sink for HostSink {
    fn emit(&mut self, rows: &[Row]) {
        host::emit(rows);
    }
    fn print(&mut self, text: &str) {
        host::print(text);
    }
    fn log(&mut self, level: Level, msg: &str) {
        host::log(level, msg);
    }
}

/// Rows and text a plugin produces during one batch, tick or finish.
///
/// Nothing crosses to the host until the SDK flushes the buffer at the end of the
/// call: consecutive rows go out in one `host::emit`, consecutive text in one
/// `host::print`, and the order between rows and text is kept.
///
/// `Output` also implements [`fmt::Write`], so `write!(out, "{pid}\n")` prints.
#[derive(Debug, Default)]
pub struct Output {
    chunks: Vec<Chunk>,
}

#[derive(Debug, PartialEq, Eq)]
enum Chunk {
    Rows(Vec<Row>),
    Text(String),
}

impl Output {
    /// An empty buffer.
    pub fn new() -> Output {
        Output::default()
    }

    /// Append a row to table `table` (an index into the plan's `tables`), one value
    /// per column in declaration order.
    pub fn row(&mut self, table: u32, values: Vec<Value>) {
        let row = Row { table, values };
        match self.chunks.last_mut() {
            Some(Chunk::Rows(rows)) => rows.push(row),
            _ => self.chunks.push(Chunk::Rows(vec![row])),
        }
    }

    /// Print free text, like `printf`; no newline is added.
    pub fn print(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.chunks.last_mut() {
            Some(Chunk::Text(buf)) => buf.push_str(text),
            _ => self.chunks.push(Chunk::Text(text.to_string())),
        }
    }

    /// Nothing buffered.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The buffered rows, in order; for a plugin's unit tests.
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.chunks.iter().flat_map(|c| match c {
            Chunk::Rows(rows) => rows.as_slice(),
            Chunk::Text(_) => &[],
        })
    }

    /// The buffered text, concatenated; for a plugin's unit tests.
    pub fn text(&self) -> String {
        self.chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Text(t) => Some(t.as_str()),
                Chunk::Rows(_) => None,
            })
            .collect()
    }

    /// Hand everything to the host and empty the buffer.
    pub(crate) fn flush(&mut self, sink: &mut impl Sink) {
        for chunk in self.chunks.drain(..) {
            match chunk {
                Chunk::Rows(rows) => sink.emit(&rows),
                Chunk::Text(text) => sink.print(&text),
            }
        }
    }
}

impl fmt::Write for Output {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.print(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    #[test]
    fn consecutive_rows_and_text_coalesce_in_order() {
        let mut out = Output::new();
        out.row(0, vec![Value::Int(1)]);
        out.row(0, vec![Value::Int(2)]);
        write!(out, "a{}", 1).unwrap();
        out.print("b");
        out.row(1, vec![Value::Text("x".into())]);
        assert_eq!(out.chunks.len(), 3);
        assert_eq!(out.rows().count(), 3);
        assert_eq!(out.text(), "a1b");
    }
}

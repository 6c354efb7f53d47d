//! What a plugin produces while handling events: table rows and free text.

use std::fmt;

use crate::bindings::wasmtap::plugin::{output as host_output, services};
use crate::{Level, Row, Value};

/// Where buffered output goes: the host's imports, or a recorder in tests.
pub(crate) trait Sink {
    fn emit(&mut self, rows: &[Row]);
    /// Rows packed by [`pack`].
    fn emit_packed(&mut self, rows: &[u8]);
    fn print(&mut self, text: &str);
    fn log(&mut self, level: Level, msg: &str);
}

/// The real host, through the WIT imports.
pub(crate) struct HostSink;

impl Sink for HostSink {
    fn emit(&mut self, rows: &[Row]) {
        host_output::emit(rows);
    }
    fn emit_packed(&mut self, rows: &[u8]) {
        host_output::emit_packed(rows);
    }
    fn print(&mut self, text: &str) {
        host_output::print(text);
    }
    fn log(&mut self, level: Level, msg: &str) {
        services::log(level, msg);
    }
}

/// Rows and text a plugin produces during one batch, tick or finish.
///
/// Nothing crosses to the host until the SDK flushes the buffer at the end of the
/// call: consecutive rows go out in one `output.emit-packed` (one copy of bytes, no
/// allocation per cell on the host; rows holding a stack in one `output.emit`),
/// consecutive text in one `output.print`, and the order between rows and text is kept.
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
                Chunk::Rows(rows) if rows.iter().any(|r| r.values.iter().any(|v| matches!(v, Value::Stack(_)))) => {
                    sink.emit(&rows)
                }
                Chunk::Rows(rows) => sink.emit_packed(&pack(&rows)),
                Chunk::Text(text) => sink.print(&text),
            }
        }
    }
}

/// Rows without stacks as `output.emit-packed` takes them: little-endian, per row a u32
/// table and a u16 number of cells, per cell a tag byte, then for 0 an s64, for 1 a u32
/// byte length and the UTF-8 text.
pub(crate) fn pack(rows: &[Row]) -> Vec<u8> {
    let size: usize = rows
        .iter()
        .map(|r| 6 + r.values.iter().map(|v| if let Value::Text(s) = v { 5 + s.len() } else { 9 }).sum::<usize>())
        .sum();
    let mut b = Vec::with_capacity(size);
    for row in rows {
        b.extend_from_slice(&row.table.to_le_bytes());
        b.extend_from_slice(&(row.values.len().min(u16::MAX as usize) as u16).to_le_bytes());
        for v in row.values.iter().take(u16::MAX as usize) {
            match v {
                Value::Int(i) => {
                    b.push(0);
                    b.extend_from_slice(&i.to_le_bytes());
                }
                Value::Text(s) => {
                    b.push(1);
                    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    b.extend_from_slice(s.as_bytes());
                }
                // Rows with stacks are emitted unpacked.
                Value::Stack(_) => {
                    b.push(1);
                    b.extend_from_slice(&0u32.to_le_bytes());
                }
            }
        }
    }
    b
}

/// The rows of [`pack`]'s bytes; for tests.
#[cfg(test)]
pub(crate) fn unpack(mut b: &[u8]) -> Vec<Row> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (head, tail) = b.split_at(n);
        *b = tail;
        head
    }
    let mut rows = Vec::new();
    while !b.is_empty() {
        let table = u32::from_le_bytes(take(&mut b, 4).try_into().unwrap());
        let n = u16::from_le_bytes(take(&mut b, 2).try_into().unwrap());
        let values = (0..n)
            .map(|_| match take(&mut b, 1)[0] {
                0 => Value::Int(i64::from_le_bytes(take(&mut b, 8).try_into().unwrap())),
                _ => {
                    let len = u32::from_le_bytes(take(&mut b, 4).try_into().unwrap()) as usize;
                    Value::Text(String::from_utf8(take(&mut b, len).to_vec()).unwrap())
                }
            })
            .collect();
        rows.push(Row { table, values });
    }
    rows
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

    #[test]
    fn rows_pack_and_unpack_unchanged() {
        let rows = vec![
            Row { table: 3, values: vec![Value::Int(i64::MIN), Value::Text("héllo".into()), Value::Int(7)] },
            Row { table: 0, values: vec![] },
            Row { table: 1, values: vec![Value::Text(String::new())] },
        ];
        let b = pack(&rows);
        assert_eq!(b.len(), (6 + 9 + 5 + 6 + 9) + 6 + (6 + 5));
        assert_eq!(&b[..7], &[3, 0, 0, 0, 3, 0, 0]);
        assert_eq!(unpack(&b), rows);
    }
}

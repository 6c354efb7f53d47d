//! `wasmtap:plugin/output`: rows and text, each charged what it costs the host before
//! it is kept.

use super::*;
use crate::wit::output;

impl output::Host for StoreState {
    fn emit(&mut self, rows: Vec<types::Row>) -> wasmtime::Result<()> {
        let bytes = rows.iter().map(row_bytes).sum::<usize>() + ITEM_MIN_BYTES;
        if self.host.out.charge(bytes, rows.len())? {
            self.host.out.items.push(GuestItem::Rows(rows));
        }
        Ok(())
    }

    fn emit_packed(&mut self, rows: Vec<u8>) -> wasmtime::Result<()> {
        let n = crate::sandbox::packed::count(&rows)
            .map_err(|e| wasmtime::Error::msg(format!("output.emit-packed: {e}")))?;
        let bytes = rows.len() + n * ROW_MIN_BYTES + ITEM_MIN_BYTES;
        if self.host.out.charge(bytes, n)? {
            self.host.out.items.push(GuestItem::Packed(rows));
        }
        Ok(())
    }

    fn print(&mut self, text: String) -> wasmtime::Result<()> {
        if self.host.out.charge(text.len() + ITEM_MIN_BYTES, 0)? {
            self.host.out.items.push(GuestItem::Text(text));
        }
        Ok(())
    }
}

fn row_bytes(row: &types::Row) -> usize {
    row.values.iter().map(value_bytes).sum::<usize>() + ROW_MIN_BYTES
}

/// What a lifted value costs the host: an `Int` cell is a 32-byte enum.
fn value_bytes(v: &types::Value) -> usize {
    match v {
        types::Value::Int(_) => 32,
        types::Value::Text(s) => s.len() + 32,
        types::Value::Stack(frames) => {
            frames.iter().map(|f| 40 + f.symbol.len() + f.module.len() + f.file.len()).sum::<usize>() + 8
        }
    }
}

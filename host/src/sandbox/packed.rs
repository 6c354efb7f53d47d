//! Packed rows (`output.emit-packed`): the streaming fast path. A list of rows crosses the
//! boundary as one byte list, one copy, instead of a list of records of variants of
//! strings, each lifted into its own allocation; the host renders the cells in place.
//!
//! Little-endian. Per row: u32 table, u16 number of cells; per cell a tag byte, then for
//! tag 0 an s64, for tag 1 a u32 byte length and that much UTF-8 text. Stacks are not
//! packed (the SDK sends rows holding one with `output.emit`).

use crate::wit::Cell;

const TAG_INT: u8 = 0;
const TAG_TEXT: u8 = 1;

/// The rows of `bytes`, checked whole: their number, or what is wrong and where.
pub fn count(bytes: &[u8]) -> Result<usize, String> {
    let mut rows = Rows::new(bytes);
    let mut cells = Vec::new();
    let mut n = 0;
    while rows.next_into(&mut cells)?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// A reader of packed rows.
pub struct Rows<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Rows<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Rows { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!("packed rows end inside a value at byte {} of {}", self.at, self.bytes.len()));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// The next row's table, its cells in `cells` (cleared first); `None` at the end.
    pub fn next_into(&mut self, cells: &mut Vec<Cell<'a>>) -> Result<Option<u32>, String> {
        cells.clear();
        if self.at == self.bytes.len() {
            return Ok(None);
        }
        let table = u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default());
        let n = u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default());
        for _ in 0..n {
            let at = self.at;
            let cell = match self.take(1)?[0] {
                TAG_INT => Cell::Int(i64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default())),
                TAG_TEXT => {
                    let len = u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()) as usize;
                    let text = self.take(len)?;
                    Cell::Text(std::str::from_utf8(text).map_err(|_| format!("packed text at byte {at} is not UTF-8"))?)
                }
                tag => return Err(format!("unknown packed cell tag {tag} at byte {at}")),
            };
            cells.push(cell);
        }
        Ok(Some(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(rows: &[(u32, &[Cell<'_>])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (table, cells) in rows {
            b.extend_from_slice(&table.to_le_bytes());
            b.extend_from_slice(&(cells.len() as u16).to_le_bytes());
            for c in *cells {
                match c {
                    Cell::Int(i) => {
                        b.push(TAG_INT);
                        b.extend_from_slice(&i.to_le_bytes());
                    }
                    Cell::Text(s) => {
                        b.push(TAG_TEXT);
                        b.extend_from_slice(&(s.len() as u32).to_le_bytes());
                        b.extend_from_slice(s.as_bytes());
                    }
                    Cell::Stack(_) => unreachable!(),
                }
            }
        }
        b
    }

    #[test]
    fn rows_read_back_as_packed() {
        let b = pack(&[(0, &[Cell::Int(-7), Cell::Text("bash")]), (2, &[]), (1, &[Cell::Text("")])]);
        assert_eq!(count(&b), Ok(3));
        let mut r = Rows::new(&b);
        let mut cells = Vec::new();
        assert_eq!(r.next_into(&mut cells), Ok(Some(0)));
        assert_eq!(cells, [Cell::Int(-7), Cell::Text("bash")]);
        assert_eq!(r.next_into(&mut cells), Ok(Some(2)));
        assert!(cells.is_empty());
        assert_eq!(r.next_into(&mut cells), Ok(Some(1)));
        assert_eq!(cells, [Cell::Text("")]);
        assert_eq!(r.next_into(&mut cells), Ok(None));
        assert_eq!(count(&[]), Ok(0));
    }

    #[test]
    fn every_malformed_packing_is_an_error_naming_the_byte() {
        let good = pack(&[(0, &[Cell::Int(1), Cell::Text("héllo")])]);
        // Every truncation but the empty one is inside a row.
        for cut in 1..good.len() {
            assert!(count(&good[..cut]).unwrap_err().contains("end inside a value"), "cut at {cut}");
        }
        let mut bad_tag = good.clone();
        bad_tag[6] = 9;
        assert_eq!(count(&bad_tag).unwrap_err(), "unknown packed cell tag 9 at byte 6");
        let mut bad_utf8 = good.clone();
        let last = bad_utf8.len() - 1;
        bad_utf8[last] = 0xff;
        assert_eq!(count(&bad_utf8).unwrap_err(), "packed text at byte 15 is not UTF-8");
        let mut huge = good;
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(count(&huge).unwrap_err().contains("end inside a value"));
    }
}

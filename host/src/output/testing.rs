//! Builders for the tests of the renderers.

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

use crate::wit::types::{
    AggEntry, AggKind, AggOrder, AggValue, Aggregation, Bucket, Frame, Histogram, Percentile, Quantiles, Value,
};

/// An aggregation printed smallest value first, all entries, no title.
pub(crate) fn agg(name: &str, kind: AggKind, key_names: &[&str], entries: Vec<AggEntry>) -> Aggregation {
    Aggregation {
        name: name.to_string(),
        title: String::new(),
        key_names: key_names.iter().map(|k| k.to_string()).collect(),
        kind,
        order: AggOrder::ValueAscending,
        top: 0,
        entries,
    }
}

pub(crate) fn scalar(key: &[Value], value: i64) -> AggEntry {
    AggEntry { key: key.to_vec(), value: AggValue::Scalar(value) }
}

/// Buckets as `(low, high, count)`.
pub(crate) fn hist(buckets: &[(i64, i64, u64)], sum: i64) -> AggValue {
    let buckets = buckets.iter().map(|&(low, high, count)| Bucket { low, high, count }).collect();
    AggValue::Histogram(Histogram { buckets, sum })
}

/// Points as `(millionths, value)`.
pub(crate) fn quantiles(count: u64, sum: i64, points: &[(u32, i64)]) -> AggValue {
    let points = points.iter().map(|&(millionths, value)| Percentile { millionths, value }).collect();
    AggValue::Quantiles(Quantiles { count, sum, points })
}

pub(crate) fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

pub(crate) fn stack(frames: Vec<Frame>) -> Value {
    Value::Stack(frames)
}

/// A frame of `symbol` at `offset`; its address is made up, its module unknown.
pub(crate) fn frame(symbol: &str, offset: u64) -> Frame {
    Frame {
        addr: 0xffff_ffff_8100_0000 + offset,
        symbol: symbol.to_string(),
        offset,
        module: String::new(),
        file: String::new(),
        line: 0,
    }
}

/// A `Write` whose bytes the test reads back.
#[derive(Clone, Default)]
pub(crate) struct Capture(Rc<RefCell<Vec<u8>>>);

impl Capture {
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.borrow().clone()).expect("UTF-8 output")
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

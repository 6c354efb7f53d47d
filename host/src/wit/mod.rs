//! The contract's vocabulary: the bindings wasmtime generates from `wit/` (the `plugin`
//! world of `wasmtap:plugin@0.2.0` and its interfaces), the bindings of the previous
//! version, 0.1.0, with their conversions (`previous`), and the host's borrowed view of a
//! row cell. A leaf: it depends on nothing else of the host, and every layer that speaks
//! the contract's types takes them from here.

pub mod previous;

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
    imports: { default: trappable },
    additional_derives: [PartialEq],
});

pub use self::wasmtap::plugin::{aggregations, kernel_aggregations, lifecycle, output, probes, services};

/// Every type of the contract in one place, whichever interface defines it.
pub mod types {
    pub use super::aggregations::{
        AggEntry, AggKind, AggOrder, AggValue, Aggregation, Bucket, Histogram, Percentile, Quantiles,
    };
    pub use super::kernel_aggregations::{
        AggSource, Correlation, KernelAggregation, KernelFunction, LinearBuckets, MoreStart, StartEvent,
    };
    pub use super::lifecycle::{Param, ParamKind, ParamSpec, Plan, PluginInfo};
    pub use super::output::{Column, ColumnKind, Row, TableSpec, Value};
    pub use super::probes::{CmpOp, Field, FieldType, Filter, Predicate, ProbeSchema, StackMode, Subscription};
    pub use super::services::{Frame, Level, StackRequest};
}

/// Which version of the `plugin` world a component was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum World {
    /// `wasmtap:plugin@0.2.0`, this host's.
    Current,
    /// `wasmtap:plugin@0.1.0`, the previous minor version: one `types` and one `host`
    /// interface, x86_64 syscall numbers in filters, `read-aggregation` without a result.
    Previous,
}

impl World {
    /// The package and version, as the component names them.
    pub fn package(self) -> &'static str {
        match self {
            World::Current => "wasmtap:plugin@0.2.0",
            World::Previous => "wasmtap:plugin@0.1.0",
        }
    }

    /// The world a component's imports are from: the version of its `wasmtap:plugin`
    /// imports, or none if it imports nothing of the contract.
    pub fn of_import(name: &str) -> Option<World> {
        let version = name.strip_prefix("wasmtap:plugin/")?.rsplit_once('@')?.1;
        match version {
            "0.2.0" => Some(World::Current),
            "0.1.0" => Some(World::Previous),
            _ => None,
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.package())
    }
}

use types::{Frame, Value};

impl Default for types::Filter {
    /// A filter that constrains nothing.
    fn default() -> Self {
        types::Filter {
            syscalls: Vec::new(),
            uids: Vec::new(),
            comms: Vec::new(),
            pids: Vec::new(),
            cgroups: Vec::new(),
            predicates: Vec::new(),
        }
    }
}

/// One cell of a row: a row lifted from the plugin (`output.emit`), or read in place from
/// packed rows (`output.emit-packed`) without an allocation per cell.
#[derive(Clone, Copy, Debug)]
pub enum Cell<'a> {
    Int(i64),
    Text(&'a str),
    Stack(&'a [Frame]),
}

impl PartialEq for Cell<'_> {
    /// Stacks are equal when they are the same frames (frames have no equality).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Cell::Int(a), Cell::Int(b)) => a == b,
            (Cell::Text(a), Cell::Text(b)) => a == b,
            (Cell::Stack(a), Cell::Stack(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }
}

impl<'a> From<&'a Value> for Cell<'a> {
    fn from(v: &'a Value) -> Self {
        match v {
            Value::Int(i) => Cell::Int(*i),
            Value::Text(s) => Cell::Text(s),
            Value::Stack(frames) => Cell::Stack(frames),
        }
    }
}

/// A plugin-given name for a message: at most 64 bytes, control characters as `?`.
pub fn printable(s: &str) -> String {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

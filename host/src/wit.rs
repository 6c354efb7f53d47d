//! The contract's vocabulary: the bindings wasmtime generates from `wit/` (the
//! `plugin` world, its `types` and `host` interfaces), and the host's borrowed view of
//! a row cell. A leaf: it depends on nothing else of the host, and every layer that
//! speaks the contract's types takes them from here.

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
    imports: { default: trappable },
    additional_derives: [PartialEq],
});

pub use self::wasmtap::plugin::types;
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

/// One cell of a row: a row lifted from the plugin (`host.emit`), or read in place from
/// packed rows (`host.emit-packed`) without an allocation per cell.
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

//! Constructors for the WIT records a plugin builds in `info` and `start`.
//!
//! The records themselves are generated from `wit/plugin.wit` (their fields are
//! public and documented there); these only save typing.

use crate::{Column, ColumnKind, Filter, ParamKind, ParamSpec, Plan, PluginInfo, Subscription, TableSpec, Value};

impl PluginInfo {
    /// A plugin description; `name` is what users type after `wasmtap run`.
    pub fn new(name: &str, version: &str, description: &str, params: Vec<ParamSpec>) -> Self {
        PluginInfo {
            name: name.to_string(),
            version: version.to_string(),
            description: description.to_string(),
            params,
        }
    }
}

impl ParamSpec {
    /// An optional parameter with a default value (in the syntax users type: `1s`).
    pub fn new(name: &str, kind: ParamKind, default: &str, description: &str) -> Self {
        ParamSpec {
            name: name.to_string(),
            kind,
            default_value: Some(default.to_string()),
            description: description.to_string(),
        }
    }

    /// A parameter the user must give.
    pub fn required(name: &str, kind: ParamKind, description: &str) -> Self {
        ParamSpec { name: name.to_string(), kind, default_value: None, description: description.to_string() }
    }
}

impl Default for Filter {
    /// Constrains nothing.
    fn default() -> Self {
        Filter { syscalls: Vec::new(), uids: Vec::new(), comms: Vec::new() }
    }
}

impl Subscription {
    /// Subscribe to `probe` (as `wasmtap list` prints it) with no kernel filter.
    pub fn new(probe: &str) -> Self {
        Subscription { probe: probe.to_string(), filter: Filter::default() }
    }

    /// The same subscription with `filter` pushed into the kernel.
    pub fn with_filter(self, filter: Filter) -> Self {
        Subscription { filter, ..self }
    }
}

impl Column {
    /// A column; `width` is the minimum width in text output (0: as wide as needed).
    pub fn new(name: &str, kind: ColumnKind, width: u32) -> Self {
        Column { name: name.to_string(), kind, width }
    }
}

impl TableSpec {
    /// A table with these columns.
    pub fn new(name: &str, columns: Vec<Column>) -> Self {
        TableSpec { name: name.to_string(), columns }
    }
}

impl Plan {
    /// Trace these probes; no tables, no ticks.
    pub fn new(subscriptions: Vec<Subscription>) -> Self {
        Plan { subscriptions, tables: Vec::new(), tick_ms: None }
    }

    /// Declare a table; its index in `tables` is the `table` argument of `Output::row`.
    pub fn with_table(mut self, table: TableSpec) -> Self {
        self.tables.push(table);
        self
    }

    /// Call `on_tick` every `ms` milliseconds; 0 means never.
    pub fn with_tick_ms(self, ms: u32) -> Self {
        Plan { tick_ms: (ms > 0).then_some(ms), ..self }
    }
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::Int(i64::from(v))
            }
        }
    )*};
}
int_value!(i8, i16, i32, i64, u8, u16, u32, bool);

impl From<u64> for Value {
    /// Values past `i64::MAX` saturate.
    fn from(v: u64) -> Value {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}

impl From<std::borrow::Cow<'_, str>> for Value {
    fn from(v: std::borrow::Cow<'_, str>) -> Value {
        Value::Text(v.into_owned())
    }
}

//! The previous minor version of the contract, `wasmtap:plugin@0.1.0` (`wit/0.1.0/`): its
//! bindings, and conversions between its types and the current ones, so that a plugin
//! built for it runs unchanged.
//!
//! The two versions carry the same data but for two things. A filter's `syscalls` were
//! x86_64 numbers and are names now: a number becomes the name the x86_64 table gives it
//! (or its decimal digits, which no syscall is named, so the plan check refuses it as it
//! would refuse an unknown name). And `read-aggregation` returned entries and trapped on a
//! bad id, where now it returns a result; the sandbox keeps the old behaviour for old
//! plugins.

use super::types as now;

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit/0.1.0",
    imports: { default: trappable },
});

pub use self::wasmtap::plugin::{host, types as then};

/// A value of one version of the contract as the other version's.
pub trait Convert<T> {
    fn convert(self) -> T;
}

macro_rules! same {
    ($($ty:ty),*) => {$(
        impl Convert<$ty> for $ty {
            fn convert(self) -> $ty {
                self
            }
        }
    )*};
}
same!(bool, u32, u64, i64, String);

impl<A: Convert<B>, B> Convert<Vec<B>> for Vec<A> {
    fn convert(self) -> Vec<B> {
        self.into_iter().map(Convert::convert).collect()
    }
}

impl<A: Convert<B>, B> Convert<Option<B>> for Option<A> {
    fn convert(self) -> Option<B> {
        self.map(Convert::convert)
    }
}

/// Records with the same fields in both versions; `up` converts from the previous version
/// only, `both` either way.
macro_rules! records {
    (up: $($ty:ident { $($field:ident),* })*) => {$(
        impl Convert<now::$ty> for then::$ty {
            fn convert(self) -> now::$ty {
                now::$ty { $($field: self.$field.convert()),* }
            }
        }
    )*};
    (both: $($ty:ident { $($field:ident),* })*) => {$(
        records!(up: $ty { $($field),* });
        impl Convert<then::$ty> for now::$ty {
            fn convert(self) -> then::$ty {
                then::$ty { $($field: self.$field.convert()),* }
            }
        }
    )*};
}

/// Enums and variants with the same cases in both versions, either way.
macro_rules! cases {
    ($($ty:ident { $($case:ident $(($payload:ident))?),* })*) => {$(
        impl Convert<now::$ty> for then::$ty {
            fn convert(self) -> now::$ty {
                match self {
                    $(then::$ty::$case $(($payload))? => now::$ty::$case $(($payload.convert()))?),*
                }
            }
        }
        impl Convert<then::$ty> for now::$ty {
            fn convert(self) -> then::$ty {
                match self {
                    $(now::$ty::$case $(($payload))? => then::$ty::$case $(($payload.convert()))?),*
                }
            }
        }
    )*};
}

records!(both:
    ParamSpec { name, kind, default_value, description }
    PluginInfo { name, version, description, params }
    Param { name, value }
    Predicate { field, op, value }
    Field { name, c_type, kind, offset, size, count, signed }
    ProbeSchema { probe, fields, args }
    Frame { addr, symbol, offset, module, file, line }
    StackRequest { pid, kernel, addrs }
    Column { name, kind, width }
    TableSpec { name, columns }
    Row { table, values }
    Bucket { low, high, count }
    Histogram { buckets, sum }
    Percentile { millionths, value }
    Quantiles { count, sum, points }
    AggEntry { key, value }
    Aggregation { name, title, key_names, kind, order, top, entries }
    LinearBuckets { min, max, step }
);

records!(up:
    Subscription { probe, filter, stacks, optional }
    Plan { subscriptions, tables, aggregations }
    KernelAggregation { name, probe, filter, keys, function, value, start }
    StartEvent { probe, filter, key, end_key, more }
    MoreStart { probe, filter, key }
);

cases!(
    ParamKind { Integer, Boolean, Text, Duration }
    CmpOp { Eq, Ne, Lt, Le, Gt, Ge, MaskAny, MaskNone }
    FieldType { Signed, Unsigned, Text, DynamicText, DynamicBytes, Array }
    ColumnKind { Integer, Text, Timestamp }
    Value { Int(v), Text(v), Stack(v) }
    AggKind { Count, Sum, Min, Max, Avg, Stddev, Quantize, Lquantize, Llquantize, Percentiles }
    AggValue { Scalar(v), Histogram(v), Quantiles(v) }
    AggOrder { ValueAscending, ValueDescending, Key }
    AggSource { Comm, Pid, Tid, Uid, Cgroup, Syscall, Field(v), Latency }
    KernelFunction { Count, Sum, Min, Max, Log2Histogram, LinearHistogram(v) }
    Correlation { Tid, Field(v), Task(v) }
    Level { Debug, Info, Warn, Error }
);

impl Convert<now::StackMode> for then::StackMode {
    fn convert(self) -> now::StackMode {
        let mut mode = now::StackMode::empty();
        if self.contains(then::StackMode::KERNEL) {
            mode |= now::StackMode::KERNEL;
        }
        if self.contains(then::StackMode::USER) {
            mode |= now::StackMode::USER;
        }
        mode
    }
}

impl Convert<now::Filter> for then::Filter {
    fn convert(self) -> now::Filter {
        let name = |nr: u32| wasmtap_abi::syscall_name(i64::from(nr)).map_or_else(|| nr.to_string(), str::to_string);
        now::Filter {
            syscalls: self.syscalls.into_iter().map(name).collect(),
            uids: self.uids,
            comms: self.comms,
            pids: self.pids,
            cgroups: self.cgroups,
            predicates: self.predicates.convert(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_previous_filter_names_its_x86_64_syscalls() {
        let filter = then::Filter {
            syscalls: vec![0, 257, 9999],
            uids: vec![1000],
            comms: vec!["sh".into()],
            pids: vec![],
            cgroups: vec![],
            predicates: vec![then::Predicate { field: "ret".into(), op: then::CmpOp::Lt, value: 0 }],
        };
        let now: now::Filter = filter.convert();
        assert_eq!(now.syscalls, ["read", "openat", "9999"]);
        assert_eq!((now.uids, now.comms), (vec![1000], vec!["sh".to_string()]));
        assert_eq!(now.predicates, [now::Predicate { field: "ret".into(), op: now::CmpOp::Lt, value: 0 }]);
    }

    #[test]
    fn values_and_entries_convert_both_ways_unchanged() {
        let frame =
            now::Frame { addr: 1, symbol: "f".into(), offset: 2, module: "m".into(), file: String::new(), line: 0 };
        let entry = now::AggEntry {
            key: vec![now::Value::Text("sh".into()), now::Value::Stack(vec![frame])],
            value: now::AggValue::Histogram(now::Histogram {
                buckets: vec![now::Bucket { low: 0, high: 1, count: 3 }],
                sum: 7,
            }),
        };
        let then: then::AggEntry = entry.clone().convert();
        let back: now::AggEntry = then.convert();
        assert_eq!(back, entry);
    }
}

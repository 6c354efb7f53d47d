//! Constructors for the WIT records a plugin builds in `info` and `start`.
//!
//! The records themselves are generated from `wit/` (their fields are
//! public and documented there); these only save typing.

use crate::{
    CmpOp, Column, ColumnKind, Filter, ParamKind, ParamSpec, Plan, PluginInfo, Predicate, StackMode, Subscription,
    TableSpec, Value,
};

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
        Filter {
            syscalls: Vec::new(),
            uids: Vec::new(),
            comms: Vec::new(),
            pids: Vec::new(),
            cgroups: Vec::new(),
            predicates: Vec::new(),
        }
    }
}

impl Filter {
    /// The same filter, also requiring `field OP value` of a numeric field, as
    /// [`Subscription::when`] does: for the filters of kernel aggregations and their
    /// start events.
    ///
    /// ```
    /// use wasmtap_sdk::{CmpOp, Filter};
    /// let failed = Filter { syscalls: vec!["open".into(), "openat".into()], ..Filter::default() }.when("ret", CmpOp::Lt, 0);
    /// assert_eq!((failed.syscalls.len(), failed.predicates[0].field.as_str()), (2, "ret"));
    /// ```
    pub fn when(mut self, field: &str, op: CmpOp, value: i64) -> Self {
        self.predicates.push(Predicate { field: field.to_string(), op, value });
        self
    }
}

impl Subscription {
    /// Subscribe to `probe` (as `wasmtap list` prints it) with no kernel filter and no
    /// stacks. Timers are probes too: `interval:ms:500`, `interval:s:1`, `begin`, `end`
    /// call [`Plugin::on_tick`](crate::Plugin::on_tick) with this subscription's index.
    pub fn new(probe: &str) -> Self {
        Subscription {
            probe: probe.to_string(),
            filter: Filter::default(),
            stacks: StackMode::empty(),
            optional: false,
        }
    }

    /// The same subscription with `filter` pushed into the kernel, replacing any
    /// filter built so far.
    pub fn with_filter(self, filter: Filter) -> Self {
        Subscription { filter, ..self }
    }

    /// Also match process `pid` (a tgid). Calls add up: any listed process matches.
    pub fn pid(mut self, pid: u32) -> Self {
        self.filter.pids.push(pid);
        self
    }

    /// Also match tasks of real user id `uid`. Calls add up: any listed uid matches.
    pub fn uid(mut self, uid: u32) -> Self {
        self.filter.uids.push(uid);
        self
    }

    /// Also match tasks named `comm` (at most 15 bytes, as the kernel keeps it). Calls
    /// add up: any listed name matches.
    pub fn comm(mut self, comm: &str) -> Self {
        self.filter.comms.push(comm.to_string());
        self
    }

    /// Also match tasks in cgroup v2 directory `path` or below it (absolute, or
    /// relative to the cgroup2 mount). Calls add up: any listed cgroup matches.
    pub fn cgroup(mut self, path: &str) -> Self {
        self.filter.cgroups.push(path.to_string());
        self
    }

    /// Require `field OP value` of the probe's numeric field `field` (a tracepoint field
    /// by its tracefs name, `arg0`.., `ret`, `retval`, `addr`; see `wit/probes.wit`).
    /// Calls add up: every predicate must hold. The first four run in the kernel.
    ///
    /// ```
    /// use wasmtap_sdk::{CmpOp, Subscription};
    /// // SIGKILLs only, decided before the event leaves the kernel.
    /// let kills = Subscription::new("tracepoint:signal:signal_generate").when("sig", CmpOp::Eq, 9);
    /// assert_eq!(kills.filter.predicates.len(), 1);
    /// ```
    pub fn when(mut self, field: &str, op: CmpOp, value: i64) -> Self {
        self.filter.predicates.push(Predicate { field: field.to_string(), op, value });
        self
    }

    /// Record these stacks with each event: `StackMode::KERNEL`, `StackMode::USER`, or
    /// both (`StackMode::KERNEL | StackMode::USER`). Read them with
    /// [`Event::stacks`](crate::Event::stacks) or [`Event::stack`](crate::Event::stack).
    pub fn stacks(self, stacks: StackMode) -> Self {
        Subscription { stacks, ..self }
    }

    /// If this kernel or binary lacks the probe, skip it with a warning instead of
    /// refusing to start.
    pub fn optional(self) -> Self {
        Subscription { optional: true, ..self }
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
    /// Trace these probes; no tables, no kernel aggregations. A subscription's index in
    /// the list is what [`Event::sub`](crate::Event::sub) and `on_tick`'s `sub` report.
    pub fn new(subscriptions: Vec<Subscription>) -> Self {
        Plan { subscriptions, tables: Vec::new(), aggregations: Vec::new() }
    }

    /// Declare a table; its index in `tables` is the `table` argument of `Output::row`.
    pub fn with_table(mut self, table: TableSpec) -> Self {
        self.tables.push(table);
        self
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_builders_fill_the_wit_filter() {
        let sub = Subscription::new("tracepoint:signal:signal_generate")
            .pid(10)
            .pid(11)
            .uid(1000)
            .comm("bash")
            .cgroup("/system.slice")
            .when("sig", CmpOp::Eq, 9)
            .when("errno", CmpOp::MaskNone, 0xff)
            .stacks(StackMode::KERNEL | StackMode::USER)
            .optional();
        let want = Subscription {
            probe: "tracepoint:signal:signal_generate".into(),
            filter: Filter {
                syscalls: vec![],
                uids: vec![1000],
                comms: vec!["bash".into()],
                pids: vec![10, 11],
                cgroups: vec!["/system.slice".into()],
                predicates: vec![
                    Predicate { field: "sig".into(), op: CmpOp::Eq, value: 9 },
                    Predicate { field: "errno".into(), op: CmpOp::MaskNone, value: 0xff },
                ],
            },
            stacks: StackMode::KERNEL | StackMode::USER,
            optional: true,
        };
        assert_eq!(sub, want);
    }

    #[test]
    fn filter_predicates_add_up() {
        let f = Filter { pids: vec![1], ..Filter::default() }.when("ret", CmpOp::Lt, 0).when("fd", CmpOp::Eq, 3);
        let want = [
            Predicate { field: "ret".into(), op: CmpOp::Lt, value: 0 },
            Predicate { field: "fd".into(), op: CmpOp::Eq, value: 3 },
        ];
        assert_eq!((f.pids, f.predicates), (vec![1], want.to_vec()));
    }

    #[test]
    fn a_new_subscription_asks_for_nothing_extra() {
        let sub = Subscription::new("interval:ms:500");
        assert_eq!(sub.filter, Filter::default());
        assert_eq!(sub.stacks, StackMode::empty());
        assert!(!sub.optional);
        let filtered = Subscription::new("syscall:openat:entry").uid(1).with_filter(Filter::default()).pid(3);
        assert_eq!(filtered.filter, Filter { pids: vec![3], ..Filter::default() });
    }

    #[test]
    fn plans_list_subscriptions_and_tables_in_order() {
        let plan = Plan::new(vec![Subscription::new("proc:exec"), Subscription::new("interval:s:1")])
            .with_table(TableSpec::new("t", vec![Column::new("PID", ColumnKind::Integer, 7)]));
        let probes: Vec<_> = plan.subscriptions.iter().map(|s| s.probe.as_str()).collect();
        assert_eq!(probes, ["proc:exec", "interval:s:1"]);
        assert_eq!(plan.tables[0].columns[0].name, "PID");
    }
}

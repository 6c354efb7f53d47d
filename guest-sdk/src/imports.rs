//! The host imports that answer with data (`schema`, `symbolize`,
//! `read-aggregation`) and the diagnostics import (`log`), behind one choke point.
//!
//! In a component (`wasm32`) they are the WIT imports. In a native build — the SDK's
//! and a plugin's `cargo test` — there is no host: [`testing`] stands in for it, so
//! code that decodes tracepoint fields, symbolizes stacks, reads kernel aggregations
//! or logs runs in a unit test.

use crate::AggEntry;
#[cfg(target_arch = "wasm32")]
use crate::{Frame, Level, ProbeSchema, StackRequest};

/// A snapshot of kernel aggregation `id` (its index in the plan's `aggregations`), or
/// why there is none (no such aggregation in the plan, a map the kernel would not read):
/// one entry per key, key parts in the order of its `keys` (comm as text, the rest as
/// integers); count, sum, min and max as `Scalar`, histograms as `Histogram`. With
/// `reset`, the next snapshot starts from zero, DTrace's `clear()`: what happens
/// between two reads lands in exactly one of them. A host call: read at a tick, not
/// per event. Fold the entries into an [`Agg`](crate::Agg) with
/// [`Agg::merge_entries`](crate::Agg::merge_entries) to translate keys, or pass them
/// to [`from_entries`](crate::from_entries).
pub fn read_aggregation(id: u32, reset: bool) -> Result<Vec<AggEntry>, String> {
    read_aggregation_import(id, reset)
}

/// `kernel-aggregations.read-aggregation`.
#[cfg(target_arch = "wasm32")]
fn read_aggregation_import(id: u32, reset: bool) -> Result<Vec<AggEntry>, String> {
    crate::bindings::wasmtap::plugin::kernel_aggregations::read_aggregation(id, reset)
}

/// `services.log`.
#[cfg(target_arch = "wasm32")]
pub(crate) fn log(level: Level, msg: &str) {
    crate::bindings::wasmtap::plugin::services::log(level, msg);
}

/// End the run once this call returns, as Ctrl-C would: the `end` probes fire and every
/// plugin reports (bpftrace's `exit()`). In a native build, [`testing::exits`] counts
/// the calls.
pub fn exit() {
    exit_import();
}

#[cfg(target_arch = "wasm32")]
fn exit_import() {
    crate::bindings::wasmtap::plugin::services::exit();
}

#[cfg(not(target_arch = "wasm32"))]
fn exit_import() {
    testing::EXITS.with(|n| n.set(n.get() + 1));
}

/// The tracepoints whose names match `pattern` (`tracepoint:sched:sched*`: `*` matches
/// anything), sorted, as `wasmtap list` names them: the live system's, or in a replay
/// the recording's. Call it in [`Plugin::start`](crate::Plugin::start) (at most 64
/// times) and subscribe to each name wanted; elsewhere it answers an error. In a native
/// build, [`testing::set_tracepoints`] says what there is.
pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
    expand_import(pattern)
}

#[cfg(target_arch = "wasm32")]
fn expand_import(pattern: &str) -> Result<Vec<String>, String> {
    crate::bindings::wasmtap::plugin::probes::expand(pattern)
}

/// The layout a subscription to tracepoint `probe` (`tracepoint:CATEGORY:NAME`) would
/// have, before subscribing: on the live system this kernel's format, in a replay the
/// recording's. Call it in [`Plugin::start`](crate::Plugin::start), to plan by a field's
/// type (at most 1024 times); elsewhere it answers an error. A uprobe, uretprobe or USDT
/// probe is described too (no fields; each costs 16 of the 1024): the answer says
/// whether it can attach (its binary and function exist; in a replay, whether the
/// recording has it) or why not. In a native build,
/// [`testing::set_described`] says what there is.
pub fn describe(probe: &str) -> Result<crate::ProbeSchema, String> {
    describe_import(probe)
}

#[cfg(target_arch = "wasm32")]
fn describe_import(probe: &str) -> Result<crate::ProbeSchema, String> {
    crate::bindings::wasmtap::plugin::probes::describe(probe)
}

/// Ask that the records of this plan's subscriptions to `probe` carry the strings the
/// pointer fields `fields` point to in the traced process (bpftrace's
/// `str(args.filename)`), read in the kernel as the probe fires: a tracepoint's pointer
/// fields by name, `arg0`..`arg5` of a uprobe, `retval` of a uretprobe. Call it in
/// [`Plugin::start`](crate::Plugin::start), at most 4 fields a probe; read them with
/// [`Tracepoint::user_string`](crate::Tracepoint::user_string) and
/// [`UserProbe::user_string`](crate::UserProbe::user_string). A field the probe lacks,
/// or one that is not a pointer, fails the plan with a message naming it. In a native
/// build, [`testing::strings_asked`] tells what was asked.
pub fn user_strings(probe: &str, fields: &[&str]) -> Result<(), String> {
    let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
    user_strings_import(probe, &fields)
}

#[cfg(target_arch = "wasm32")]
fn user_strings_import(probe: &str, fields: &[String]) -> Result<(), String> {
    crate::bindings::wasmtap::plugin::probes::user_strings(probe, fields)
}

/// `probes.schema`.
#[cfg(target_arch = "wasm32")]
pub(crate) fn schema(sub: u32) -> Option<ProbeSchema> {
    crate::bindings::wasmtap::plugin::probes::schema(sub)
}

/// `services.symbolize`.
#[cfg(target_arch = "wasm32")]
pub(crate) fn symbolize(requests: &[StackRequest]) -> Vec<Vec<Frame>> {
    crate::bindings::wasmtap::plugin::services::symbolize(requests)
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use testing::{
    describe as describe_import, expand as expand_import, log, read_aggregation as read_aggregation_import, schema,
    symbolize, user_strings as user_strings_import,
};

/// Stand-ins for the host's `schema`, `symbolize`, `read-aggregation` and `log`
/// imports in native builds, for unit tests of plugins and of the SDK.
///
/// State is per thread (each `#[test]` runs on its own), so tests do not see each
/// other's schemas. Without a stand-in, `schema` answers `None`, `symbolize` knows no
/// symbols and `read_aggregation` answers with no entries; logs are kept for
/// [`take_logs`](testing::take_logs).
///
/// ```
/// use wasmtap_sdk::{testing, Field, FieldType, ProbeSchema};
/// let sig = Field {
///     name: "sig".into(),
///     c_type: "int".into(),
///     kind: FieldType::Signed,
///     offset: 8,
///     size: 4,
///     count: 1,
///     signed: true,
/// };
/// let probe = "tracepoint:signal:signal_generate".to_string();
/// testing::set_schema(0, ProbeSchema { probe, fields: vec![sig], args: vec![] });
/// assert!(wasmtap_sdk::schema(0).unwrap().field_ref("sig").is_some());
/// ```
#[cfg(not(target_arch = "wasm32"))]
pub mod testing {
    use std::cell::RefCell;

    use crate::{AggEntry, Frame, FxHashMap, Level, ProbeSchema, StackRequest};

    type Symbolizer = Box<dyn FnMut(&[StackRequest]) -> Vec<Vec<Frame>>>;
    type Aggregations = Box<dyn FnMut(u32, bool) -> Vec<AggEntry>>;

    thread_local! {
        static SCHEMAS: RefCell<FxHashMap<u32, ProbeSchema>> = RefCell::new(FxHashMap::default());
        static SYMBOLIZER: RefCell<Option<Symbolizer>> = const { RefCell::new(None) };
        static AGGREGATIONS: RefCell<Option<Aggregations>> = const { RefCell::new(None) };
        static LOGS: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
        static TRACEPOINTS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
        static STRINGS: RefCell<Vec<(String, Vec<String>)>> = const { RefCell::new(Vec::new()) };
        static DESCRIBED: RefCell<Vec<ProbeSchema>> = const { RefCell::new(Vec::new()) };
    }

    /// Answer [`describe`](crate::describe) of `schema.probe` with `schema` from now on,
    /// as the host answers from the system's tracepoints; other probes are unknown.
    pub fn set_described(schema: ProbeSchema) {
        DESCRIBED.with(|d| {
            let mut d = d.borrow_mut();
            d.retain(|s| s.probe != schema.probe);
            d.push(schema);
        });
    }

    pub(crate) fn describe(probe: &str) -> Result<ProbeSchema, String> {
        DESCRIBED
            .with(|d| d.borrow().iter().find(|s| s.probe == probe).cloned())
            .ok_or_else(|| format!("no tracepoint `{probe}` here"))
    }

    /// The [`user_strings`](crate::user_strings) requests made on this thread since the
    /// last call: (probe, fields), in order.
    pub fn strings_asked() -> Vec<(String, Vec<String>)> {
        STRINGS.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    pub(crate) fn user_strings(probe: &str, fields: &[String]) -> Result<(), String> {
        if fields.is_empty() || fields.len() > wasmtap_abi::strings::MAX {
            return Err(format!("`{probe}`: 1 to {} fields a probe", wasmtap_abi::strings::MAX));
        }
        STRINGS.with(|s| s.borrow_mut().push((probe.to_string(), fields.to_vec())));
        Ok(())
    }

    /// Answer [`expand`](crate::expand) from `names` (`tracepoint:CATEGORY:NAME`) from
    /// now on, as the host answers from the system's tracepoints.
    pub fn set_tracepoints(names: &[&str]) {
        TRACEPOINTS.with(|t| *t.borrow_mut() = names.iter().map(|n| n.to_string()).collect());
    }

    pub(crate) fn expand(pattern: &str) -> Result<Vec<String>, String> {
        let Some(rest) = pattern.strip_prefix("tracepoint:") else {
            return Err(format!("`{pattern}`: only tracepoints are expanded"));
        };
        let mut found: Vec<String> = TRACEPOINTS.with(|t| {
            t.borrow()
                .iter()
                .filter(|n| n.strip_prefix("tracepoint:").is_some_and(|n| glob(rest, n)))
                .cloned()
                .collect()
        });
        found.sort();
        if found.is_empty() {
            return Err(format!("no tracepoint matches `{pattern}`"));
        }
        Ok(found)
    }

    /// `*` matches any run of characters, anything else itself.
    fn glob(pattern: &str, text: &str) -> bool {
        match pattern.split_once('*') {
            None => pattern == text,
            Some((head, tail)) => {
                text.starts_with(head)
                    && (0..=text.len() - head.len())
                        .any(|i| text.is_char_boundary(head.len() + i) && glob(tail, &text[head.len() + i..]))
            }
        }
    }

    /// Answer `probes.schema(sub)` with `schema` from now on. Like with the real host,
    /// the SDK keeps the first answer it gets for `sub` until the plugin starts again:
    /// install schemas before starting the plugin under test.
    pub fn set_schema(sub: u32, schema: ProbeSchema) {
        SCHEMAS.with(|s| s.borrow_mut().insert(sub, schema));
    }

    /// Answer `services.symbolize` with `symbolizer`: it gets each call's requests and
    /// returns one list of frames per request, one frame per address, like the host.
    pub fn set_symbolizer(symbolizer: impl FnMut(&[StackRequest]) -> Vec<Vec<Frame>> + 'static) {
        SYMBOLIZER.with(|s| *s.borrow_mut() = Some(Box::new(symbolizer)));
    }

    /// Answer `kernel-aggregations.read-aggregation(id, reset)` with `snapshot(id, reset)`: the
    /// entries of kernel aggregation `id`, as the host would report them.
    ///
    /// ```
    /// use wasmtap_sdk::{read_aggregation, testing, AggEntry, AggValue, Value};
    /// testing::set_aggregations(|id, _reset| {
    ///     vec![AggEntry { key: vec![Value::Int(i64::from(id))], value: AggValue::Scalar(7) }]
    /// });
    /// assert_eq!(read_aggregation(3, true).unwrap()[0].key, [Value::Int(3)]);
    /// ```
    pub fn set_aggregations(snapshot: impl FnMut(u32, bool) -> Vec<AggEntry> + 'static) {
        AGGREGATIONS.with(|a| *a.borrow_mut() = Some(Box::new(snapshot)));
    }

    /// The messages logged on this thread since the last call (`services.log`: the
    /// plugin's [`log`](crate::log), the SDK's reports of dropped samples), oldest first.
    pub fn take_logs() -> Vec<(Level, String)> {
        LOGS.with(|l| std::mem::take(&mut *l.borrow_mut()))
    }

    pub(crate) fn read_aggregation(id: u32, reset: bool) -> Result<Vec<AggEntry>, String> {
        AGGREGATIONS.with(|a| match a.borrow_mut().as_mut() {
            Some(snapshot) => Ok(snapshot(id, reset)),
            None => Ok(Vec::new()),
        })
    }

    pub(crate) fn log(level: Level, msg: &str) {
        LOGS.with(|l| l.borrow_mut().push((level, msg.to_string())));
    }

    thread_local! {
        pub(crate) static EXITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// How many times [`exit`](crate::exit) was called on this thread.
    pub fn exits() -> usize {
        EXITS.with(|n| n.get())
    }

    pub(crate) fn schema(sub: u32) -> Option<ProbeSchema> {
        #[cfg(test)]
        SCHEMA_CALLS.with(|n| n.set(n.get() + 1));
        SCHEMAS.with(|s| s.borrow().get(&sub).cloned())
    }

    #[cfg(test)]
    thread_local! {
        static SCHEMA_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// How often the SDK asked for a schema on this thread.
    #[cfg(test)]
    pub(crate) fn schema_calls() -> usize {
        SCHEMA_CALLS.with(|n| n.get())
    }

    pub(crate) fn symbolize(requests: &[StackRequest]) -> Vec<Vec<Frame>> {
        SYMBOLIZER.with(|s| match s.borrow_mut().as_mut() {
            Some(symbolizer) => symbolizer(requests),
            None => Vec::new(),
        })
    }
}

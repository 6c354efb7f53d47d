//! The host imports that answer with data (`schema`, `symbolize`), behind one choke
//! point.
//!
//! In a component (`wasm32`) they are the WIT imports. In a native build — the SDK's
//! and a plugin's `cargo test` — there is no host: [`testing`] stands in for it, so
//! code that decodes tracepoint fields or symbolizes stacks runs in a unit test.

#[cfg(target_arch = "wasm32")]
use crate::{Frame, ProbeSchema, StackRequest};

/// `host.schema`.
#[cfg(target_arch = "wasm32")]
pub(crate) fn schema(sub: u32) -> Option<ProbeSchema> {
    crate::bindings::wasmtap::plugin::host::schema(sub)
}

/// `host.symbolize`.
#[cfg(target_arch = "wasm32")]
pub(crate) fn symbolize(requests: &[StackRequest]) -> Vec<Vec<Frame>> {
    crate::bindings::wasmtap::plugin::host::symbolize(requests)
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use testing::{schema, symbolize};

/// Stand-ins for the host's `schema` and `symbolize` imports in native builds, for
/// unit tests of plugins and of the SDK.
///
/// State is per thread (each `#[test]` runs on its own), so tests do not see each
/// other's schemas. Without a stand-in, `schema` answers `None` and `symbolize` knows
/// no symbols.
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

    use crate::{Frame, FxHashMap, ProbeSchema, StackRequest};

    type Symbolizer = Box<dyn FnMut(&[StackRequest]) -> Vec<Vec<Frame>>>;

    thread_local! {
        static SCHEMAS: RefCell<FxHashMap<u32, ProbeSchema>> = RefCell::new(FxHashMap::default());
        static SYMBOLIZER: RefCell<Option<Symbolizer>> = const { RefCell::new(None) };
    }

    /// Answer `host.schema(sub)` with `schema` from now on. Like with the real host,
    /// the SDK keeps the first answer it gets for `sub` until the plugin starts again:
    /// install schemas before starting the plugin under test.
    pub fn set_schema(sub: u32, schema: ProbeSchema) {
        SCHEMAS.with(|s| s.borrow_mut().insert(sub, schema));
    }

    /// Answer `host.symbolize` with `symbolizer`: it gets each call's requests and
    /// returns one list of frames per request, one frame per address, like the host.
    pub fn set_symbolizer(symbolizer: impl FnMut(&[StackRequest]) -> Vec<Vec<Frame>> + 'static) {
        SYMBOLIZER.with(|s| *s.borrow_mut() = Some(Box::new(symbolizer)));
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

//! The glue `export_plugin!` expands to: the WIT exports, implemented once over any
//! [`Plugin`]. Not part of the public API; reached only through the macro.

use std::cell::{Cell, RefCell};

use wasmtap_abi::Records;

use crate::bindings::wasmtap::plugin::host;
use crate::{Aggregation, Event, Level, Output, Param, Params, Plan, Plugin};

/// The state of one plugin instance. Wasm components are single-threaded, so the
/// macro keeps one `Slot` in a `thread_local!` and calls into it from each export.
pub struct Slot<P> {
    plugin: RefCell<Option<P>>,
    warned_malformed: Cell<bool>,
}

impl<P> Default for Slot<P> {
    fn default() -> Self {
        Slot::new()
    }
}

impl<P> Slot<P> {
    /// Not started.
    pub const fn new() -> Self {
        Slot {
            plugin: RefCell::new(None),
            warned_malformed: Cell::new(false),
        }
    }
}

impl<P: Plugin> Slot<P> {
    /// `start`: a failed start leaves the plugin stopped.
    pub fn start(&self, params: Vec<Param>) -> Result<Plan, String> {
        let started = P::start(&Params::new(params));
        let mut slot = self.plugin.borrow_mut();
        match started {
            Ok((plugin, plan)) => {
                *slot = Some(plugin);
                Ok(plan)
            }
            Err(msg) => {
                *slot = None;
                Err(msg)
            }
        }
    }

    /// `on-batch`: decode every record in place and hand it to the plugin, then flush
    /// the output once. Ignored before a successful `start` and after `finish`.
    pub fn on_batch(&self, batch: &[u8]) {
        let mut out = Output::new();
        let mut used = 0;
        {
            let mut slot = self.plugin.borrow_mut();
            let Some(plugin) = slot.as_mut() else { return };
            for rec in Records::new(batch) {
                used += rec.bytes().len();
                if let Some(ev) = Event::new(rec) {
                    plugin.on_event(&ev, &mut out);
                }
            }
        }
        out.flush();
        if used < batch.len() {
            self.warn_malformed(batch.len() - used);
        }
    }

    /// `on-tick`.
    pub fn on_tick(&self, now_ns: u64) -> Vec<Aggregation> {
        let mut out = Output::new();
        let aggs = match self.plugin.borrow_mut().as_mut() {
            Some(plugin) => plugin.on_tick(now_ns, &mut out),
            None => Vec::new(),
        };
        out.flush();
        aggs
    }

    /// `finish`: the plugin is dropped afterwards; later batches are ignored.
    pub fn finish(&self) -> Vec<Aggregation> {
        let Some(mut plugin) = self.plugin.borrow_mut().take() else {
            return Vec::new();
        };
        let mut out = Output::new();
        let aggs = plugin.finish(&mut out);
        out.flush();
        aggs
    }

    /// A batch whose tail does not parse means a host/plugin ABI mismatch; say so once
    /// rather than per batch.
    fn warn_malformed(&self, skipped: usize) {
        if !self.warned_malformed.replace(true) {
            let msg = format!(
                "skipped {skipped} bytes of a malformed or unknown record \
                 (event layout v{}); further occurrences are not reported",
                wasmtap_abi::LAYOUT_VERSION
            );
            host::log(Level::Warn, &msg);
        }
    }
}

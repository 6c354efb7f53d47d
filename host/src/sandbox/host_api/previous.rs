//! The imports of `wasmtap:plugin@0.1.0` (one `host` interface), answered by the current
//! ones through the conversions of `wit::previous`, with that version's behaviour where
//! it differs: `read-aggregation` traps on an id the plan did not declare, and answers a
//! map it could not read with a warning and no entries.

use super::*;
use crate::sandbox::ReadError;
use crate::wit::previous::{host, then, Convert};
use crate::wit::{output, probes, services};

impl then::Host for StoreState {}

impl host::Host for StoreState {
    fn emit(&mut self, rows: Vec<then::Row>) -> wasmtime::Result<()> {
        output::Host::emit(self, rows.convert())
    }

    fn emit_packed(&mut self, rows: Vec<u8>) -> wasmtime::Result<()> {
        output::Host::emit_packed(self, rows)
    }

    fn print(&mut self, text: String) -> wasmtime::Result<()> {
        output::Host::print(self, text)
    }

    fn log(&mut self, level: then::Level, message: String) -> wasmtime::Result<()> {
        services::Host::log(self, level.convert(), message)
    }

    fn monotonic_ns(&mut self) -> wasmtime::Result<u64> {
        services::Host::monotonic_ns(self)
    }

    fn wall_ns(&mut self) -> wasmtime::Result<u64> {
        services::Host::wall_ns(self)
    }

    fn schema(&mut self, sub: u32) -> wasmtime::Result<Option<then::ProbeSchema>> {
        Ok(probes::Host::schema(self, sub)?.convert())
    }

    /// Not reached: `sandbox::symbolize_counted_first` shadows it, as for the current version.
    fn symbolize(&mut self, stacks: Vec<then::StackRequest>) -> wasmtime::Result<Vec<Vec<then::Frame>>> {
        Ok(services::Host::symbolize(self, stacks.convert())?.convert())
    }

    fn read_aggregation(&mut self, id: u32, reset: bool) -> wasmtime::Result<Vec<then::AggEntry>> {
        match self.read_aggregation(id, reset) {
            Ok(entries) => Ok(entries.convert()),
            Err(e @ ReadError::NoSuch { .. }) => Err(wasmtime::Error::msg(format!("read-aggregation: {e}"))),
            Err(e @ ReadError::Failed { .. }) => {
                services::Host::log(self, types::Level::Warn, e.to_string())?;
                Ok(Vec::new())
            }
        }
    }
}

//! `wasmtap:plugin/services`: log lines (charged like output, a few shown per call), the
//! run's clocks, and the symbolizer.

use super::*;
use crate::wit::services;

impl services::Host for StoreState {
    fn log(&mut self, level: types::Level, message: String) -> wasmtime::Result<()> {
        if self.host.out.charge_log(message.len().max(LOG_MIN_BYTES))? {
            self.host.out.items.push(GuestItem::Log(LogLine { level, message }));
        }
        Ok(())
    }

    fn monotonic_ns(&mut self) -> wasmtime::Result<u64> {
        Ok(self.host.clock.mono_ns())
    }

    fn wall_ns(&mut self) -> wasmtime::Result<u64> {
        let mono = self.host.clock.mono_ns();
        Ok(self.host.clock.wall_of(mono))
    }

    fn exit(&mut self) -> wasmtime::Result<()> {
        self.host.out.exit = true;
        Ok(())
    }

    /// Not reached: `sandbox::symbolize_counted_first` shadows it, to count requests
    /// before copying them.
    fn symbolize(&mut self, stacks: Vec<types::StackRequest>) -> wasmtime::Result<Vec<Vec<types::Frame>>> {
        self.host.symbolize.answer(&stacks).map_err(wasmtime::Error::new)
    }
}

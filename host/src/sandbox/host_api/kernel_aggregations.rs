//! `wasmtap:plugin/kernel-aggregations`: snapshots of the plan's kernel aggregations.

use super::*;
use crate::sandbox::ReadError;
use crate::wit::kernel_aggregations;

impl kernel_aggregations::Host for StoreState {
    fn read_aggregation(&mut self, id: u32, reset: bool) -> wasmtime::Result<Result<Vec<types::AggEntry>, String>> {
        Ok(self.read_aggregation(id, reset).map_err(|e| e.to_string()))
    }
}

impl StoreState {
    /// A snapshot of the plugin's kernel aggregation `id`.
    pub(super) fn read_aggregation(&mut self, id: u32, reset: bool) -> Result<Vec<types::AggEntry>, ReadError> {
        match self.host.aggregates.as_mut() {
            Some(aggs) => aggs.read(id, reset),
            None => Err(ReadError::NoSuch { id, declared: 0 }),
        }
    }
}

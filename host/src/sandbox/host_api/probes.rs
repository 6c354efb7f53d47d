//! `wasmtap:plugin/probes`: the layout of a subscription's records.

use super::*;
use crate::wit::probes;

impl probes::Host for StoreState {
    fn schema(&mut self, sub: u32) -> wasmtime::Result<Option<types::ProbeSchema>> {
        Ok(self.host.schemas.get(sub as usize).cloned().flatten())
    }
}

//! One memory cap per plugin. wasmtime's `StoreLimits` caps each linear memory alone,
//! so a component made of several core instances, each with a memory of its own, could
//! hold the cap once per memory. This limiter sums every memory and table of the store,
//! and refuses growth past the plugin's cap with a typed error the fault classifier
//! recognises.

use wasmtime::ResourceLimiter;

/// Bytes a table element costs the host (wasmtime keeps a pointer per element, and a
/// funcref slot carries a little more; round up so the sum never under-counts).
pub const TABLE_ELEMENT_BYTES: usize = 16;

/// Growth past the plugin's memory cap: the plugin faults with `memory`.
#[derive(Debug, thiserror::Error)]
#[error("grew its memories and tables to {wanted} bytes in all, past its limit of {limit} bytes")]
pub struct MemoryCap {
    pub wanted: usize,
    pub limit: usize,
}

/// The limits of one plugin's store, summed over all its memories and tables.
#[derive(Debug)]
pub struct PluginLimiter {
    /// Bytes of linear memory and table elements together.
    cap: usize,
    /// Bytes granted so far: memories and tables never shrink, and are freed only with
    /// the store.
    used: usize,
    /// What the last grant added, given back if the engine then fails to map it.
    last_grant: usize,
    /// Core instances, tables and memories, each: a backstop, as `footprint` refuses a
    /// plugin over it before instantiating.
    count: usize,
}

impl PluginLimiter {
    pub fn new(cap: usize, count: usize) -> PluginLimiter {
        PluginLimiter { cap, used: 0, last_grant: 0, count }
    }

    /// Bytes of memory and tables the plugin holds now.
    pub fn used(&self) -> usize {
        self.used
    }

    fn grow(&mut self, current: usize, desired: usize) -> wasmtime::Result<bool> {
        let wanted = self.used.saturating_sub(current).saturating_add(desired);
        if wanted > self.cap {
            return Err(wasmtime::Error::new(MemoryCap { wanted, limit: self.cap }));
        }
        self.last_grant = wanted - self.used.min(wanted);
        self.used = wanted;
        Ok(true)
    }
}

impl ResourceLimiter for PluginLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(current, desired)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // Granted here, but the engine could not map it: `memory.grow` returns -1.
        self.used -= std::mem::take(&mut self.last_grant);
        Ok(())
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(current.saturating_mul(TABLE_ELEMENT_BYTES), desired.saturating_mul(TABLE_ELEMENT_BYTES))
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.used -= std::mem::take(&mut self.last_grant);
        Ok(())
    }

    fn instances(&self) -> usize {
        self.count
    }

    fn tables(&self) -> usize {
        self.count
    }

    fn memories(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_summed_over_memories_and_tables() {
        let mut l = PluginLimiter::new(100 << 20, 16);
        // Three memories of 30 MiB each: the third passes the 100 MiB cap.
        assert!(l.memory_growing(0, 30 << 20, None).unwrap());
        assert!(l.memory_growing(0, 30 << 20, None).unwrap());
        assert!(l.memory_growing(0, 30 << 20, None).unwrap());
        let err = l.memory_growing(0, 30 << 20, None).unwrap_err();
        let cap = err.downcast_ref::<MemoryCap>().expect("a MemoryCap");
        assert_eq!((cap.wanted, cap.limit), (120 << 20, 100 << 20));
        // Growing one of them counts only the difference.
        assert!(l.memory_growing(30 << 20, 40 << 20, None).unwrap());
        assert_eq!(l.used(), 100 << 20);
        // Tables cost their elements against the same cap.
        assert!(l.memory_growing(0, 0, None).unwrap());
        assert!(l.table_growing(0, 1, None).is_err());
    }
}

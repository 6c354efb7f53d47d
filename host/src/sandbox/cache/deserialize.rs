//! The one `unsafe` call outside `sys`: turning an entry's payload back into compiled code.
//!
//! `Component::deserialize` trusts its bytes to be machine code wasmtime wrote; handed
//! anything else it can run it. It lives alone in this file so that the one caller and
//! the proof it owes can be read together.
#![allow(unsafe_code)]

use wasmtime::component::Component;
use wasmtime::Engine;

/// A payload the cache has proven it wrote: its entry's name and checksum matched, and the
/// file and its directory belong to the effective uid and are writable by no one else.
/// Only `cache::read_entry` makes one, after those checks.
pub(super) struct Proven<'a>(&'a [u8]);

impl<'a> Proven<'a> {
    /// Vouch for `payload`. The caller must have made the checks above.
    pub(super) fn after_checks(payload: &'a [u8]) -> Self {
        Proven(payload)
    }
}

/// The compiled component in `payload`.
pub(super) fn component(engine: &Engine, payload: Proven<'_>) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` requires bytes produced by `Component::serialize` or
    // `Engine::precompile_component` of a compatible wasmtime. A `Proven` payload was written
    // by `store_entry` from `Component::serialize`; its checksum shows it is unchanged since;
    // the file and its directory belong to the effective uid and are not writable by anyone
    // else, so no other user could have planted it with a matching checksum. Wasmtime itself
    // rejects payloads of another version or engine configuration with an error.
    unsafe { Component::deserialize(engine, payload.0) }
}

//! The store's limits against hand-made components: what no plugin toolchain emits, but
//! a hostile plugin may.

use wasm_encoder::{Component, InstanceSection, MemorySection, MemoryType, Module, ModuleArg, ModuleSection};
use wasmtime::component::Linker;

use super::*;

/// A core module with one memory of `pages` 64 KiB pages, or with two (multi-memory).
fn module(pages: u64, memories: usize) -> Module {
    let mut mem = MemorySection::new();
    for _ in 0..memories {
        mem.memory(MemoryType { minimum: pages, maximum: None, memory64: false, shared: false, page_size_log2: None });
    }
    let mut m = Module::new();
    m.section(&mem);
    m
}

/// A component instantiating `modules` core modules, each with a memory of `pages` pages.
fn component(modules: usize, pages: u64) -> Vec<u8> {
    let mut c = Component::new();
    let m = module(pages, 1);
    let mut instances = InstanceSection::new();
    for i in 0..modules {
        c.section(&ModuleSection(&m));
        instances.instantiate(i as u32, Vec::<(&str, ModuleArg)>::new());
    }
    c.section(&instances);
    c.finish()
}

fn instantiate(sandbox: &Sandbox, bytes: &[u8], limits: &Limits) -> wasmtime::Result<()> {
    let component = wasmtime::component::Component::new(&sandbox.engine, bytes)?;
    let mut store = new_store(&sandbox.engine, Clock::live(), limits, Arc::default());
    Linker::<StoreState>::new(&sandbox.engine).instantiate(&mut store, &component)?;
    Ok(())
}

#[test]
fn memories_of_several_core_instances_share_one_cap() {
    let sandbox = Sandbox::new().unwrap();
    let limits = Limits::default();
    // Three memories of 20 MiB fit in 64 MiB together; four do not, though each alone would.
    let pages = (20 << 20) / 65536;
    instantiate(&sandbox, &component(3, pages), &limits).expect("60 MiB in all");
    let err = instantiate(&sandbox, &component(4, pages), &limits).unwrap_err();
    let cap = err.downcast_ref::<limiter::MemoryCap>().unwrap_or_else(|| panic!("not a memory cap: {err:#}"));
    assert_eq!((cap.wanted, cap.limit), (80 << 20, 64 << 20));
}

#[test]
fn more_core_instances_than_the_limit_are_refused() {
    let sandbox = Sandbox::new().unwrap();
    let limits = Limits { instances: 4, ..Limits::default() };
    instantiate(&sandbox, &component(4, 1), &limits).expect("four instances");
    let err = instantiate(&sandbox, &component(5, 1), &limits).unwrap_err();
    assert!(format!("{err:#}").contains("instance"), "{err:#}");
}

#[test]
fn a_module_with_two_memories_is_refused_at_compile_time() {
    let sandbox = Sandbox::new().unwrap();
    let mut c = Component::new();
    c.section(&ModuleSection(&module(1, 2)));
    let err = wasmtime::component::Component::new(&sandbox.engine, c.finish()).expect_err("refused");
    assert!(format!("{err:#}").contains("multiple memories"), "{err:#}");
}

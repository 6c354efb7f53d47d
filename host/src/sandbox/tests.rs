//! The store's limits against hand-made components: what no plugin toolchain emits, but
//! a hostile plugin may.

use wasm_encoder::{
    Alias, Component, ComponentAliasSection, ComponentImportSection, ComponentInstanceSection, ComponentOuterAliasKind,
    ComponentTypeRef, CoreTypeSection, InstanceSection, MemorySection, MemoryType, Module, ModuleArg, ModuleSection,
    ModuleType, NestedComponentSection, TableSection, TableType,
};
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
fn more_core_instances_than_the_limit_are_refused_by_count_before_instantiating() {
    let sandbox = Sandbox::new().unwrap();
    let limits = Limits { instances: 4, ..Limits::default() };
    let four = footprint::of(&component(4, 1)).unwrap();
    assert_eq!(four, Footprint { instances: 4, memories: 4, tables: 0 });
    assert_eq!(four.check(limits.instances), Ok(()));
    instantiate(&sandbox, &component(4, 1), &limits).expect("four instances");
    let five = footprint::of(&component(5, 1)).unwrap();
    let cap = five.check(limits.instances).unwrap_err();
    assert_eq!(cap, footprint::CountCap { what: "core instances", count: 5, limit: 4 });
    assert_eq!(cap.to_string(), "would create 5 core instances, more than its limit of 4 (--max-instances)");
    // wasmtime's own counter, the backstop, agrees at the boundary.
    assert!(instantiate(&sandbox, &component(5, 1), &limits).is_err());
}

use footprint::Footprint;

/// A module with one memory of one page and `tables` tables.
fn module_with_tables(tables: usize) -> Module {
    let mut t = TableSection::new();
    for _ in 0..tables {
        t.table(TableType {
            element_type: wasm_encoder::RefType::FUNCREF,
            minimum: 1,
            maximum: None,
            table64: false,
            shared: false,
        });
    }
    let mut mem = MemorySection::new();
    mem.memory(MemoryType { minimum: 1, maximum: None, memory64: false, shared: false, page_size_log2: None });
    let mut m = Module::new();
    m.section(&t).section(&mem);
    m
}

/// A component whose nested component instantiates its own module twice and an outer
/// module (by alias) once, instantiated `times` times.
fn nested(times: usize) -> Vec<u8> {
    let mut inner = Component::new();
    inner.section(&ModuleSection(&module_with_tables(2)));
    let mut alias = ComponentAliasSection::new();
    alias.alias(Alias::Outer { kind: ComponentOuterAliasKind::CoreModule, count: 1, index: 0 });
    inner.section(&alias);
    let mut made = InstanceSection::new();
    made.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    made.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    made.instantiate(1, Vec::<(&str, ModuleArg)>::new());
    inner.section(&made);

    let mut outer = Component::new();
    outer.section(&ModuleSection(&module(1, 1)));
    outer.section(&NestedComponentSection(&inner));
    let mut instances = ComponentInstanceSection::new();
    for _ in 0..times {
        instances.instantiate(0, Vec::<(&str, wasm_encoder::ComponentExportKind, u32)>::new());
    }
    outer.section(&instances);
    outer.finish()
}

#[test]
fn the_footprint_counts_nested_components_once_per_instantiation_as_wasmtime_does() {
    let sandbox = Sandbox::new().unwrap();
    let bytes = nested(3);
    let counted = footprint::of(&bytes).unwrap();
    // Three instantiations of a component making three core instances: two of a module
    // with a memory and two tables, one of the outer module with a memory.
    assert_eq!(counted, Footprint { instances: 9, memories: 9, tables: 12 });
    let compiled = wasmtime::component::Component::new(&sandbox.engine, &bytes).unwrap();
    let required = compiled.resources_required().unwrap();
    assert_eq!((u64::from(required.num_memories), u64::from(required.num_tables)), (9, 12));
    // wasmtime's counters take the same count: 12 of each is enough, 11 is not.
    instantiate(&sandbox, &bytes, &Limits { instances: 12, ..Limits::default() }).expect("within the count");
    assert!(instantiate(&sandbox, &bytes, &Limits { instances: 11, ..Limits::default() }).is_err());
    assert_eq!(counted.check(11).unwrap_err().what, "tables");
    // A component defined but never instantiated creates nothing.
    assert_eq!(footprint::of(&nested(0)).unwrap(), Footprint::default());
}

#[test]
fn instantiating_an_imported_module_is_refused_as_unbounded() {
    let mut c = Component::new();
    let mut types = CoreTypeSection::new();
    types.ty().module(&ModuleType::new());
    c.section(&types);
    let mut imports = ComponentImportSection::new();
    imports.import("m", ComponentTypeRef::Module(0));
    c.section(&imports);
    let mut made = InstanceSection::new();
    made.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    c.section(&made);
    let bytes = c.finish();
    wasmparser::Validator::new().validate_all(&bytes).expect("a valid component");
    let err = footprint::of(&bytes).unwrap_err();
    assert_eq!(err, footprint::Unbounded::Foreign("core module"));
    assert_eq!(
        err.to_string(),
        "it instantiates a core module it imports or takes from an instance's exports, whose size the host cannot know"
    );
}

/// Multi-memory is on (a plugin linked with a tapset calls it through adapters that use
/// both memories), so one module may define two: both are counted before instantiation
/// and held to the one cap together.
#[test]
fn two_memories_of_one_module_are_counted_and_share_the_cap() {
    let sandbox = Sandbox::new().unwrap();
    let pages = (40 << 20) / 65536;
    let mut c = Component::new();
    c.section(&ModuleSection(&module(pages, 2)));
    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    c.section(&instances);
    let bytes = c.finish();
    assert_eq!(footprint::of(&bytes).unwrap().memories, 2);
    let err = instantiate(&sandbox, &bytes, &Limits::default()).unwrap_err();
    let cap = err.downcast_ref::<limiter::MemoryCap>().unwrap_or_else(|| panic!("not a memory cap: {err:#}"));
    assert_eq!((cap.wanted, cap.limit), (80 << 20, 64 << 20));
}

/// A component that imports `sink: func(l: list<string>)` and exports `run`, which hands
/// the host `count` strings that all point at one 1 MiB buffer in its memory.
fn aliased_strings(count: u32) -> Vec<u8> {
    use wasm_encoder::{
        CanonicalFunctionSection, CanonicalOption, CodeSection, ComponentExportKind, ComponentExportSection,
        ComponentTypeSection, ComponentValType, ConstExpr, DataSection, EntityType, ExportKind, ExportSection,
        Function, FunctionSection, ImportSection, Instruction, PrimitiveValType, TypeSection, ValType,
    };
    const BUFFER: u32 = 1 << 20;
    let mut c = Component::new();
    let mut types = ComponentTypeSection::new();
    types.defined_type().list(PrimitiveValType::String);
    types.function().params([("l", ComponentValType::Type(0))]).result(None);
    types.function().params(Vec::<(&str, ComponentValType)>::new()).result(None);
    c.section(&types);
    let mut imports = ComponentImportSection::new();
    imports.import("sink", ComponentTypeRef::Func(1));
    c.section(&imports);
    // Module 0 holds the memory: 2 MiB for the buffer and the list.
    let mut holder = Module::new();
    let mut mem = MemorySection::new();
    mem.memory(MemoryType { minimum: 48, maximum: None, memory64: false, shared: false, page_size_log2: None });
    let mut exports = ExportSection::new();
    exports.export("mem", ExportKind::Memory, 0);
    holder.section(&mem).section(&exports);
    c.section(&ModuleSection(&holder));
    // Module 1 calls the lowered `sink` with the list at 2 MiB: (ptr 0, len 1 MiB) each.
    let mut caller = Module::new();
    let mut ty = TypeSection::new();
    ty.ty().function([ValType::I32, ValType::I32], []);
    ty.ty().function([], []);
    let mut imp = ImportSection::new();
    imp.import("env", "sink", EntityType::Function(0));
    imp.import(
        "env",
        "mem",
        EntityType::Memory(MemoryType {
            minimum: 48,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        }),
    );
    let mut funcs = FunctionSection::new();
    funcs.function(1);
    let mut ex = ExportSection::new();
    ex.export("run", ExportKind::Func, 1);
    let mut code = CodeSection::new();
    let mut run = Function::new([]);
    run.instruction(&Instruction::I32Const(2 * BUFFER as i32))
        .instruction(&Instruction::I32Const(count as i32))
        .instruction(&Instruction::Call(0))
        .instruction(&Instruction::End);
    code.function(&run);
    let list: Vec<u8> = (0..count).flat_map(|_| [0u32.to_le_bytes(), BUFFER.to_le_bytes()].concat()).collect();
    let mut data = DataSection::new();
    data.active(0, &ConstExpr::i32_const(2 * BUFFER as i32), list);
    caller.section(&ty).section(&imp).section(&funcs).section(&ex).section(&code).section(&data);
    c.section(&ModuleSection(&caller));
    let mut inst = InstanceSection::new();
    inst.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    c.section(&inst);
    let mut alias = ComponentAliasSection::new();
    alias.alias(Alias::CoreInstanceExport { instance: 0, kind: ExportKind::Memory, name: "mem" });
    c.section(&alias);
    let mut canon = CanonicalFunctionSection::new();
    canon.lower(0, [CanonicalOption::Memory(0), CanonicalOption::UTF8]);
    c.section(&canon);
    let mut inst = InstanceSection::new();
    inst.export_items([("sink", ExportKind::Func, 0), ("mem", ExportKind::Memory, 0)]);
    inst.instantiate(1, [("env", ModuleArg::Instance(1))]);
    c.section(&inst);
    let mut alias = ComponentAliasSection::new();
    alias.alias(Alias::CoreInstanceExport { instance: 2, kind: ExportKind::Func, name: "run" });
    c.section(&alias);
    let mut canon = CanonicalFunctionSection::new();
    canon.lift(1, 2, []);
    c.section(&canon);
    let mut exports = ComponentExportSection::new();
    exports.export("run", ComponentExportKind::Func, 1, None);
    c.section(&exports);
    c.finish()
}

/// Calls `run` of `aliased_strings(count)`: the bytes the host received, or the fault.
fn copy(sandbox: &Sandbox, count: u32) -> Result<usize, Fault> {
    let limits = Limits::default();
    let component = wasmtime::component::Component::new(&sandbox.engine, aliased_strings(count)).unwrap();
    let mut store = new_store(&sandbox.engine, Clock::live(), &limits, Arc::default());
    let mut linker = Linker::<StoreState>::new(&sandbox.engine);
    let received = Arc::new(Mutex::new(0usize));
    let r = received.clone();
    linker
        .root()
        .func_wrap("sink", move |_, (l,): (Vec<String>,)| {
            *r.lock().unwrap() = l.iter().map(String::len).sum();
            Ok(())
        })
        .unwrap();
    let instance = linker.instantiate(&mut store, &component).unwrap();
    let run = instance.get_typed_func::<(), ()>(&mut store, "run").unwrap();
    run.call(&mut store, ()).map_err(|e| Fault::from_error("run", &e, &store, &limits, Duration::ZERO))?;
    let n = *received.lock().unwrap();
    Ok(n)
}

#[test]
fn strings_that_alias_one_buffer_cost_their_full_size_against_the_copy_cap() {
    let sandbox = Sandbox::new().unwrap();
    // 48 strings of 1 MiB (one buffer) fit in the 64 MiB a call may copy; 80 do not, and
    // the call faults before the host holds them, as a contract fault in wasmtime's words.
    assert_eq!(copy(&sandbox, 48).expect("48 MiB"), 48 << 20);
    let fault = copy(&sandbox, 80).unwrap_err();
    assert_eq!(fault.kind, FaultKind::Contract, "{fault}");
    assert!(fault.reason.contains("too much data is being copied between the host and the guest"), "{fault}");
}

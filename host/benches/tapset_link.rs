//! Two ways to link a tapset into a plugin, measured (`cargo bench -p wasmtap --bench
//! tapset_link`, after `./x build`; bench/tapsets.py runs it too): composition (what the
//! host does, `sandbox::link::compose`) against instance-to-instance linking through host
//! forwarders, dynamic (`func_new`, any tapset's interface) and typed (`func_wrap`, one
//! written for this interface), with a host function that answers itself as a floor.
//!
//! The caller is a component made from WebAssembly text (the tapset's interface
//! embedded by wit-component) whose `run(n)` asks `errno-name` n times, errnos 1 to 133
//! in turn; each figure is the median of 7 runs of 200,000 calls, in ns per call, and
//! the compile times of what each way compiles.

use std::path::{Path, PathBuf};
use std::time::Instant;

use wasmtime::component::{Component, Func, Linker, ResourceTable, TypedFunc, Val};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

const INTERFACE: &str = "wasmtap:syscalls/decode@0.1.0";
const CALLS: u32 = 200_000;
const RUNS: usize = 7;

const CALLER_WIT: &str = r#"
package bench:caller;
world caller {
    import wasmtap:syscalls/decode@0.1.0;
    export run: func(n: u32) -> u32;
}
"#;

const CALLER_WAT: &str = r#"
(module
  (import "wasmtap:syscalls/decode@0.1.0" "errno-name" (func $errno (param i64 i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
  (func (export "run") (param $n i32) (result i32)
    (local $i i32) (local $found i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $errno
          (i64.sub (i64.const 0) (i64.extend_i32_u (i32.add (i32.rem_u (local.get $i) (i32.const 133)) (i32.const 1))))
          (i32.const 512))
        (local.set $found (i32.add (local.get $found) (i32.load8_u (i32.const 512))))
        (global.set $heap (i32.const 1024))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $found))
)
"#;

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    /// The tapset's `errno-name`, for the forwarders.
    errno_name: Option<Func>,
    errno_name_typed: Option<TypedFunc<(i64,), (Option<String>,)>>,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

fn store(engine: &Engine) -> Store<State> {
    Store::new(
        engine,
        State {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            errno_name: None,
            errno_name_typed: None,
        },
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn caller() -> Vec<u8> {
    let mut core = wat::parse_str(CALLER_WAT).expect("caller text");
    let mut resolve = wit_parser::Resolve::default();
    resolve.push_dir(root().join("wit/tapsets/syscalls")).expect("tapset WIT");
    let package = resolve.push_str("caller.wit", CALLER_WIT).expect("caller WIT");
    let world = resolve.select_world(&[package], Some("caller")).expect("caller world");
    wit_component::embed_component_metadata(&mut core, &resolve, world, wit_component::StringEncoding::UTF8, false)
        .expect("embed");
    wit_component::ComponentEncoder::default().module(&core).expect("module").encode().expect("component")
}

fn timed<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64() * 1000.0)
}

/// Median ns per call of `run(CALLS)` on `instance`.
fn per_call(store: &mut Store<State>, instance: &wasmtime::component::Instance) -> f64 {
    let run = instance.get_typed_func::<(u32,), (u32,)>(&mut *store, "run").expect("run");
    let (found,) = run.call(&mut *store, (CALLS,)).expect("warm-up run");
    assert!(found > CALLS * 9 / 10, "{found} names of {CALLS}");
    let mut ns: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            run.call(&mut *store, (CALLS,)).expect("run");
            t.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    ns[RUNS / 2]
}

fn main() {
    let tapset_path = root().join("target/wasm32-wasip2/wasm/wasmtap_syscalls.wasm");
    let tapset =
        std::fs::read(&tapset_path).unwrap_or_else(|e| panic!("{}: {e} (./x build first)", tapset_path.display()));
    let caller = caller();
    let mut config = Config::new();
    config.wasm_multi_memory(true);
    config.concurrency_support(false);
    let engine = Engine::new(&config).expect("engine");
    let mut wasi: Linker<State> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut wasi).expect("wasi");

    println!("| linking | compile (ms) | ns per call |");
    println!("|---|---|---|");

    // Composition: one component, the calls between the two never leave wasm.
    let imports = wasmtap::sandbox::link::tapset_imports(&caller).expect("imports");
    let (composed, compose_ms) = timed(|| {
        wasmtap::sandbox::link::compose(&caller, &imports, &[("syscalls".into(), "0.1.0".into(), tapset.clone())])
            .expect("compose")
    });
    let (component, compile_ms) = timed(|| Component::new(&engine, &composed).expect("composed"));
    let mut s = store(&engine);
    let instance = wasi.instantiate(&mut s, &component).expect("instantiate composed");
    println!(
        "| composed (the host's way) | {:.0} (+{compose_ms:.1} to compose) | {:.0} |",
        compile_ms,
        per_call(&mut s, &instance)
    );

    // Instance linking: the tapset and the caller compiled apart, instantiated in one
    // store, the caller's import answered by a host function that calls the tapset.
    let ((tapset_c, caller_c), apart_ms) = timed(|| {
        (Component::new(&engine, &tapset).expect("tapset"), Component::new(&engine, &caller).expect("caller"))
    });
    for typed in [false, true] {
        let mut linker = wasi.clone();
        let mut iface = linker.instance(INTERFACE).expect("interface");
        if typed {
            iface
                .func_wrap("errno-name", |mut store: wasmtime::StoreContextMut<'_, State>, (e,): (i64,)| {
                    let f = store.data().errno_name_typed.expect("tapset instantiated");
                    f.call(&mut store, (e,))
                })
                .expect("typed forwarder");
        } else {
            iface
                .func_new("errno-name", |mut store, _ty, params: &[Val], results: &mut [Val]| {
                    let f = store.data().errno_name.expect("tapset instantiated");
                    f.call(&mut store, params, results)
                })
                .expect("dynamic forwarder");
        }
        let mut s = store(&engine);
        let t = wasi.instantiate(&mut s, &tapset_c).expect("instantiate tapset");
        let at = t.get_export_index(&mut s, None, INTERFACE).expect("interface export");
        let f = t.get_export_index(&mut s, Some(&at), "errno-name").expect("errno-name export");
        let func = t.get_func(&mut s, f).expect("errno-name");
        s.data_mut().errno_name = Some(func);
        s.data_mut().errno_name_typed = Some(func.typed::<(i64,), (Option<String>,)>(&s).expect("typed"));
        let instance = linker.instantiate(&mut s, &caller_c).expect("instantiate caller");
        let how = if typed { "typed forwarder (func_wrap)" } else { "dynamic forwarder (func_new, any interface)" };
        println!("| instances, {how} | {apart_ms:.0} (both, apart) | {:.0} |", per_call(&mut s, &instance));
    }

    // The floor of a host call: the host answers with a string of its own.
    let mut linker: Linker<State> = Linker::new(&engine);
    linker
        .instance(INTERFACE)
        .expect("interface")
        .func_wrap("errno-name", |_store, (e,): (i64,)| Ok((Some(format!("E{}", e.unsigned_abs())),)))
        .expect("host function");
    let mut s = store(&engine);
    let instance = linker.instantiate(&mut s, &caller_c).expect("instantiate caller alone");
    println!("| (a host function answering itself) | - | {:.0} |", per_call(&mut s, &instance));
}

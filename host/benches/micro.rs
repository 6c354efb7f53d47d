//! Micro-benchmarks of the hot paths, in ns per event (`cargo bench -p wasmtap --bench
//! micro`, after `./x build`; `bench/run.py` runs it too). No framework: each figure is
//! the median of 7 timed runs of at least 1M events, printed as a Markdown table.
//!
//! - decode: the host checking and walking a batch of syscall records (what the drain
//!   thread and the dispatcher do per record);
//! - dispatch: one `on-batch` call into a Wasm plugin per batch, by batch size, with the
//!   SDK's decoding and an empty handler (`tests/fixtures/aggbench`, `agg=none`);
//! - aggregations: the same at 1024 events per batch, each event updating one
//!   aggregation of each kind, keyed by thread id.

use std::path::PathBuf;
use std::time::Instant;

use wasmtap::clock::Clock;
use wasmtap::limits::Limits;
use wasmtap::sandbox::Sandbox;
use wasmtap::wit::types;
use wasmtap_abi::{header, sys_enter, Kind, Records};

const EVENTS: usize = 1 << 20;
const RUNS: usize = 7;

/// `n` syscall entries of 64 threads, as a collector writes them.
fn batch(n: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(n * sys_enter::SIZE);
    for i in 0..n {
        let mut r = vec![0u8; sys_enter::SIZE];
        r[header::KIND..header::KIND + 2].copy_from_slice(&(Kind::SysEnter as u16).to_le_bytes());
        r[header::SIZE..header::SIZE + 2].copy_from_slice(&(sys_enter::SIZE as u16).to_le_bytes());
        r[header::TS_NS..header::TS_NS + 8].copy_from_slice(&(i as u64 * 1000).to_le_bytes());
        r[header::PID..header::PID + 4].copy_from_slice(&1000u32.to_le_bytes());
        r[header::TID..header::TID + 4].copy_from_slice(&(1000 + (i % 64) as u32).to_le_bytes());
        r[header::COMM..header::COMM + 5].copy_from_slice(b"bench");
        r[sys_enter::ID..sys_enter::ID + 8].copy_from_slice(&110i64.to_le_bytes());
        r[sys_enter::ARGS..sys_enter::ARGS + 8].copy_from_slice(&((i * 7919) % 1000).to_le_bytes());
        b.extend_from_slice(&r);
    }
    b
}

/// Median ns per event of `RUNS` runs of `f`, each handling `events` events.
fn median_ns(events: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm up
    let mut runs: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / events as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[RUNS / 2]
}

fn plugin_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let p = target.join("wasm32-wasip2/wasm/aggbench.wasm");
    assert!(p.is_file(), "{} is missing: run ./x build first", p.display());
    p
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` from the harness is ignored.
    let sandbox = Sandbox::new().expect("sandbox");
    let loaded = sandbox.load(&plugin_path(), wasmtap::package::trust::Origin::File).expect("load aggbench");
    let start = |agg: &str| {
        let mut inst = loaded.instantiate(Clock::live(), &Limits::default()).expect("instantiate");
        let params = [types::Param { name: "agg".into(), value: agg.into() }];
        inst.start(&params).expect("no fault").expect("start");
        inst
    };

    println!("| measure | batch size | ns/event |");
    println!("|---|---|---|");
    let big = batch(4096);
    let decode = median_ns(EVENTS, || {
        let mut n = 0u64;
        for _ in 0..EVENTS / 4096 {
            for rec in Records::new(std::hint::black_box(&big)) {
                n += u64::from(rec.sub()) + rec.ts_ns();
            }
        }
        std::hint::black_box(n);
    });
    println!("| host: check and walk records | 4096 | {decode:.1} |");

    let mut inst = start("none");
    for size in [1usize, 16, 64, 256, 1024, 4096] {
        let b = batch(size);
        let calls = (EVENTS / size).max(1);
        let ns = median_ns(calls * size, || {
            for _ in 0..calls {
                inst.on_batch(&b).expect("no fault");
            }
        });
        println!("| Wasm dispatch (on-batch, SDK decode, empty handler) | {size} | {ns:.1} |");
    }
    let _ = inst.take_output();

    let b = batch(1024);
    let calls = EVENTS / 1024;
    let kinds = ["count", "sum", "avg", "min", "max", "stddev", "quantize", "lquantize", "llquantize", "percentiles"];
    for kind in kinds {
        let mut inst = start(kind);
        let ns = median_ns(calls * 1024, || {
            for _ in 0..calls {
                inst.on_batch(&b).expect("no fault");
            }
        });
        println!("| dispatch + `{kind}` update, keyed by tid | 1024 | {ns:.1} |");
    }
}

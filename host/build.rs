//! Compiles the eBPF collectors in `bpf/` with clang (CO-RE, against the committed
//! `vmlinux.h`) and strips their DWARF, keeping `.BTF`/`.BTF.ext` for relocation.

use std::{env, path::PathBuf, process::Command};

const COLLECTORS: &[&str] = &["syscalls", "proc", "file", "tracepoint", "user", "perf", "agg"];

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("../bpf");
    for header in ["vmlinux.h", "wasmtap.h", "filter.bpf.h", "emit.bpf.h"] {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(header).display());
    }
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".into());
    for name in COLLECTORS {
        let src = bpf_dir.join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        let full = out.join(format!("{name}.bpf.full.o"));
        // agg takes an index with an atomic fetch-and-add, whose result needs BPF v3
        // (kernels 5.12 on; every kernel wasmtap runs on has it).
        let cpu: &[&str] = if *name == "agg" { &["-mcpu=v3"] } else { &[] };
        let status = Command::new(&clang)
            .args(["-target", "bpf", "-D__TARGET_ARCH_x86", "-g", "-O2", "-Wall", "-Werror"])
            .args(cpu)
            .arg("-I")
            .arg(&bpf_dir)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&full)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run `{clang}` to build {}: {e} (apt-get install clang llvm libbpf-dev)", src.display())
            });
        assert!(status.success(), "clang failed on {}", src.display());
        let stripped = out.join(format!("{name}.bpf.o"));
        let strip = Command::new("llvm-strip").arg("-g").arg(&full).arg("-o").arg(&stripped).status();
        if !matches!(strip, Ok(s) if s.success()) {
            std::fs::copy(&full, &stripped).expect("copy unstripped collector");
        }
    }
}

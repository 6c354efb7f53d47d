//! `wasmtap-c`: build a wasmtap plugin written in C into a component the host runs.
//!
//! ```text
//! wasmtap-c build -o PLUGIN.wasm SOURCE.c... [-- CFLAGS...]
//! wasmtap-c bindings DIR
//! wasmtap-c names python|js
//! ```
//!
//! `build` writes the bindings of the `plugin` world (`wit/`) next to the output, compiles
//! the sources with them and the SDK (`guest-sdk/c`) by `clang-19 --target=wasm32-wasi`
//! (`$CC` overrides), and makes the core module a component. No WASI import is left: the
//! SDK sends stdio to the host's `print` and `log`. docs/languages.md says more.
//!
//! `names` prints the Python or JavaScript SDK's table of syscall, errno and open flag
//! names (`guest-sdk/python/wasmtap_names.py`, `guest-sdk/js/names.js`), written from
//! the same sources as the C SDK's, so that no SDK keeps a copy of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use wit_bindgen_core::wit_parser::Resolve;
use wit_bindgen_core::Files;

/// The SDK's directory (this crate's), where `include/` and `src/` are.
const SDK: &str = env!("CARGO_MANIFEST_DIR");

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("wasmtap-c: error: {e:#}");
        std::process::exit(2);
    }
}

const USAGE: &str = "usage: wasmtap-c build -o PLUGIN.wasm SOURCE.c... [-- CFLAGS...]\n       wasmtap-c bindings DIR\n       wasmtap-c names python|js";

fn run(args: Vec<String>) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("bindings") => match &args[1..] {
            [dir] => bindings(Path::new(dir)),
            _ => bail!("{USAGE}"),
        },
        Some("names") => match &args[1..] {
            [lang] if lang == "python" || lang == "js" => {
                print!("{}", script_names(lang == "js"));
                Ok(())
            }
            _ => bail!("{USAGE}"),
        },
        Some("build") => {
            let (ours, cflags) = match args.iter().position(|a| a == "--") {
                Some(i) => (&args[1..i], &args[i + 1..]),
                None => (&args[1..], &[][..]),
            };
            let mut out = None;
            let mut sources = Vec::new();
            let mut it = ours.iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "-o" => out = Some(PathBuf::from(it.next().context("-o needs a file")?)),
                    s if s.starts_with('-') => bail!("unknown option `{s}`\n{USAGE}"),
                    s => sources.push(PathBuf::from(s)),
                }
            }
            let out = out.with_context(|| format!("no output named\n{USAGE}"))?;
            if sources.is_empty() {
                bail!("no source named\n{USAGE}");
            }
            build(&out, &sources, cflags)
        }
        _ => bail!("{USAGE}"),
    }
}

/// The C bindings of the `plugin` world into `dir`: `plugin.h`, `plugin.c` and the
/// object with the world's type, which `build` links in.
fn bindings(dir: &Path) -> Result<()> {
    let wit = Path::new(SDK).join("../../wit");
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve.push_dir(&wit).with_context(|| format!("reading {}", wit.display()))?;
    let world = resolve.select_world(&[pkg], Some("plugin"))?;
    let mut files = Files::default();
    wit_bindgen_c::Opts::default().build().generate(&mut resolve, world, &mut files)?;
    files.push("wasmtap_names.h", names().as_bytes());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, bytes) in files.iter() {
        let path = dir.join(name);
        // Unchanged files keep their times, so that make-like rebuilds stay quiet.
        if std::fs::read(&path).is_ok_and(|old| old == bytes) {
            continue;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `WT_SYSCALL_NAMES` and `WT_ERRNO_NAMES` by number, and `WT_OPEN_FLAG_NAMES` in the
/// order they print, for the SDK: the x86_64 syscall names of `wasmtap-abi`, the errno
/// and open flag names of the syscalls tapset.
fn names() -> String {
    let mut h = String::from("/* Written by wasmtap-c from wasmtap-abi and the syscalls tapset. */\n");
    h.push_str("static const char *const WT_SYSCALL_NAMES[] = {\n");
    for name in wasmtap_abi::SYSCALL_NAMES {
        h.push_str(&format!("\t\"{name}\",\n"));
    }
    h.push_str("};\n\nstatic const char *const WT_ERRNO_NAMES[4096] = {\n");
    for e in 1..4096 {
        if let Some(name) = wasmtap_syscalls::errno_name(e) {
            h.push_str(&format!("\t[{e}] = \"{name}\",\n"));
        }
    }
    h.push_str("};\n\nstatic const struct {\n\tuint64_t bits;\n\tconst char *name;\n} WT_OPEN_FLAG_NAMES[] = {\n");
    for (bits, name) in wasmtap_syscalls::FLAG_NAMES {
        h.push_str(&format!("\t{{ {bits:#x}, \"{name}\" }},\n"));
    }
    h.push_str("};\n");
    h
}

/// The same tables for the Python SDK (a module) or the JavaScript SDK (an ES module):
/// `SYSCALLS` by number, `ERRNOS` by number, `OPEN_FLAGS` as (bits, name) in print order.
fn script_names(js: bool) -> String {
    let (comment, open, close) = if js { ("//", "[", "]") } else { ("#", "(", ")") };
    let decl = |name: &str| if js { format!("export const {name} = ") } else { format!("{name} = ") };
    let mut t =
        format!("{comment} Written by `wasmtap-c names` from wasmtap-abi and the syscalls tapset: do not edit.\n");
    t.push_str(&format!("{}{open}\n", decl("SYSCALLS")));
    for name in wasmtap_abi::SYSCALL_NAMES {
        t.push_str(&format!("    \"{name}\",\n"));
    }
    t.push_str(&format!("{close}{}\n{}{{\n", if js { ";" } else { "" }, decl("ERRNOS")));
    for e in 1..4096 {
        if let Some(name) = wasmtap_syscalls::errno_name(e) {
            t.push_str(&format!("    {e}: \"{name}\",\n"));
        }
    }
    t.push_str(&format!("}}{}\n{}{open}\n", if js { ";" } else { "" }, decl("OPEN_FLAGS")));
    for (bits, name) in wasmtap_syscalls::FLAG_NAMES {
        t.push_str(&format!("    {open}{bits:#x}, \"{name}\"{close},\n"));
    }
    t.push_str(&format!("{close}{}\n", if js { ";" } else { "" }));
    t
}

fn build(out: &Path, sources: &[PathBuf], cflags: &[String]) -> Result<()> {
    let stem = out.file_stem().and_then(|s| s.to_str()).context("the output needs a file name")?;
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let gen = dir.join(format!("{stem}.bindings"));
    bindings(&gen)?;
    let core = dir.join(format!("{stem}.core.wasm"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "clang-19".into());
    let sdk = Path::new(SDK);
    let mut cmd = Command::new(&cc);
    cmd.args(["--target=wasm32-wasi", "-Os", "-mexec-model=reactor", "-Wall", "-Werror"])
        .arg("-I")
        .arg(&gen)
        .arg("-I")
        .arg(sdk.join("include"))
        .args(cflags)
        .arg("-o")
        .arg(&core)
        .args(sources)
        .arg(sdk.join("src/wasmtap.c"))
        .arg(sdk.join("src/events.c"))
        .arg(gen.join("plugin.c"))
        .arg(gen.join("plugin_component_type.o"))
        .arg("-Wl,--strip-all");
    let status = cmd.status().with_context(|| format!("running {cc} (./x setup installs clang-19 and wasi-libc)"))?;
    if !status.success() {
        bail!("{cc} failed ({status})");
    }
    let module = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .context("the core module")?
        .validate(true)
        .encode()
        .context("making the component")?;
    std::fs::write(out, component).with_context(|| format!("writing {}", out.display()))?;
    let _ = std::fs::remove_file(&core);
    Ok(())
}

//! ELF files and what is in them: the SDT note parser behind `usdt_probes`, the symbol
//! tables behind `functions`, `/etc/ld.so.cache`, and USDT operands (`parse_usdt_arg`).
//! The first byte picks the decoder.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use wasmtap::collect::elf;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let path = Path::new("/fuzz/input");
    match mode % 4 {
        0 | 1 => match elf::usdt_probes_in(path, rest) {
            Ok(probes) => {
                for p in probes {
                    assert!(p.pc_offset < rest.len() as u64, "{p:?}");
                    assert!(p.semaphore_offset.is_none_or(|o| o < rest.len() as u64), "{p:?}");
                    assert!(p.args.is_empty() || p.args.len() == p.arg_text.split_whitespace().count(), "{p:?}");
                }
            }
            Err(e) => assert!(e.to_string().contains("/fuzz/input"), "{e}"),
        },
        2 => {
            if let Ok(funcs) = elf::functions_in(path, rest) {
                assert!(funcs.windows(2).all(|w| w[0].name < w[1].name));
            }
            let _ = elf::ld_cache_lookup(rest, "libc");
        }
        _ => {
            let text = String::from_utf8_lossy(rest);
            for spec in text.split_whitespace().take(16) {
                match elf::parse_usdt_arg(spec) {
                    Ok(arg) => assert!(matches!(arg.size, 1 | 2 | 4 | 8)),
                    Err(e) => assert!(e.to_string().contains(&format!("`{spec}`")), "{e}"),
                }
            }
        }
    }
});

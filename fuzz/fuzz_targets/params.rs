//! What users type: `--param` (`RawParam`, `normalize`, `parse_duration`, `resolve`)
//! and probe names (`probes::parse`). The first byte picks the decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmtap::collect::probes;
use wasmtap::plugin::params::{self, RawParam};
use wasmtap::wit::types::{ParamKind, ParamSpec};

const KINDS: [ParamKind; 4] = [ParamKind::Integer, ParamKind::Boolean, ParamKind::Text, ParamKind::Duration];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    match mode % 4 {
        0 => {
            if let Ok(p) = text.parse::<RawParam>() {
                let back = match &p.plugin {
                    Some(plugin) => format!("{plugin}.{}={}", p.name, p.value),
                    None => format!("{}={}", p.name, p.value),
                };
                assert_eq!(back.parse::<RawParam>(), Ok(p));
            }
        }
        1 => {
            for kind in KINDS {
                let Some(once) = params::normalize(kind, &text) else { continue };
                let again = if kind == ParamKind::Duration { format!("{once}ns") } else { once.clone() };
                assert_eq!(params::normalize(kind, &again), Some(once), "{kind:?} {text:?}");
            }
            if let Some(d) = params::parse_duration(&text) {
                assert_eq!(params::parse_duration(&format!("{}ns", d.as_nanos())), Some(d));
            }
        }
        2 => {
            // `NAME:KIND:DEFAULT` specs, then `;` and the raw params, comma-separated.
            let (specs, raw) = text.split_once(';').unwrap_or((&text, ""));
            let specs: Vec<ParamSpec> = specs
                .split(',')
                .map(|s| {
                    let mut parts = s.splitn(3, ':');
                    let name = parts.next().unwrap_or("").to_string();
                    let kind = KINDS[parts.next().map_or(0, str::len) % 4];
                    ParamSpec { name, kind, default_value: parts.next().map(Into::into), description: String::new() }
                })
                .collect();
            let raw: Vec<RawParam> = raw.split(',').filter_map(|r| r.parse().ok()).collect();
            match params::bind("fz", &specs, &raw) {
                Ok(values) => assert_eq!(values.len(), specs.len()),
                Err(e) => assert!(e.to_string().contains("fz"), "{e}"),
            }
        }
        _ => {
            if let Err(e) = probes::parse(&text) {
                assert!(e.to_string().contains(&format!("`{text}`")), "{e}");
            }
        }
    }
});

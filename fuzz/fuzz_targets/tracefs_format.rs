//! `tracefs::parse_format` over any text. The first line names the event (the format
//! must describe that one); the rest is the format file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmtap::collect::tracefs::{self, FieldKind};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (name, format) = text.split_once('\n').unwrap_or(("", &text));
    match tracefs::parse_format("fuzz", name, format) {
        Ok(f) => {
            assert!(!f.fields.is_empty());
            for x in &f.fields {
                assert!(x.offset <= 65535 && (1..=65535).contains(&x.size), "{x:?}");
                assert!(x.count >= 1 && x.size % x.count == 0, "{x:?}");
                assert!(!matches!(x.kind, FieldKind::DynamicText | FieldKind::DynamicBytes) || x.size == 4, "{x:?}");
            }
            let _ = (f.fixed_size(), f.dynamic_fields().count());
            // What recordings store reads back the same.
            let json = serde_json::to_vec(&f).unwrap();
            assert_eq!(serde_json::from_slice::<tracefs::Format>(&json).unwrap(), f);
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.starts_with(&format!("bad format file for fuzz:{name} at line ")), "{message}");
        }
    }
});

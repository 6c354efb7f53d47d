//! The host's modules form layers, and every `crate::` path points to a lower one (the
//! layering `host/src/lib.rs` states). This reads the sources: a module that reaches up,
//! or one the table below does not place, fails the test with the file that does it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module of `host/src` and its layer; a module may use only lower layers.
const LAYERS: &[(&str, u32)] = &[
    ("sys", 0),
    ("wit", 1),
    ("clock", 1),
    ("limits", 1),
    ("private", 1),
    ("privilege", 1),
    ("symbolize", 1),
    ("watchdog", 1),
    ("policy", 1),
    ("accounting", 2),
    ("package", 2),
    ("collect", 3),
    ("sandbox", 3),
    ("output", 3),
    ("drops", 3),
    ("kernel_agg", 4),
    ("export", 4),
    ("plugin", 5),
    ("pipeline", 6),
    ("service", 7),
    ("cli", 8),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a source names through `crate::`, including `crate::{a, b::c}`
/// (comments, links in docs included, are left out by the caller).
fn used_modules(text: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                used.push(name);
            }
        } else {
            used.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    used.retain(|m| !m.is_empty());
    used
}

#[test]
fn every_module_uses_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let Some(own) = layer(&top) else {
            wrong.entry(rel.display().to_string()).or_default().push(format!("module `{top}` has no layer"));
            continue;
        };
        let code: String = fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(|l| format!("{l}\n"))
            .collect();
        for used in used_modules(&code) {
            if used == top {
                continue;
            }
            match layer(&used) {
                Some(l) if l < own => {}
                Some(l) => wrong
                    .entry(rel.display().to_string())
                    .or_default()
                    .push(format!("`{top}` (layer {own}) uses `{used}` (layer {l})")),
                // Macros and items of the crate root (`crate::VERSION`), not modules.
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layering of host/src/lib.rs:\n{wrong:#?}");
}

#[test]
fn the_reader_finds_grouped_and_nested_paths() {
    let text = "use crate::{accounting::X, wit::types};\nlet c = crate::clock::Clock::live();";
    assert_eq!(used_modules(text), ["accounting", "wit", "clock"]);
}

//! The package index: the directories where installed plugins and tapsets are found by
//! name. Each holds packages (`NAME.wasm`, manifested and signed by whoever built them;
//! `./x build` packs and signs `plugins/` into `target/release/plugins`), and tapsets in
//! its `tapsets/` (`tapsets/NAME.wasm`), so adding either needs no host change.

use std::path::{Path, PathBuf};

/// Directories searched, in order: `$WASMTAP_PLUGIN_PATH`, then `plugins/` beside the
/// executable and `../lib/wasmtap/plugins` from it.
pub fn dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(path) = std::env::var_os("WASMTAP_PLUGIN_PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        dirs.push(exe_dir.join("plugins"));
        dirs.push(exe_dir.join("../lib/wasmtap/plugins"));
    }
    dirs
}

/// Whether `name` can name an installed package (no path, no hidden file, not too long).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The installed tapset called `name`: the first `tapsets/NAME.wasm` of [`dirs`].
pub fn tapset(name: &str) -> Option<PathBuf> {
    let file = format!("{name}.wasm");
    valid_name(name).then(|| dirs().into_iter().map(|d| d.join("tapsets").join(&file)).find(|p| p.is_file()))?
}

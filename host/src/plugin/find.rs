//! Finding a plugin by name: vetted plugins are found without the user knowing where
//! they live; anything with a `/` or ending in `.wasm` is a path.

use std::path::{Path, PathBuf};

use crate::package::trust::Origin;

/// Why a plugin could not be found.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("plugin file {0} does not exist")]
    NoFile(PathBuf),
    #[error("no plugin named `{name}` (vetted plugins here: {available}; or give the path of a .wasm component)")]
    NoPlugin { name: String, available: String },
}

/// Directories searched for vetted plugins, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(path) = std::env::var_os("WASMTAP_PLUGIN_PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        dirs.push(exe_dir.join("plugins"));
        dirs.push(exe_dir.join("../lib/wasmtap/plugins"));
        // A cargo build tree: target/release/wasmtap beside target/wasm32-wasip2/wasm/*.wasm.
        dirs.push(exe_dir.join("../wasm32-wasip2/wasm"));
    }
    dirs
}

/// Whether a plugin argument names a file rather than a vetted plugin.
pub fn is_path(arg: &str) -> bool {
    arg.contains('/') || arg.ends_with(".wasm")
}

/// The file for a plugin argument, and whether it was found among the installed
/// plugins (by name) or named by the user.
pub fn find(arg: &str) -> Result<(PathBuf, Origin), FindError> {
    if is_path(arg) {
        let p = PathBuf::from(arg);
        return if p.is_file() { Ok((p, Origin::File)) } else { Err(FindError::NoFile(p)) };
    }
    let file = format!("{arg}.wasm");
    search_dirs()
        .into_iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
        .map(|p| (p, Origin::Vetted))
        .ok_or_else(|| FindError::NoPlugin { name: arg.into(), available: available().join(", ") })
}

/// Names of the plugins found in the search directories.
pub fn available() -> Vec<String> {
    let mut names: Vec<String> = search_dirs()
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".wasm").map(str::to_string))
        .filter(|n| VETTED.contains(&n.as_str()))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        names.push("none found".into());
    }
    names
}

/// The plugins shipped in `plugins/`.
pub const VETTED: &[&str] = &[
    "execsnoop",
    "exitsnoop",
    "forktime",
    "openaggr",
    "opensnoop",
    "opentrace",
    "proclife",
    "profile",
    "runqlat",
    "syscalls",
    "syscount",
    "syslatency",
    "wstat",
];

#[cfg(test)]
mod tests {
    #[test]
    fn vetted_names_are_the_plugins_shipped() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins");
        let mut shipped: Vec<String> =
            std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        shipped.sort();
        assert_eq!(shipped, super::VETTED);
    }
}

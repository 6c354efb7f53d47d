//! Finding a plugin by name: vetted plugins are found without the user knowing where
//! they live; anything with a `/` or ending in `.wasm` is a path.

use std::path::PathBuf;

use crate::package::trust::Origin;

/// Why a plugin could not be found.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("plugin file {0} does not exist")]
    NoFile(PathBuf),
    #[error("no plugin named `{name}` (vetted plugins here: {available}; or give the path of a .wasm component)")]
    NoPlugin { name: String, available: String },
    #[error("{0}")]
    Registry(String),
}

/// Directories searched for installed plugins, in order: the package index
/// ([`crate::package::index`]).
pub fn search_dirs() -> Vec<PathBuf> {
    crate::package::index::dirs()
}

/// Whether a plugin argument names a file rather than an installed plugin.
pub fn is_path(arg: &str) -> bool {
    arg.contains('/') || arg.ends_with(".wasm")
}

/// The file for a plugin argument, and whether it was found among the installed
/// plugins (by name) or named by the user.
pub fn find(arg: &str) -> Result<(PathBuf, Origin), FindError> {
    if crate::package::registry::is_reference(arg) {
        let pulled =
            crate::package::registry::Store::from_env().pull(arg).map_err(|e| FindError::Registry(format!("{e:#}")))?;
        return Ok((pulled.path, Origin::File));
    }
    if is_path(arg) {
        let p = PathBuf::from(arg);
        return if p.is_file() { Ok((p, Origin::File)) } else { Err(FindError::NoFile(p)) };
    }
    let file = format!("{arg}.wasm");
    let valid = !arg.is_empty() && arg.len() <= 64 && !arg.starts_with('.');
    search_dirs()
        .into_iter()
        .map(|d| d.join(&file))
        .find(|p| valid && p.is_file())
        .map(|p| (p, Origin::Vetted))
        .ok_or_else(|| FindError::NoPlugin { name: arg.into(), available: available().join(", ") })
}

/// Names of the plugins installed in the search directories.
pub fn installed() -> Vec<String> {
    let mut names: Vec<String> = search_dirs()
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".wasm").map(str::to_string))
        .filter(|n| !n.is_empty() && !n.starts_with('.'))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Names of the installed plugins, for messages (`none found` when there are none).
pub fn available() -> Vec<String> {
    let names = installed();
    if names.is_empty() {
        return vec!["none found".into()];
    }
    names
}

//! Tapsets linked into the plugins that import them. A tapset is a component that
//! exports an interface of its own package (`wasmtap:syscalls/decode@0.1.0`); a plugin
//! that imports such an interface gets it from the installed tapset of that name, composed
//! with the plugin into one component before compilation (wac-graph). The composition
//! runs in the plugin's store: the tapset's memory, instances and time are the plugin's,
//! under the plugin's limits, and a call between them is a call between two core
//! instances (fused adapters, no host code between).
//!
//! Why composition rather than instance-to-instance linking through the host: a host
//! forwarder lifts every argument and result into host values and lowers them again
//! (4× to 8× slower a call, measured in docs/benchmarks.md, "Tapsets"), while a
//! composition's calls never leave wasm; and the composed component is cached by its
//! content like any plugin.
//!
//! Versions: the tapset's export satisfies an import of the same interface of a
//! semver-compatible version (`0.1.0` by `0.1.3`: same major, or the same minor below
//! 1.0), if it is a subtype of what the plugin imports (everything the plugin calls is
//! there, with the same types).

use wac_graph::types::{are_semver_compatible, Package as WacPackage, SubtypeChecker};
use wac_graph::{CompositionGraph, EncodeOptions};
use wasmparser::{Parser, Payload};

/// The packages the host answers itself, which are never tapsets to link: the plugin
/// contract, and the `proc` tapset (only the host may read /proc).
const HOST_PACKAGES: &[&str] = &["wasmtap:plugin", "wasmtap:proc"];

/// A tapset interface a plugin imports, `wasmtap:NAME/INTERFACE@VERSION`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapsetImport {
    /// The whole import name.
    pub import: String,
    /// NAME: the tapset that provides it.
    pub tapset: String,
}

/// The tapset interfaces among a component's top-level imports (read before it is
/// compiled): `wasmtap:*` interfaces other than the host's own.
pub fn tapset_imports(bytes: &[u8]) -> Result<Vec<TapsetImport>, String> {
    Ok(top_level_names(bytes)?
        .0
        .into_iter()
        .filter_map(|import| Some(TapsetImport { tapset: tapset_of(&import)?.to_string(), import }))
        .collect())
}

/// The names a component exports at its top level (read without compiling it).
pub fn exports(bytes: &[u8]) -> Result<Vec<String>, String> {
    Ok(top_level_names(bytes)?.1)
}

/// The names a component imports and exports at its top level, past nested modules and
/// components.
fn top_level_names(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| e.to_string())? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            }
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    imports.push(import.map_err(|e| e.to_string())?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(reader) if depth == 0 => {
                for export in reader {
                    exports.push(export.map_err(|e| e.to_string())?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

/// Whether a component with these exports is a tapset: it offers `wasmtap:` interfaces
/// and no plugin function.
pub fn is_tapset(exports: &[String]) -> bool {
    !exports.is_empty() && exports.iter().all(|e| tapset_of(e).is_some())
}

/// NAME of `wasmtap:NAME/…`, unless it is the host's package.
fn tapset_of(import: &str) -> Option<&str> {
    let (package, _) = import.split_once('/')?;
    let name = package.strip_prefix("wasmtap:")?;
    (!HOST_PACKAGES.contains(&package)).then_some(name)
}

/// `plugin` with each of its tapset imports satisfied by one of `tapsets` (name,
/// version for messages, bytes), as one component whose other imports are the plugin's
/// and the tapsets' own (WASI), and whose exports are the plugin's.
///
/// The plugin's bytes are the author's, not yet validated (wasmtime validates what it
/// compiles): a panic in the composition library on something malformed is this
/// plugin's error, not the host's end.
pub fn compose(
    plugin: &[u8],
    imports: &[TapsetImport],
    tapsets: &[(String, String, Vec<u8>)],
) -> Result<Vec<u8>, String> {
    std::panic::catch_unwind(|| compose_unchecked(plugin, imports, tapsets))
        .unwrap_or_else(|_| Err("the composition failed on what the plugin declares (not a valid component?)".into()))
}

fn compose_unchecked(
    plugin: &[u8],
    imports: &[TapsetImport],
    tapsets: &[(String, String, Vec<u8>)],
) -> Result<Vec<u8>, String> {
    let mut graph = CompositionGraph::new();
    let socket = WacPackage::from_bytes("wasmtap:linked-plugin", None, plugin.to_vec(), graph.types_mut())
        .map_err(|e| format!("cannot read the plugin for linking: {e:#}"))?;
    let socket = graph.register_package(socket).map_err(|e| format!("{e:#}"))?;
    let plugin_inst = graph.instantiate(socket);
    for (name, version, bytes) in tapsets {
        let pkg = WacPackage::from_bytes(&format!("wasmtap:tapset-{name}"), None, bytes.clone(), graph.types_mut())
            .map_err(|e| format!("tapset {name} {version} is not a component: {e:#}"))?;
        let pkg = graph.register_package(pkg).map_err(|e| format!("{e:#}"))?;
        let exports: Vec<_> = graph.types()[graph[pkg].ty()].exports.iter().map(|(n, ty)| (n.clone(), *ty)).collect();
        let mut instance = None;
        for wanted in imports.iter().filter(|i| &i.tapset == name) {
            let Some(&want_ty) = graph.types()[graph[socket].ty()].imports.get(&wanted.import) else {
                return Err(format!("imports `{}`, which its type information does not list", wanted.import));
            };
            let Some((export, ty)) = exports.iter().find(|(n, _)| are_semver_compatible(n, &wanted.import)) else {
                let offered: Vec<&str> = exports.iter().map(|(n, _)| n.as_str()).collect();
                return Err(format!(
                    "imports `{}`, which tapset {name} {version} does not offer (it offers: {})",
                    wanted.import,
                    offered.join(", ")
                ));
            };
            let mut cache = Default::default();
            let mut checker = SubtypeChecker::new(&mut cache);
            checker.is_subtype(*ty, graph.types(), want_ty, graph.types()).map_err(|e| {
                format!(
                    "imports `{}`, which tapset {name} {version} offers as `{export}` but differently: {e:#}",
                    wanted.import
                )
            })?;
            let inst = *instance.get_or_insert_with(|| graph.instantiate(pkg));
            let node = graph.alias_instance_export(inst, export).map_err(|e| format!("{e:#}"))?;
            graph.set_instantiation_argument(plugin_inst, &wanted.import, node).map_err(|e| format!("{e:#}"))?;
        }
    }
    let exports: Vec<String> = graph.types()[graph[socket].ty()].exports.keys().cloned().collect();
    for name in exports {
        let node = graph.alias_instance_export(plugin_inst, &name).map_err(|e| format!("{e:#}"))?;
        graph.export(node, &name).map_err(|e| format!("{e:#}"))?;
    }
    // wasmtime validates what it compiles; validating here too would parse it twice.
    graph.encode(EncodeOptions { validate: false, ..EncodeOptions::default() }).map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tapset_names_come_from_the_package_and_the_hosts_own_are_not_tapsets() {
        assert_eq!(tapset_of("wasmtap:syscalls/decode@0.1.0"), Some("syscalls"));
        assert_eq!(tapset_of("wasmtap:plugin/probes@0.2.0"), None);
        assert_eq!(tapset_of("wasmtap:proc/info@0.1.0"), None);
        assert_eq!(tapset_of("wasi:cli/stderr@0.2.0"), None);
        assert_eq!(tapset_of("wasmtap:proc"), None);
    }

    #[test]
    fn a_malformed_plugin_is_an_error_of_its_own_not_the_hosts_end() {
        let import = TapsetImport { import: "wasmtap:syscalls/decode@0.1.0".into(), tapset: "syscalls".into() };
        // A component header, then garbage.
        let plugin = b"\0asm\x0d\0\x01\0\x07\xff\xff\xff\xff";
        let err = compose(plugin, &[import], &[("syscalls".into(), "0.1.0".into(), plugin.to_vec())]).unwrap_err();
        assert!(!err.is_empty());
        assert!(tapset_imports(plugin).is_err());
    }
}

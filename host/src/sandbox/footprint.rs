//! What instantiating a component creates: core instances, memories and tables, counted
//! from its binary before anything is instantiated. A plugin over its count limit is
//! refused with the host's own typed error, so wasmtime's store counters (whose error
//! carries only text) are a backstop that no plugin reaches.
//!
//! The count follows the component model's index spaces: a core instance section's
//! `instantiate` creates one instance and the memories and tables its module defines; a
//! component instance section's `instantiate` creates everything the nested component
//! does, once per instantiation; aliases of outer modules and components and exports
//! (which add an index, as imports do) carry the item's footprint along. A module or
//! component that comes from an import or from another instance's exports has no
//! footprint the host can know; instantiating one is refused.

use std::ops::Add;

use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind, ComponentTypeRef, Instance,
    Parser, Payload,
};

/// Core instances, memories and tables one instantiation creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub instances: u64,
    pub memories: u64,
    pub tables: u64,
}

impl Add for Footprint {
    type Output = Footprint;

    fn add(self, o: Footprint) -> Footprint {
        Footprint {
            instances: self.instances.saturating_add(o.instances),
            memories: self.memories.saturating_add(o.memories),
            tables: self.tables.saturating_add(o.tables),
        }
    }
}

/// More core instances, memories or tables than the plugin may create.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("would create {count} {what}, more than its limit of {limit} (--max-instances)")]
pub struct CountCap {
    pub what: &'static str,
    pub count: u64,
    pub limit: u64,
}

impl Footprint {
    /// The `--max-instances` it needs: the largest of its counts.
    pub fn needed(&self) -> u64 {
        self.instances.max(self.memories).max(self.tables)
    }

    /// The first count over `limit`, if any.
    pub fn check(&self, limit: usize) -> Result<(), CountCap> {
        let limit = limit as u64;
        let counts = [("core instances", self.instances), ("memories", self.memories), ("tables", self.tables)];
        match counts.into_iter().find(|&(_, count)| count > limit) {
            Some((what, count)) => Err(CountCap { what, count, limit }),
            None => Ok(()),
        }
    }
}

/// Why a component's footprint cannot be counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unbounded {
    #[error("it instantiates a {0} it imports or takes from an instance's exports, whose size the host cannot know")]
    Foreign(&'static str),
    #[error("it refers to {what} {index}, which it does not define")]
    NoSuch { what: &'static str, index: u32 },
    #[error("it cannot be read: {0}")]
    Malformed(String),
}

/// A module or component in an index space: its footprint, or `None` when it is foreign.
type Item = Option<Footprint>;

/// What one component (or module) being read has so far.
enum Frame {
    Module { memories: u64, tables: u64 },
    Component { modules: Vec<Item>, components: Vec<Item>, total: Footprint },
}

/// The footprint of instantiating the component `bytes` once. The bytes must already have
/// passed wasmtime's validation (they compiled); this reads, it does not validate.
pub fn of(bytes: &[u8]) -> Result<Footprint, Unbounded> {
    let malformed = |e: wasmparser::BinaryReaderError| Unbounded::Malformed(e.message().to_string());
    let mut stack: Vec<Frame> = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(malformed)? {
            Payload::Version { encoding, .. } => stack.push(match encoding {
                wasmparser::Encoding::Module => Frame::Module { memories: 0, tables: 0 },
                wasmparser::Encoding::Component => {
                    Frame::Component { modules: Vec::new(), components: Vec::new(), total: Footprint::default() }
                }
            }),
            Payload::MemorySection(s) => {
                if let Some(Frame::Module { memories, .. }) = stack.last_mut() {
                    *memories += u64::from(s.count());
                }
            }
            Payload::TableSection(s) => {
                if let Some(Frame::Module { tables, .. }) = stack.last_mut() {
                    *tables += u64::from(s.count());
                }
            }
            Payload::End(_) => {
                let done = stack.pop().ok_or_else(|| Unbounded::Malformed("an end without a start".into()))?;
                let (is_module, footprint) = match done {
                    Frame::Module { memories, tables } => (true, Footprint { instances: 1, memories, tables }),
                    Frame::Component { total, .. } => (false, total),
                };
                match stack.last_mut() {
                    None => return Ok(footprint),
                    Some(Frame::Component { modules, components, .. }) => {
                        if is_module { modules } else { components }.push(Some(footprint))
                    }
                    Some(Frame::Module { .. }) => return Err(Unbounded::Malformed("a module inside a module".into())),
                }
            }
            Payload::ComponentImportSection(s) => {
                for import in s {
                    match import.map_err(malformed)?.ty {
                        ComponentTypeRef::Module(_) => component(&mut stack)?.0.push(None),
                        ComponentTypeRef::Component(_) => component(&mut stack)?.1.push(None),
                        _ => {}
                    }
                }
            }
            Payload::ComponentAliasSection(s) => {
                for alias in s {
                    match alias.map_err(malformed)? {
                        ComponentAlias::InstanceExport { kind: ComponentExternalKind::Module, .. } => {
                            component(&mut stack)?.0.push(None)
                        }
                        ComponentAlias::InstanceExport { kind: ComponentExternalKind::Component, .. } => {
                            component(&mut stack)?.1.push(None)
                        }
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::CoreModule, count, index } => {
                            let item = outer(&stack, count, index, true)?;
                            component(&mut stack)?.0.push(item)
                        }
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::Component, count, index } => {
                            let item = outer(&stack, count, index, false)?;
                            component(&mut stack)?.1.push(item)
                        }
                        _ => {}
                    }
                }
            }
            Payload::ComponentExportSection(s) => {
                for export in s {
                    let export = export.map_err(malformed)?;
                    let (modules, components, _) = component(&mut stack)?;
                    match export.kind {
                        ComponentExternalKind::Module => modules.push(*lookup(modules, export.index, "core module")?),
                        ComponentExternalKind::Component => {
                            components.push(*lookup(components, export.index, "component")?)
                        }
                        _ => {}
                    }
                }
            }
            Payload::InstanceSection(s) => {
                for instance in s {
                    if let Instance::Instantiate { module_index, .. } = instance.map_err(malformed)? {
                        let (modules, _, total) = component(&mut stack)?;
                        let made =
                            lookup(modules, module_index, "core module")?.ok_or(Unbounded::Foreign("core module"))?;
                        *total = *total + made;
                    }
                }
            }
            Payload::ComponentInstanceSection(s) => {
                for instance in s {
                    if let ComponentInstance::Instantiate { component_index, .. } = instance.map_err(malformed)? {
                        let (_, components, total) = component(&mut stack)?;
                        let made =
                            lookup(components, component_index, "component")?.ok_or(Unbounded::Foreign("component"))?;
                        *total = *total + made;
                    }
                }
            }
            _ => {}
        }
    }
    Err(Unbounded::Malformed("it ends before its last section".into()))
}

/// The component being read: its module and component index spaces and its total.
fn component(stack: &mut [Frame]) -> Result<(&mut Vec<Item>, &mut Vec<Item>, &mut Footprint), Unbounded> {
    match stack.last_mut() {
        Some(Frame::Component { modules, components, total }) => Ok((modules, components, total)),
        _ => Err(Unbounded::Malformed("a component section outside a component".into())),
    }
}

/// The module (or component) `index` of the component `count` levels out.
fn outer(stack: &[Frame], count: u32, index: u32, module: bool) -> Result<Item, Unbounded> {
    let what = if module { "core module" } else { "component" };
    let at = stack.len().checked_sub(1 + count as usize).ok_or(Unbounded::NoSuch { what, index })?;
    match &stack[at] {
        Frame::Component { modules, components, .. } => {
            Ok(*lookup(if module { modules } else { components }, index, what)?)
        }
        Frame::Module { .. } => Err(Unbounded::Malformed("an outer alias into a module".into())),
    }
}

fn lookup<'a>(space: &'a [Item], index: u32, what: &'static str) -> Result<&'a Item, Unbounded> {
    space.get(index as usize).ok_or(Unbounded::NoSuch { what, index })
}

//! A plugin's manifest: what it is, and everything it may ask the host for. The host
//! refuses, at load, a plan that asks for a probe or a capability its manifest does not
//! declare, so an operator who read a manifest knows the most the plugin can do.
//!
//! `wasmtap plugin pack` (and `plugin build`) derives a manifest from the plugin's own
//! `info` and its plan with default parameters, so the two cannot drift; an author adds
//! what other parameters may ask for (`--probe`, `--capability`).
//!
//! ```json
//! {"format":1,"name":"syscount","version":"0.3.0","description":"…","license":"Apache-2.0",
//!  "authors":["…"],"world":"wasmtap:plugin/plugin@0.2.0",
//!  "params":[{"name":"top","kind":"integer","default":"10","description":"…"}],
//!  "probes":["syscall:*:entry"],"capabilities":["kernel-aggregations"],"output-budget":65536}
//! ```

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::wit::types::{self, ParamKind, Plan, PluginInfo, StackMode};

/// The manifest format this host writes and reads.
pub const FORMAT: u32 = 1;
/// The most probe patterns a manifest may declare.
const MAX_PROBES: usize = 256;
/// The longest probe pattern, name or other text field.
const MAX_TEXT: usize = 1024;

/// What a plugin declares about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    pub format: u32,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authors: Vec<String>,
    /// The version of the contract it was built against (`wasmtap:plugin/plugin@0.2.0`).
    pub world: String,
    #[serde(default)]
    pub params: Vec<Param>,
    /// Probe names or patterns (`*` matches any run of characters) its plans may
    /// subscribe to or aggregate over. `begin`, `end` and `interval:*` need no declaring.
    pub probes: Vec<String>,
    #[serde(default)]
    pub capabilities: BTreeSet<Capability>,
    /// The output it expects to write per second, in bytes (shown to operators; the
    /// run's `--output-budget` is what holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_budget: Option<u64>,
    /// A tapset's: the interfaces it offers plugins (`wasmtap:syscalls/decode@0.1.0`).
    /// A tapset asks for no probe and no capability; it runs inside each plugin that
    /// links it, under that plugin's manifest and limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<String>,
    /// What it needs of the sandbox beyond the defaults (a Python plugin's instances).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Needs>,
}

/// Sandbox limits a plugin needs raised to run at all, granted within a ceiling
/// ([`crate::limits::Limits::granting`]) unless the user set them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Needs {
    /// Core instances one instantiation makes (componentize-py's Python: 38).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
}

/// One parameter, as `info` declares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Param {
    pub name: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(default)]
    pub description: String,
}

/// Something beyond events a plugin may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Kernel stacks with its events.
    KernelStacks,
    /// User stacks with its events.
    UserStacks,
    /// Aggregations computed in the kernel.
    KernelAggregations,
}

impl Capability {
    pub const ALL: [Capability; 3] = [Capability::KernelStacks, Capability::UserStacks, Capability::KernelAggregations];

    pub fn name(self) -> &'static str {
        match self {
            Capability::KernelStacks => "kernel-stacks",
            Capability::UserStacks => "user-stacks",
            Capability::KernelAggregations => "kernel-aggregations",
        }
    }

    pub fn parse(s: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == s)
    }
}

impl Manifest {
    /// A manifest derived from what the plugin says of itself and the plan it makes
    /// with default parameters, plus what the author declares beyond it.
    pub fn derive(info: &PluginInfo, world: &str, plan: &Plan, extra: &Extra) -> Manifest {
        let mut probes: BTreeSet<String> = plan_probes(plan).map(generalize).collect();
        probes.extend(extra.probes.iter().cloned());
        let mut capabilities = needed(plan);
        capabilities.extend(extra.capabilities.iter().copied());
        Manifest {
            format: FORMAT,
            name: info.name.clone(),
            version: info.version.clone(),
            description: info.description.clone(),
            license: extra.license.clone(),
            authors: extra.authors.clone(),
            world: world.to_string(),
            params: info
                .params
                .iter()
                .map(|p| Param {
                    name: p.name.clone(),
                    kind: kind_name(p.kind).into(),
                    default: p.default_value.clone(),
                    description: p.description.clone(),
                })
                .collect(),
            probes: probes.into_iter().collect(),
            capabilities,
            output_budget: extra.output_budget,
            limits: extra.instances.map(|n| Needs { instances: Some(n) }),
            exports: Vec::new(),
        }
    }

    /// The manifest of a tapset offering `exports` (its package's interfaces, all of one
    /// version): named after the package, versioned as its interfaces.
    pub fn tapset(exports: &[String], description: &str, extra: &Extra) -> Result<Manifest, String> {
        let first = exports.first().ok_or("exports no interface: not a tapset")?;
        let (package, rest) = first.split_once('/').ok_or_else(|| format!("`{first}` is not an interface"))?;
        let name = package.strip_prefix("wasmtap:").ok_or_else(|| format!("`{first}` is not a wasmtap: interface"))?;
        let version = rest.split_once('@').map(|(_, v)| v).ok_or_else(|| format!("`{first}` has no version"))?;
        if let Some(other) =
            exports.iter().find(|e| !e.starts_with(&format!("{package}/")) || !e.ends_with(&format!("@{version}")))
        {
            return Err(format!(
                "offers `{first}` and `{other}`: a tapset offers the interfaces of one package and version"
            ));
        }
        Ok(Manifest {
            format: FORMAT,
            name: name.to_string(),
            version: version.to_string(),
            description: description.to_string(),
            license: extra.license.clone(),
            authors: extra.authors.clone(),
            world: format!("{package}/tapset@{version}"),
            params: Vec::new(),
            probes: Vec::new(),
            capabilities: BTreeSet::new(),
            output_budget: None,
            limits: None,
            exports: exports.to_vec(),
        })
    }

    /// The core instances it asks for beyond the default ([`crate::limits::Limits::granting`]).
    pub fn instances_asked(&self) -> Option<u32> {
        self.limits.as_ref().and_then(|l| l.instances)
    }

    /// Whether it describes a tapset rather than a plugin.
    pub fn is_tapset(&self) -> bool {
        !self.exports.is_empty()
    }

    /// Declare what `other` declares too (another plan of the same plugin).
    pub fn add(&mut self, other: &Manifest) {
        let mut probes: BTreeSet<String> = self.probes.drain(..).collect();
        probes.extend(other.probes.iter().cloned());
        self.probes = probes.into_iter().collect();
        self.capabilities.extend(other.capabilities.iter().copied());
    }

    pub fn decode(data: &[u8]) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_slice(data).map_err(|e| e.to_string())?;
        if m.format != FORMAT {
            return Err(format!("format {} (this wasmtap reads format {FORMAT})", m.format));
        }
        if m.probes.len() > MAX_PROBES || m.exports.len() > MAX_PROBES {
            return Err(format!(
                "{} probes and {} exports declared, at most {MAX_PROBES} each",
                m.probes.len(),
                m.exports.len()
            ));
        }
        let texts = [&m.name, &m.version, &m.world]
            .into_iter()
            .chain(&m.probes)
            .chain(&m.exports)
            .chain(&m.authors)
            .chain(m.license.iter())
            .chain(m.params.iter().map(|p| &p.name));
        if let Some(long) = texts.clone().find(|t| t.len() > MAX_TEXT) {
            return Err(format!("a field of {} bytes, at most {MAX_TEXT}", long.len()));
        }
        // What a manifest says is printed to people: one line each, no terminal controls.
        let shown = texts.chain(std::iter::once(&m.description)).chain(m.params.iter().map(|p| &p.description));
        if shown.into_iter().any(|t| t.chars().any(char::is_control)) {
            return Err("a field holds control characters".into());
        }
        if m.description.len() > 4 * MAX_TEXT {
            return Err(format!("a description of {} bytes, at most {}", m.description.len(), 4 * MAX_TEXT));
        }
        if m.name.is_empty() {
            return Err("its name is empty".into());
        }
        if let Some(n) = m.limits.as_ref().and_then(|l| l.instances) {
            let most = crate::limits::MANIFEST_MAX_INSTANCES;
            if n == 0 || n as usize > most {
                return Err(format!("limits.instances {n}: a plugin may ask for 1 to {most} core instances"));
            }
        }
        Ok(m)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest serializes")
    }

    /// Whether `probe` is one this manifest declares.
    pub fn declares(&self, probe: &str) -> bool {
        always_allowed(probe) || self.probes.iter().any(|p| glob(p, probe))
    }

    /// Check a plan against the manifest: every probe and capability it uses declared.
    pub fn check(&self, plan: &Plan) -> Result<(), String> {
        let who = format!("the manifest of {} {}", self.name, self.version);
        if let Some(probe) = plan_probes(plan).find(|p| !self.declares(p)) {
            let declared = match self.probes.len() {
                0 => "none".to_string(),
                n if n <= 8 => self.probes.join(", "),
                n => format!("{}, and {} more", self.probes[..8].join(", "), n - 8),
            };
            return Err(format!(
                "its plan asks for probe `{probe}`, which {who} does not declare (it declares: {declared})"
            ));
        }
        if let Some(c) = needed(plan).into_iter().find(|c| !self.capabilities.contains(c)) {
            return Err(format!("its plan asks for {}, which {who} does not declare", c.name()));
        }
        Ok(())
    }
}

/// What an author declares beyond what the default plan shows.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    pub probes: Vec<String>,
    pub capabilities: Vec<Capability>,
    pub license: Option<String>,
    pub authors: Vec<String>,
    pub output_budget: Option<u64>,
    pub instances: Option<u32>,
}

/// Every probe a plan names: subscriptions, aggregations and their start events.
fn plan_probes(plan: &Plan) -> impl Iterator<Item = &str> {
    let subs = plan.subscriptions.iter().map(|s| s.probe.as_str());
    let aggs = plan.aggregations.iter().flat_map(|a| {
        std::iter::once(a.probe.as_str()).chain(
            a.start
                .iter()
                .flat_map(|s| std::iter::once(s.probe.as_str()).chain(s.more.iter().map(|m| m.probe.as_str()))),
        )
    });
    subs.chain(aggs).filter(|p| !always_allowed(p))
}

/// Probes that carry nothing from the system: the run's own clock and ends.
fn always_allowed(probe: &str) -> bool {
    probe == "begin" || probe == "end" || probe.starts_with("interval:")
}

/// The capabilities a plan uses.
fn needed(plan: &Plan) -> BTreeSet<Capability> {
    let mut out = BTreeSet::new();
    for s in &plan.subscriptions {
        if s.stacks.contains(StackMode::KERNEL) {
            out.insert(Capability::KernelStacks);
        }
        if s.stacks.contains(StackMode::USER) {
            out.insert(Capability::UserStacks);
        }
    }
    if !plan.aggregations.is_empty() {
        out.insert(Capability::KernelAggregations);
    }
    out
}

/// A probe from a default plan as the manifest declares it: a trailing number (a
/// sampling rate, a period) stands for any, since parameters choose it.
fn generalize(probe: &str) -> String {
    match probe.rsplit_once(':') {
        Some((head, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => format!("{head}:*"),
        _ => probe.to_string(),
    }
}

fn kind_name(kind: ParamKind) -> &'static str {
    match kind {
        types::ParamKind::Integer => "integer",
        types::ParamKind::Boolean => "boolean",
        types::ParamKind::Text => "text",
        types::ParamKind::Duration => "duration",
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters. With
/// `*` the only wildcard, matching each literal part at its leftmost place after the one
/// before is exact, and costs a substring search per part: linear in the text, whatever
/// a hostile manifest declares.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = &parts[..] else { return pattern == text };
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

//! The shared host's policy: who may trace what through `wasmtap daemon`
//! (`/etc/wasmtap/policy.toml`, docs/service.md). Read once at start and again on
//! SIGHUP; a file that does not hold is refused whole, with the line and the key that
//! are wrong, and the policy in force stays.
//!
//! A tenant is a set of local users and groups with one rule: the scope of the events it
//! sees (its own uid's processes, delegated cgroup v2 subtrees, or everything), the probe
//! classes it may attach, the plugins it may run, and its quotas. A user is the first
//! tenant that names the user or one of its groups; a user no tenant names may not use
//! the daemon. With no file, the policy is root only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::sys::creds;

/// Where the daemon looks for its policy unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/wasmtap/policy.toml";
/// Where the daemon listens unless the policy says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/wasmtap/wasmtap.sock";
/// The largest policy file read.
const MAX_BYTES: u64 = 1 << 20;

/// The whole policy, every name resolved against this host's users and groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The file it came from; `None` for the built-in root-only policy.
    pub source: Option<PathBuf>,
    pub socket: PathBuf,
    /// The group that owns the socket (mode 0660); without one, only root may connect.
    pub socket_group: Option<Named>,
    /// Where the daemon serves its sessions' metrics (`/metrics`), if anywhere.
    pub metrics: Option<String>,
    pub tenants: Vec<Tenant>,
}

/// A user or group by its name and its id on this host.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Named {
    pub name: String,
    pub id: u32,
}

/// One `[[tenant]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    /// Its line in the file, for messages.
    pub line: usize,
    pub users: Vec<Named>,
    pub groups: Vec<Named>,
    pub scope: Scope,
    pub probes: BTreeSet<ProbeClass>,
    pub plugins: PluginRule,
    /// Whether it sees kernel addresses and kernel stacks (redacted otherwise).
    pub kernel_addresses: bool,
    /// Whether it sees and stops every tenant's sessions.
    pub admin: bool,
    /// Whether its sessions' metrics are on the daemon's endpoint.
    pub metrics: bool,
    pub quotas: Quotas,
}

/// Which processes' events a tenant sees, enforced in the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Processes running as the user's own uid.
    Own,
    /// Tasks in these cgroup v2 directories or below them.
    Cgroups(Vec<PathBuf>),
    /// Every process.
    All,
}

/// A class of probes a tenant may attach (begin, end and interval probes are always allowed).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeClass {
    Syscall,
    Proc,
    File,
    /// `tracepoint:CATEGORY:*`, or every category when `None`.
    Tracepoint(Option<String>),
    /// uprobes and uretprobes, only on binaries the user can read.
    Uprobe,
    Usdt,
    /// `profile:hz:N` sampling.
    Profile,
    /// `software:` events (page faults, context switches).
    Software,
}

impl std::fmt::Display for ProbeClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeClass::Syscall => f.write_str("syscall"),
            ProbeClass::Proc => f.write_str("proc"),
            ProbeClass::File => f.write_str("file"),
            ProbeClass::Tracepoint(None) => f.write_str("tracepoint"),
            ProbeClass::Tracepoint(Some(c)) => write!(f, "tracepoint:{c}"),
            ProbeClass::Uprobe => f.write_str("uprobe"),
            ProbeClass::Usdt => f.write_str("usdt"),
            ProbeClass::Profile => f.write_str("profile"),
            ProbeClass::Software => f.write_str("software"),
        }
    }
}

impl ProbeClass {
    const NAMES: &'static str = "syscall, proc, file, tracepoint, tracepoint:CATEGORY, uprobe, usdt, profile, software";

    /// A class as the policy writes it (`syscall`, `tracepoint:sched`…).
    pub fn parse(s: &str) -> Option<ProbeClass> {
        Some(match s {
            "syscall" => ProbeClass::Syscall,
            "proc" => ProbeClass::Proc,
            "file" => ProbeClass::File,
            "tracepoint" => ProbeClass::Tracepoint(None),
            "uprobe" => ProbeClass::Uprobe,
            "usdt" => ProbeClass::Usdt,
            "profile" => ProbeClass::Profile,
            "software" => ProbeClass::Software,
            _ => {
                let category = s.strip_prefix("tracepoint:")?;
                let ok = !category.is_empty()
                    && category.len() <= 64
                    && category.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                return ok.then(|| ProbeClass::Tracepoint(Some(category.to_string())));
            }
        })
    }

    /// Whether this class covers `other` (`tracepoint` covers every `tracepoint:CATEGORY`).
    pub fn covers(&self, other: &ProbeClass) -> bool {
        self == other || (*self == ProbeClass::Tracepoint(None) && matches!(other, ProbeClass::Tracepoint(_)))
    }
}

/// Which plugins a tenant may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginRule {
    /// Only the vetted plugins installed with wasmtap.
    Vetted,
    /// The vetted plugins, and plugin files signed by a key of the host's trust policy
    /// (`/etc/wasmtap/trust.toml`): those named in `signed_by`, or any of them.
    Signed(Option<Vec<String>>),
    /// Any plugin file the user hands over.
    Any,
}

/// A tenant's quotas, per session unless said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quotas {
    /// Sessions at once, for each user of the tenant.
    pub sessions: u32,
    /// Plugins in one session.
    pub plugins: u32,
    /// Memory of one plugin, MiB.
    pub memory_mib: u32,
    /// CPU of a session's plugins, percent of one core.
    pub cpu_percent: u32,
    /// Events a session's plugins may receive per second; the rest are lost as `quota`.
    pub events_per_sec: u64,
    /// Output a session may produce per second, KiB.
    pub output_kib_per_sec: u64,
}

impl Default for Quotas {
    fn default() -> Quotas {
        Quotas {
            sessions: 4,
            plugins: 8,
            memory_mib: 64,
            cpu_percent: 50,
            events_per_sec: 2_000_000,
            output_kib_per_sec: 16 << 10,
        }
    }
}

/// A policy that does not hold: the file, the line, the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read the policy {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path}:{line}: `{key}`: {reason}")]
    At { path: PathBuf, line: usize, key: String, reason: String },
}

/// The answer for a user: the tenant that applies, or why none does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Root: every scope, probe and plugin, and every session.
    Root,
    Tenant(&'a Tenant),
    /// No tenant names the user or any of its groups.
    Refused,
}

impl Policy {
    /// Root only: what holds when there is no policy file.
    pub fn root_only() -> Policy {
        Policy { source: None, socket: DEFAULT_SOCKET.into(), socket_group: None, metrics: None, tenants: Vec::new() }
    }

    /// The policy in `path`; root only if the file does not exist.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let read_err = |e: std::io::Error| PolicyError::Read { path: path.into(), reason: e.to_string() };
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Policy::root_only()),
            Err(e) => return Err(read_err(e)),
        };
        if meta.len() > MAX_BYTES {
            return Err(PolicyError::Read {
                path: path.into(),
                reason: format!("{} bytes, more than the {MAX_BYTES} a policy may have", meta.len()),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Policy::parse(path, &text, &SystemNames)
    }

    /// The policy written in `text` (read from `path`), names resolved by `names`.
    pub fn parse(path: &Path, text: &str, names: &dyn Names) -> Result<Policy, PolicyError> {
        let at = |span: std::ops::Range<usize>, key: String, reason: String| PolicyError::At {
            path: path.into(),
            line: line_of(text, span.start),
            key,
            reason,
        };
        let raw: RawPolicy = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            at(span.clone(), key_at(text, span.start), e.message().trim().to_string())
        })?;
        let mut policy = Policy::root_only();
        policy.source = Some(path.into());
        if let Some(daemon) = raw.daemon {
            if let Some(socket) = daemon.socket {
                let p = PathBuf::from(socket.get_ref());
                if !p.is_absolute() {
                    return Err(at(socket.span(), "daemon.socket".into(), "must be an absolute path".into()));
                }
                policy.socket = p;
            }
            if let Some(group) = daemon.group {
                let id = names.group(group.get_ref()).ok_or_else(|| {
                    at(group.span(), "daemon.group".into(), format!("no group `{}` on this host", group.get_ref()))
                })?;
                policy.socket_group = Some(Named { name: group.get_ref().clone(), id });
            }
            if let Some(metrics) = daemon.metrics {
                let addr = metrics.get_ref();
                let full = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.clone() };
                if full.parse::<std::net::SocketAddr>().is_err() {
                    return Err(at(
                        metrics.span(),
                        "daemon.metrics".into(),
                        "expected ADDRESS:PORT (127.0.0.1:9464) or :PORT".into(),
                    ));
                }
                policy.metrics = Some(addr.clone());
            }
        }
        for (i, t) in raw.tenant.into_iter().enumerate() {
            let key = |k: &str| format!("tenant[{i}].{k}");
            let line = line_of(text, t.span().start);
            let t = t.into_inner();
            // Every name resolved against this host's databases, or refused with its line.
            let resolve =
                |list: &Option<Vec<Spanned<String>>>, field: &str, what: &str, find: &dyn Fn(&str) -> Option<u32>| {
                    list.iter()
                        .flatten()
                        .map(|n| match find(n.get_ref()) {
                            Some(id) => Ok(Named { name: n.get_ref().clone(), id }),
                            None => Err(at(n.span(), key(field), format!("no {what} `{}` on this host", n.get_ref()))),
                        })
                        .collect::<Result<Vec<_>, _>>()
                };
            let users = resolve(&t.users, "users", "user", &|n| names.user(n))?;
            let groups = resolve(&t.groups, "groups", "group", &|n| names.group(n))?;
            if users.is_empty() && groups.is_empty() {
                return Err(PolicyError::At {
                    path: path.into(),
                    line,
                    key: format!("tenant[{i}]"),
                    reason: "names no users and no groups".into(),
                });
            }
            let scope = match (t.scope.get_ref().as_str(), t.cgroups) {
                ("own", None) => Scope::Own,
                ("all", None) => Scope::All,
                ("cgroups", Some(dirs)) if !dirs.get_ref().is_empty() => {
                    let mut paths = Vec::new();
                    for d in dirs.get_ref() {
                        let p = PathBuf::from(d.get_ref());
                        if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
                            let why = format!("`{}` is not an absolute path without `..`", d.get_ref());
                            return Err(at(d.span(), key("cgroups"), why));
                        }
                        paths.push(p);
                    }
                    Scope::Cgroups(paths)
                }
                ("cgroups", Some(dirs)) => {
                    return Err(at(dirs.span(), key("cgroups"), "lists no cgroups".into()));
                }
                ("cgroups", None) => {
                    let why = "scope \"cgroups\" needs `cgroups = [...]`, the delegated directories".into();
                    return Err(at(t.scope.span(), key("scope"), why));
                }
                (_, Some(dirs)) if ["own", "all"].contains(&t.scope.get_ref().as_str()) => {
                    let why = format!("is only for scope \"cgroups\", not \"{}\"", t.scope.get_ref());
                    return Err(at(dirs.span(), key("cgroups"), why));
                }
                (other, _) => {
                    let why = format!("expected \"own\", \"cgroups\" or \"all\", found \"{other}\"");
                    return Err(at(t.scope.span(), key("scope"), why));
                }
            };
            let mut probes = BTreeSet::new();
            for p in &t.probes {
                let class = ProbeClass::parse(p.get_ref()).ok_or_else(|| {
                    at(
                        p.span(),
                        key("probes"),
                        format!("no probe class `{}` (known: {})", p.get_ref(), ProbeClass::NAMES),
                    )
                })?;
                probes.insert(class);
            }
            let plugins = match (t.plugins.as_ref().map(|p| p.get_ref().as_str()), t.signed_by) {
                (Some("signed"), by) => {
                    PluginRule::Signed(by.map(|b| b.into_iter().map(Spanned::into_inner).collect()))
                }
                (_, Some(by)) if !by.is_empty() => {
                    let why = "is only for plugins = \"signed\"".to_string();
                    return Err(at(by[0].span(), key("signed_by"), why));
                }
                (None | Some("vetted"), _) => PluginRule::Vetted,
                (Some("any"), _) => PluginRule::Any,
                (Some(other), _) => {
                    let span = t.plugins.as_ref().map(Spanned::span).unwrap_or(0..0);
                    let why = format!("expected \"vetted\", \"signed\" or \"any\", found \"{other}\"");
                    return Err(at(span, key("plugins"), why));
                }
            };
            let quotas = t.quotas.map(Spanned::into_inner).unwrap_or_default();
            for (name, value) in [
                ("sessions", u64::from(quotas.sessions)),
                ("plugins", u64::from(quotas.plugins)),
                ("memory_mib", u64::from(quotas.memory_mib)),
                ("cpu_percent", u64::from(quotas.cpu_percent)),
                ("events_per_sec", quotas.events_per_sec),
                ("output_kib_per_sec", quotas.output_kib_per_sec),
            ] {
                if value == 0 {
                    let why = "must be at least 1 (to refuse a user, leave it out of every tenant)".into();
                    return Err(PolicyError::At {
                        path: path.into(),
                        line,
                        key: key(&format!("quotas.{name}")),
                        reason: why,
                    });
                }
            }
            policy.tenants.push(Tenant {
                line,
                users,
                groups,
                scope,
                probes,
                plugins,
                kernel_addresses: t.kernel_addresses.unwrap_or(false),
                admin: t.admin.unwrap_or(false),
                metrics: t.metrics.unwrap_or(false),
                quotas,
            });
        }
        Ok(policy)
    }

    /// The rule for a user with `uid` in `groups` (its primary group among them).
    pub fn verdict(&self, uid: u32, groups: &[u32]) -> Verdict<'_> {
        if uid == 0 {
            return Verdict::Root;
        }
        let names =
            |t: &&Tenant| t.users.iter().any(|u| u.id == uid) || t.groups.iter().any(|g| groups.contains(&g.id));
        self.tenants.iter().find(names).map_or(Verdict::Refused, Verdict::Tenant)
    }
}

/// Users and groups by name: this host's databases, or a test's.
pub trait Names {
    fn user(&self, name: &str) -> Option<u32>;
    fn group(&self, name: &str) -> Option<u32>;
}

/// This host's password and group databases.
pub struct SystemNames;

impl Names for SystemNames {
    fn user(&self, name: &str) -> Option<u32> {
        creds::user_named(name).ok().flatten().filter(|_| name.parse::<u32>().is_err()).map(|u| u.uid)
    }

    fn group(&self, name: &str) -> Option<u32> {
        creds::group_named(name).ok().flatten()
    }
}

/// The 1-based line of byte `at` of `text`.
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The key written on the line of byte `at`: what stands before its `=`, or the table
/// header, for errors the TOML reader reports by position only.
pub(crate) fn key_at(text: &str, at: usize) -> String {
    let start = text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("").trim();
    match line.split_once('=') {
        Some((key, _)) if !line.starts_with('[') => key.trim().to_string(),
        _ => line.trim_matches(|c| c == '[' || c == ']').trim().to_string(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    daemon: Option<RawDaemon>,
    #[serde(default)]
    tenant: Vec<Spanned<RawTenant>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    socket: Option<Spanned<String>>,
    group: Option<Spanned<String>>,
    metrics: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    users: Option<Vec<Spanned<String>>>,
    groups: Option<Vec<Spanned<String>>>,
    scope: Spanned<String>,
    cgroups: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    probes: Vec<Spanned<String>>,
    plugins: Option<Spanned<String>>,
    signed_by: Option<Vec<Spanned<String>>>,
    kernel_addresses: Option<bool>,
    admin: Option<bool>,
    metrics: Option<bool>,
    quotas: Option<Spanned<Quotas>>,
}

#[cfg(test)]
mod tests;

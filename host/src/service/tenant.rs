//! What a run started by the daemon for a tenant must hold to: the rule the policy gives
//! the tenant, handed to the run (hidden `--tenant` flag) as JSON and enforced there:
//! the scope ANDed into every collector's kernel filter (kernel aggregations included),
//! the probe classes checked against the plan before anything attaches, the quotas as
//! caps on the plugins' limits, kernel addresses refused unless allowed.

use serde::{Deserialize, Serialize};

use crate::collect::live::KernelFilter;
use crate::collect::probes::ProbeSpec;
use crate::limits::Limits;
use crate::package::trust::Trust;
use crate::policy::{ProbeClass, Quotas, Scope};

/// The longest a tenant's plugin may run in one call (`--deadline` up to this).
pub const TENANT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);
/// The most CPU the collectors of a tenant's run may use before the run is stopped
/// (`--max-kernel-cpu` up to this, never off), in percent of one CPU.
pub const TENANT_KERNEL_CPU: u32 = 100;

/// A tenant's rule, as one run enforces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRule {
    /// The user, for messages.
    pub user: String,
    pub uid: u32,
    /// The user's primary group: the run becomes (uid, gid) once attached.
    pub gid: u32,
    /// Where the rule is written (`policy.toml:12, tenant[1]`), for messages.
    pub rule: String,
    /// `None`: every process (admins, scope "all").
    pub scope: Option<TenantScope>,
    /// Probe classes allowed, as the policy writes them.
    pub probes: Vec<String>,
    pub kernel_addresses: bool,
    pub memory_mib: u32,
    pub cpu_percent: u32,
    pub output_kib_per_sec: u64,
    /// Events a second the run's collectors may send it (`--max-events-per-sec` up to this).
    pub events_per_sec: u64,
    /// The plugins it may run: the host's trust policy narrowed to the tenant's rule.
    pub trust: Trust,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum TenantScope {
    /// The processes of this uid.
    Uid(u32),
    /// Tasks in or below these cgroup v2 directories.
    Cgroups(Vec<std::path::PathBuf>),
}

impl TenantRule {
    pub fn new(
        (user, uid, gid): (&str, u32, u32),
        rule: String,
        scope: &Scope,
        probes: &[ProbeClass],
        kernel_addresses: bool,
        q: &Quotas,
        trust: Trust,
    ) -> TenantRule {
        TenantRule {
            user: user.to_string(),
            uid,
            gid,
            rule,
            scope: match scope {
                Scope::Own => Some(TenantScope::Uid(uid)),
                Scope::Cgroups(dirs) => Some(TenantScope::Cgroups(dirs.clone())),
                Scope::All => None,
            },
            probes: probes.iter().map(ToString::to_string).collect(),
            kernel_addresses,
            memory_mib: q.memory_mib,
            cpu_percent: q.cpu_percent,
            output_kib_per_sec: q.output_kib_per_sec,
            events_per_sec: q.events_per_sec,
            trust,
        }
    }

    /// The events-per-second quota of the run: what was asked, at most the rule's.
    pub fn cap_events(&self, asked: Option<u64>) -> u64 {
        asked.map_or(self.events_per_sec, |n| n.min(self.events_per_sec))
    }

    /// `filter` narrowed to the tenant's scope: what the plugins asked for AND the scope.
    pub fn narrow(&self, mut filter: KernelFilter) -> anyhow::Result<KernelFilter> {
        match &self.scope {
            None => {}
            Some(TenantScope::Uid(uid)) => {
                filter.uids = Some(match filter.uids {
                    Some(asked) => asked.into_iter().filter(|u| u == uid).collect(),
                    None => vec![*uid],
                });
                filter.effective_uids = true;
            }
            Some(TenantScope::Cgroups(dirs)) => {
                let mut delegated = Vec::new();
                for d in dirs {
                    let c = crate::collect::cgroup::lookup(&d.to_string_lossy())
                        .map_err(|e| anyhow::anyhow!("the delegated cgroup of {}: {e}", self.rule))?;
                    delegated.push(c);
                }
                // A plugin's own cgroups count only where they lie within the delegation;
                // asking none means all of it.
                filter.cgroups = Some(match filter.cgroups {
                    Some(asked) => {
                        let inside: Vec<_> = delegated.iter().flat_map(crate::collect::cgroup::subtree_ids).collect();
                        asked.into_iter().filter(|(id, _)| inside.contains(id)).collect()
                    }
                    None => delegated.iter().map(|c| (c.id, c.level)).collect(),
                });
            }
        }
        Ok(filter)
    }

    /// Refuse a probe whose class the rule does not allow.
    pub fn check_probe(&self, name: &str, spec: &ProbeSpec) -> anyhow::Result<()> {
        let Some(class) = class_of(spec) else { return Ok(()) };
        self.check_class(&format!("probe `{name}`"), &class).map_err(anyhow::Error::msg)
    }

    /// Refuse `what` (a probe, as the message names it) if the rule does not allow its class.
    pub fn check_class(&self, what: &str, class: &ProbeClass) -> Result<(), String> {
        let allowed: Vec<ProbeClass> = self.probes.iter().filter_map(|p| ProbeClass::parse(p)).collect();
        if allowed.iter().any(|a| a.covers(class)) {
            return Ok(());
        }
        let list = if self.probes.is_empty() { "none".to_string() } else { self.probes.join(", ") };
        Err(format!(
            "{what} is of class `{class}`, which {} does not allow user {} (allowed: {list})",
            self.rule, self.user
        ))
    }

    /// `limits` capped by the quotas; kernel symbols only where allowed.
    pub fn cap(&self, mut limits: Limits) -> Limits {
        limits.memory_bytes = limits.memory_bytes.min((self.memory_mib as usize) << 20);
        limits.cpu_ms_per_sec = limits.cpu_ms_per_sec.min(u64::from(self.cpu_percent) * 10);
        limits.output_bytes_per_sec = limits.output_bytes_per_sec.min(self.output_kib_per_sec << 10);
        limits.deadline = limits.deadline.min(TENANT_DEADLINE);
        limits.kernel_symbols &= self.kernel_addresses;
        limits
    }
}

/// The policy's class of a probe; timers and begin/end belong to none and are always allowed.
pub fn class_of(spec: &ProbeSpec) -> Option<ProbeClass> {
    use wasmtap_abi::Kind;
    Some(match spec {
        ProbeSpec::Syscall { .. } => ProbeClass::Syscall,
        ProbeSpec::Proc(Kind::Open) => ProbeClass::File,
        ProbeSpec::Proc(_) => ProbeClass::Proc,
        ProbeSpec::Tracepoint { category, .. } => ProbeClass::Tracepoint(Some(category.clone())),
        ProbeSpec::Uprobe { .. } => ProbeClass::Uprobe,
        ProbeSpec::Usdt { .. } => ProbeClass::Usdt,
        ProbeSpec::Profile { .. } => ProbeClass::Profile,
        ProbeSpec::Software { .. } => ProbeClass::Software,
        ProbeSpec::Interval { .. } | ProbeSpec::Begin | ProbeSpec::End => return None,
    })
}

//! Plugins as the pipeline sees them: loaded, started with validated parameters, their
//! subscriptions planned (by `collect::plan`), and events routed to them in batches (never one call per
//! event). A plugin that faults is disabled alone; its later events are counted as dropped.
//!
//! Where each part lives: [`set`] (all plugins of a run, the probe table), [`runner`] (one
//! started plugin: batches, timers, calls), [`subs`] (subscriptions and host-side
//! matching), [`supervise`] (budgets, faults, restarts), [`report`] (rows, reports,
//! accounting), [`bounds`] (the sizes a plugin may declare), [`params`] (values bound to
//! the plugin's declared parameters), [`find`] (a plugin name to its file),
//! [`symbols`] (the symbolizer plugins ask, which also reads /proc for the `proc` tapset:
//! `procfs`).

mod bounds;
pub mod find;
pub mod params;
mod procfs;
mod report;
mod runner;
mod set;
mod subs;
mod supervise;
pub mod symbols;

pub use runner::{Feed, Runner};
pub use set::PluginSet;
use subs::*;
use supervise::*;
pub use supervise::{BACKOFF_BASE, BACKOFF_MAX};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtap_abi::{header, Kind, Record};

use crate::accounting::{AggregationLosses, CounterRow, FaultReport, KernelCounters, PluginStats, ProbeStats};
use crate::clock::Clock;
use crate::collect::cgroup::{self, Cgroup};
use crate::collect::live::KernelFilter;
use crate::collect::plan::{Matcher, Planner, SyscallSub};
use crate::collect::probes::{self, ProbeError, ProbeSpec};
use crate::collect::table::{self, Pred, ProbeLookup, ProbeTable};
use crate::kernel_agg::SharedAggregations;
use crate::limits::{FaultKind, Limits, OnFault};
use crate::output::Output;
use crate::sandbox::{Fault, GuestItem, Instance, LoadedPlugin, Sandbox, SandboxError};
use crate::wit::types::{self, Plan, PluginInfo, TableSpec};
use crate::wit::Cell;

/// Records per `on-batch` call.
pub const BATCH_RECORDS: usize = 1024;

/// Why a plugin could not start.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Resolve(#[from] find::FindError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("plugin {path} failed while starting: {fault}")]
    Fault { path: String, fault: Fault },
    #[error("{plugin}: {message}")]
    Refused { plugin: String, message: String },
    #[error(transparent)]
    Param(#[from] params::ParamError),
    #[error("{plugin}: {error}")]
    Probe { plugin: String, error: ProbeError },
    #[error("{plugin}: bad plan: {reason}")]
    BadPlan { plugin: String, reason: String },
}

/// A plugin loaded and described, not started yet.
pub struct Described {
    pub info: PluginInfo,
    loaded: LoadedPlugin,
    instance: Instance,
}

/// Load a plugin and ask it what it is (within `limits`).
pub fn describe(sandbox: &Sandbox, arg: &str, clock: Clock, limits: &Limits) -> Result<Described, PluginError> {
    let (path, origin) = find::find(arg)?;
    let loaded = sandbox.load(&path, origin)?;
    let fault = |fault| PluginError::Fault { path: path.display().to_string(), fault };
    let limits = &loaded.granted(limits);
    let mut instance = loaded.instantiate(clock, limits).map_err(fault)?;
    let info = instance.info().map_err(fault)?;
    let name_ok = !info.name.is_empty()
        && info.name.len() <= 64
        && info.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !name_ok {
        return Err(PluginError::BadPlan {
            plugin: path.display().to_string(),
            reason: format!("invalid plugin name {:?}", info.name.get(..64).unwrap_or(&info.name)),
        });
    }
    bounds::check_info(&info)
        .map_err(|e| PluginError::BadPlan { plugin: info.name.clone(), reason: format!("bad info: {e}") })?;
    if let Some(m) = &loaded.package().manifest {
        if (m.name.as_str(), m.version.as_str()) != (info.name.as_str(), info.version.as_str()) {
            return Err(PluginError::BadPlan {
                plugin: path.display().to_string(),
                reason: format!(
                    "its manifest is for {} {}, and the plugin says it is {} {}",
                    m.name, m.version, info.name, info.version
                ),
            });
        }
    }
    Ok(Described { info, loaded, instance })
}

impl Described {
    /// The version of the `plugin` world it was built for.
    pub fn world(&self) -> crate::wit::World {
        self.loaded.world()
    }

    /// The file it was loaded from, read as a package (manifest, signatures).
    pub fn package(&self) -> &crate::package::Package {
        self.loaded.package()
    }

    /// Why the trust policy let it run.
    pub fn admitted(&self) -> &crate::package::trust::Admitted {
        self.loaded.admitted()
    }

    /// Start it with `params` and return its plan, without running it (what
    /// `wasmtap plugin pack` derives a manifest from).
    pub fn plan(mut self, params: &[types::Param]) -> Result<Plan, PluginError> {
        let fault = |fault| PluginError::Fault { path: self.loaded.path().display().to_string(), fault };
        let plan = self.instance.start(params).map_err(fault)?;
        let plan = plan.map_err(|message| PluginError::Refused { plugin: self.info.name.clone(), message })?;
        bounds::check_plan(&plan)
            .map_err(|e| PluginError::BadPlan { plugin: self.info.name.clone(), reason: e.to_string() })?;
        Ok(plan)
    }

    /// The same plugin in a fresh instance under other limits (a per-plugin override).
    pub fn with_limits(self, limits: &Limits) -> Result<Described, PluginError> {
        let fault = |fault| PluginError::Fault { path: self.loaded.path().display().to_string(), fault };
        let limits = self.loaded.granted(limits);
        let instance = self.loaded.instantiate(Clock::live(), &limits).map_err(fault)?;
        Ok(Described { instance, ..self })
    }
}

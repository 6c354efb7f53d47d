//! A session's own cgroup, so the kernel holds its run to the tenant's memory and CPU
//! quotas whatever happens inside it. cgroup v2 where its hierarchy offers the memory and
//! cpu controllers (`memory.max`, `cpu.max`); otherwise, as on hybrid hosts whose v2 offers
//! only `hugetlb`, the v1 hierarchies (`memory.limit_in_bytes`, `cpu.cfs_quota_us`,
//! `pids.max`). Removed when the session ends.

use std::io;
use std::path::{Path, PathBuf};

/// Memory a run needs beyond its plugins': the host's rings, chunks in flight, the
/// compiler and the runtime (a streaming run peaks near 64 MiB; compiling a plugin the
/// first time takes more).
pub const HOST_MEMORY: u64 = 384 << 20;
/// CPU the host itself may use beyond its plugins' budgets, in percent of one CPU.
pub const HOST_CPU_PERCENT: u64 = 100;
/// Tasks a run may have (its threads; plugins cannot make processes).
pub const MAX_TASKS: u64 = 256;
const PERIOD_US: u64 = 100_000;

/// The limits of one session's cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub memory_bytes: u64,
    pub cpu_percent: u64,
}

impl Quota {
    /// For `plugins` plugins of `memory_mib` and `cpu_percent` each.
    pub fn for_plugins(plugins: u64, memory_mib: u64, cpu_percent: u64) -> Quota {
        Quota {
            memory_bytes: HOST_MEMORY + plugins * (memory_mib << 20),
            cpu_percent: HOST_CPU_PERCENT + plugins * cpu_percent,
        }
    }
}

/// A session's cgroup: one directory (v2) or one per v1 controller.
#[derive(Debug)]
pub struct SessionCgroup {
    dirs: Vec<PathBuf>,
    /// `v2` or `v1`, for messages.
    pub version: &'static str,
}

impl SessionCgroup {
    /// Make `wasmtap/session-ID` with `quota`, in v2 if it has the controllers, else v1.
    pub fn create(id: u64, quota: Quota) -> io::Result<SessionCgroup> {
        let name = format!("session-{id}");
        if let Some(root) = crate::collect::cgroup::mount_point().filter(|r| v2_has(r, &["memory", "cpu"])) {
            let parent = root.join("wasmtap");
            make_dir(&parent)?;
            std::fs::write(root.join("cgroup.subtree_control"), "+memory +cpu")?;
            std::fs::write(parent.join("cgroup.subtree_control"), "+memory +cpu")?;
            let dir = parent.join(&name);
            make_dir(&dir)?;
            let cg = SessionCgroup { dirs: vec![dir.clone()], version: "v2" };
            std::fs::write(dir.join("memory.max"), quota.memory_bytes.to_string())?;
            std::fs::write(dir.join("cpu.max"), format!("{} {PERIOD_US}", quota.cpu_percent * PERIOD_US / 100))?;
            if dir.join("pids.max").exists() {
                std::fs::write(dir.join("pids.max"), MAX_TASKS.to_string())?;
            }
            return Ok(cg);
        }
        let v1 = Path::new("/sys/fs/cgroup");
        let mut cg = SessionCgroup { dirs: Vec::new(), version: "v1" };
        let settings: [(&str, Vec<(&str, String)>); 3] = [
            ("memory", vec![("memory.limit_in_bytes", quota.memory_bytes.to_string())]),
            (
                "cpu",
                vec![
                    ("cpu.cfs_period_us", PERIOD_US.to_string()),
                    ("cpu.cfs_quota_us", (quota.cpu_percent * PERIOD_US / 100).to_string()),
                ],
            ),
            ("pids", vec![("pids.max", MAX_TASKS.to_string())]),
        ];
        for (controller, files) in settings {
            let root = v1.join(controller);
            if !root.join("cgroup.procs").exists() {
                return Err(io::Error::other(format!(
                    "neither cgroup v2 with the memory and cpu controllers nor the v1 {controller} hierarchy is mounted"
                )));
            }
            let parent = root.join("wasmtap");
            make_dir(&parent)?;
            let dir = parent.join(&name);
            make_dir(&dir)?;
            cg.dirs.push(dir.clone());
            for (file, value) in files {
                std::fs::write(dir.join(file), value)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(file).display())))?;
            }
        }
        Ok(cg)
    }

    /// The directories, one per hierarchy.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

impl Drop for SessionCgroup {
    fn drop(&mut self) {
        // Empty once the run has been reaped; a cgroup with tasks cannot be removed.
        for dir in &self.dirs {
            for _ in 0..100 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// Move this process into the cgroup directories `dirs` (a run started by the daemon, first
/// thing, while it has one thread).
pub fn join(dirs: &[PathBuf]) -> io::Result<()> {
    for dir in dirs {
        std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| io::Error::new(e.kind(), format!("cannot join cgroup {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// The limits the kernel holds a run in `dirs` to, read back from their files: what
/// `--stats` says of a tenant's run. None without directories.
pub fn bounds(dirs: &[PathBuf]) -> Option<crate::accounting::CgroupBounds> {
    let first = dirs.first()?;
    let read = |file: &Path| std::fs::read_to_string(file).ok().map(|s| s.trim().to_string());
    let number = |file: &Path| read(file).and_then(|s| s.parse::<u64>().ok());
    let mut b = crate::accounting::CgroupBounds {
        version: if first.join("cgroup.controllers").exists() { "v2" } else { "v1" }.to_string(),
        dirs: dirs.iter().map(|d| d.display().to_string()).collect(),
        ..Default::default()
    };
    for dir in dirs {
        b.memory_bytes = b.memory_bytes.or_else(|| number(&dir.join("memory.max")));
        b.memory_bytes = b.memory_bytes.or_else(|| number(&dir.join("memory.limit_in_bytes")));
        b.tasks = b.tasks.or_else(|| number(&dir.join("pids.max")));
        if let Some(max) = read(&dir.join("cpu.max")) {
            let mut parts = max.split_whitespace().map(|p| p.parse::<u64>().ok());
            if let (Some(Some(quota)), Some(Some(period))) = (parts.next(), parts.next()) {
                b.cpu_percent = Some(quota * 100 / period.max(1));
            }
        }
        if let (Some(quota), Some(period)) =
            (number(&dir.join("cpu.cfs_quota_us")), number(&dir.join("cpu.cfs_period_us")))
        {
            b.cpu_percent = Some(quota * 100 / period.max(1));
        }
    }
    Some(b)
}

fn v2_has(root: &Path, controllers: &[&str]) -> bool {
    let have = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    controllers.iter().all(|c| have.split_whitespace().any(|h| h == *c))
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            Err(io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))
        }
        _ => Ok(()),
    }
}

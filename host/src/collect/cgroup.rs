//! cgroup v2 filters: a directory names a cgroup; its inode number is the id the kernel
//! reports (`bpf_get_current_cgroup_id`), and its depth below the cgroup2 mount is the
//! level `bpf_get_current_ancestor_cgroup_id` compares at.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A cgroup named by a plugin, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    pub path: PathBuf,
    pub id: u64,
    /// Depth below the cgroup2 root (the root is level 0).
    pub level: u32,
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` or, in the hybrid layout, `/sys/fs/cgroup/unified`).
pub fn mount_point() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir.replace("\\040", " ")))
    })
}

/// Resolve `name`: an absolute directory inside the cgroup2 mount, or a path relative to it.
pub fn lookup(name: &str) -> Result<Cgroup, String> {
    let root = mount_point().ok_or("cgroup v2 is not mounted")?;
    let path = if Path::new(name).is_absolute() { PathBuf::from(name) } else { root.join(name) };
    let path = path.canonicalize().map_err(|e| format!("cgroup `{name}`: {}: {e}", path.display()))?;
    let rel = path
        .strip_prefix(&root)
        .map_err(|_| format!("cgroup `{name}` is not under the cgroup v2 mount {}", root.display()))?;
    let meta = std::fs::metadata(&path).map_err(|e| format!("cgroup `{name}`: {e}"))?;
    if !meta.is_dir() || !path.join("cgroup.procs").exists() {
        return Err(format!("`{}` is not a cgroup directory", path.display()));
    }
    Ok(Cgroup { id: meta.ino(), level: rel.components().count() as u32, path })
}

/// The ids of a cgroup and every cgroup below it now (for matching in the host).
pub fn subtree_ids(cg: &Cgroup) -> BTreeSet<u64> {
    let mut ids = BTreeSet::from([cg.id]);
    let mut stack = vec![cg.path.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if let Ok(meta) = e.metadata() {
                if meta.is_dir() && ids.len() < 100_000 {
                    ids.insert(meta.ino());
                    stack.push(e.path());
                }
            }
        }
    }
    ids
}

//! The shared host (docs/service.md): `wasmtap daemon`, privileged, serves users who are
//! not root over a Unix socket, each identified by the socket's peer credentials and held
//! to its tenant's rule in the policy (`crate::policy`).
//!
//! - `wire.rs`: the versioned protocol, frames and messages.
//! - `daemon.rs`: the service on tokio: the socket, the policy (reloaded on SIGHUP), the
//!   checks of each request, and one run per session, started with the tenant's rule.
//! - `client.rs`: the same CLI for everyone: a user's `wasmtap run` through the daemon,
//!   with its `-c` command started by the user, held until the run is attached.
//! - `cgroup.rs`: a session's cgroup (v2, or v1 on hybrid hosts) with the quotas' memory
//!   and CPU limits.
//! - `tenant.rs`: the rule a tenant's run enforces: its scope ANDed into every kernel
//!   filter, its probe classes, its quotas as caps on the plugins' limits.
//! - `executor.rs`: a tenant's run in two processes: the collectors (privileged) and the
//!   executor that runs the plugins (the tenant's user from its start), events between
//!   them in a shared-memory ring.
//!
//! Each session's run is a child process of the daemon (`wasmtap run` with the tenant's
//! rule), so that everything a run does is the same through the daemon as without it. A
//! tenant's run is confined: in a cgroup of its own with the quotas' memory and CPU
//! limits; its plugins run in an executor process that is the tenant's user from its
//! first instruction, with no capability, `no_new_privs` and its dispatch thread under
//! seccomp, and the collectors' process checks what the executor asks for as hostile.

pub mod cgroup;
pub mod client;
pub mod daemon;
pub mod executor;
pub mod tenant;
pub mod wire;

/// Where a client looks for the daemon: `WASMTAP_SOCKET`, else the default.
pub fn default_socket() -> std::path::PathBuf {
    std::env::var_os("WASMTAP_SOCKET").map_or_else(|| crate::policy::DEFAULT_SOCKET.into(), Into::into)
}

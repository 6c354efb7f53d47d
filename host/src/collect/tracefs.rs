//! tracefs: mounted on demand, where aya and `wasmtap list` look for tracepoints.

use std::path::Path;

/// Where tracefs lives.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Mount tracefs at [`TRACEFS`] if it is not there yet (needs root; best effort).
pub fn ensure_mounted() {
    if Path::new(TRACEFS).join("events").is_dir() {
        return;
    }
    let _ = std::process::Command::new("mount")
        .args(["-t", "tracefs", "tracefs", TRACEFS])
        .stderr(std::process::Stdio::null())
        .status();
}

//! Files the host writes (recordings, flame graphs) are created private: mode 0600, only
//! if nothing is at the path yet, never through a symbolic link. A live run holds root's
//! powers while it creates them, so following a link planted at the path, or widening
//! who can read a trace of every process, is not an option. An existing file is refused
//! rather than replaced: the user chooses what to delete.
//!
//! ```no_run
//! let file = wasmtap::private::create("recording", "/tmp/run.wtrec".as_ref())?;
//! # Ok::<(), wasmtap::private::PrivateFileError>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a file could not be created.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error("cannot create {what} {}: it is a symbolic link (wasmtap does not write through links)", .path.display())]
    Symlink { what: &'static str, path: PathBuf },
    #[error("cannot create {what} {}: it already exists (wasmtap does not overwrite; remove it or choose another name)", .path.display())]
    Exists { what: &'static str, path: PathBuf },
    #[error("cannot create {what} {}: {source}", .path.display())]
    Create { what: &'static str, path: PathBuf, source: io::Error },
}

/// Create `path` for writing, mode 0600, with `O_EXCL | O_NOFOLLOW`; `what` names the
/// file in errors ("recording").
pub fn create(what: &'static str, path: &Path) -> Result<File, PrivateFileError> {
    let opened = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    opened.map_err(|source| {
        let path = path.to_path_buf();
        // O_EXCL refuses a link at the path with EEXIST, dangling or not: tell them apart.
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => PrivateFileError::Symlink { what, path },
            Ok(_) if source.kind() == io::ErrorKind::AlreadyExists => PrivateFileError::Exists { what, path },
            _ => PrivateFileError::Create { what, path, source },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wasmtap-private-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_new_file_is_private_and_a_second_create_is_refused() {
        let dir = temp("new");
        let path = dir.join("f");
        create("recording", &path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let e = create("recording", &path).unwrap_err();
        assert!(matches!(e, PrivateFileError::Exists { .. }), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_symlink_is_refused_and_its_target_left_alone() {
        let dir = temp("link");
        let (target, link) = (dir.join("target"), dir.join("link"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create("flame graph", &link).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot create flame graph {}: it is a symbolic link (wasmtap does not write through links)",
                link.display()
            )
        );
        assert!(!target.exists(), "nothing written through the dangling link");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! Compiled plugins on disk, so Cranelift compiles a plugin once per content and engine
//! instead of on every run.
//!
//! An entry is named `<sha-256 of the wasm>-<engine hash>.cwasm`; the engine hash covers what
//! wasmtime says makes compiled code compatible ([`Engine::precompile_compatibility_hash`])
//! and wasmtime's version. An entry holds a magic line, its own name (so a renamed or copied
//! file is not taken for another plugin), the sha-256 of the payload, and the payload
//! ([`Component::serialize`]):
//!
//! ```text
//! wasmtap-cwasm 1
//! 3f1c…9a-5be0d2c4a1f07e33
//! 8d02…e1
//! <payload>
//! ```
//!
//! Deserializing compiled code is sound only for bytes wasmtime itself produced, so an entry
//! is used only from a directory that is ours (owned by the effective uid, not group- or
//! world-writable) and only when its header and checksum match. Anything else is compiled
//! from source and the entry replaced atomically (temporary file and rename).
//!
//! ```no_run
//! use wasmtap::sandbox::cache::Cache;
//! # fn main() -> wasmtime::Result<()> {
//! let engine = wasmtime::Engine::default();
//! let bytes = std::fs::read("syscount.wasm")?;
//! let (_component, outcome) = Cache::from_env().component(&engine, &bytes)?;
//! eprintln!("syscount: {outcome}"); // "compiled", then "cached" on the next run
//! # Ok(())
//! # }
//! ```

mod deserialize;

use std::ffi::OsString;
use std::fmt;
use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

use super::SandboxError;

/// The largest plugin file `load` compiles.
pub const MAX_PLUGIN_BYTES: u64 = 32 << 20;

/// First line of every entry; bump the number when the layout changes.
const MAGIC: &[u8] = b"wasmtap-cwasm 1\n";

/// The wasmtime this crate is built with. The workspace pins it with `=`, and
/// `wasmtime_version_matches_the_manifest` checks the two agree; wasmtime exports no constant.
const WASMTIME_VERSION: &str = "48.0.8";

pub use crate::package::{hex, sha256, Digest};

/// Where compiled plugins are kept, if anywhere.
#[derive(Clone, Debug)]
pub struct Cache {
    place: Place,
}

#[derive(Clone, Debug)]
enum Place {
    Dir(PathBuf),
    Off(String),
}

/// How [`Cache::component`] obtained a component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A valid entry was deserialized; nothing was compiled.
    Hit,
    /// There was no entry: compiled and stored.
    Compiled,
    /// The entry was invalid (`reason`): compiled and replaced.
    Rebuilt { reason: String },
    /// Compiled without using the cache (disabled, untrusted directory, failed write…).
    Uncached { reason: String },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Hit => write!(f, "cached"),
            Outcome::Compiled => write!(f, "compiled"),
            Outcome::Rebuilt { reason } => write!(f, "rebuilt ({reason})"),
            Outcome::Uncached { reason } => write!(f, "compiled, not cached ({reason})"),
        }
    }
}

impl Cache {
    /// `$WASMTAP_CACHE_DIR` if set (empty or `off` disables), else `$XDG_CACHE_HOME/wasmtap`,
    /// else `$HOME/.cache/wasmtap`. The last two are off when the base directory belongs to
    /// another user (`sudo` keeping the invoking user's `HOME`).
    pub fn from_env() -> Cache {
        Cache::from_vars(|name| std::env::var_os(name))
    }

    fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Cache {
        if let Some(dir) = var("WASMTAP_CACHE_DIR") {
            if dir.is_empty() || dir == "off" {
                return Cache::off("disabled by WASMTAP_CACHE_DIR");
            }
            return Cache::at(dir.into());
        }
        // The XDG spec says to ignore relative paths.
        let absolute = |name| var(name).map(PathBuf::from).filter(|p| p.is_absolute());
        let (base, sub) = match (absolute("XDG_CACHE_HOME"), absolute("HOME")) {
            (Some(xdg), _) => (xdg, "wasmtap"),
            (None, Some(home)) => (home, ".cache/wasmtap"),
            (None, None) => return Cache::off("neither XDG_CACHE_HOME nor HOME is set"),
        };
        // Under `sudo` HOME may still be the invoking user's: creating a root-owned
        // directory there would leave that user with a cache they can never use.
        match std::fs::metadata(&base) {
            Ok(meta) if meta.uid() != crate::sys::euid() => {
                Cache::off(&format!("{} belongs to uid {}, not to this user", base.display(), meta.uid()))
            }
            _ => Cache::at(base.join(sub)),
        }
    }

    /// A cache in `dir`, created (mode 0700) on first use.
    pub fn at(dir: PathBuf) -> Cache {
        Cache { place: Place::Dir(dir) }
    }

    /// No cache: every load compiles.
    pub fn disabled() -> Cache {
        Cache::off("disabled")
    }

    fn off(reason: &str) -> Cache {
        Cache { place: Place::Off(reason.to_string()) }
    }

    /// The directory entries go to, unless the cache is off.
    pub fn dir(&self) -> Option<&Path> {
        match &self.place {
            Place::Dir(dir) => Some(dir),
            Place::Off(_) => None,
        }
    }

    /// The compiled component for `bytes`: from the cache when a valid entry exists, else
    /// compiled (and stored).
    pub fn component(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<(Component, Outcome)> {
        self.component_with_digest(engine, bytes, &sha256(bytes))
    }

    /// [`Cache::component`] for callers that already have the sha-256 of `bytes`.
    pub fn component_with_digest(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &Digest,
    ) -> wasmtime::Result<(Component, Outcome)> {
        let dir = match &self.place {
            Place::Dir(dir) => dir,
            Place::Off(reason) => return uncached(engine, bytes, reason.clone()),
        };
        if let Err(reason) = open_dir(dir) {
            return uncached(engine, bytes, reason);
        }
        let name = entry_name(digest, &engine_hash(engine));
        let path = dir.join(format!("{name}.cwasm"));
        let invalid = match read_entry(engine, &path, &name) {
            Ok(Some(component)) => return Ok((component, Outcome::Hit)),
            Ok(None) => None,
            Err(reason) => Some(reason),
        };
        let component = Component::new(engine, bytes)?;
        let outcome = match (store_entry(dir, &path, &name, &component.serialize()?), invalid) {
            (Ok(()), None) => Outcome::Compiled,
            (Ok(()), Some(reason)) => Outcome::Rebuilt { reason },
            (Err(e), _) => Outcome::Uncached { reason: format!("cannot write {}: {e}", path.display()) },
        };
        Ok((component, outcome))
    }
}

fn uncached(engine: &Engine, bytes: &[u8], reason: String) -> wasmtime::Result<(Component, Outcome)> {
    Ok((Component::new(engine, bytes)?, Outcome::Uncached { reason }))
}

/// Read a plugin file, refusing one larger than [`MAX_PLUGIN_BYTES`] before reading it all
/// (a device or a growing file is caught by the bounded read).
pub fn read_plugin(path: &Path) -> Result<Vec<u8>, SandboxError> {
    let read_err = |source| SandboxError::Read { path: path.into(), source };
    let too_large = |bytes| SandboxError::TooLarge { path: path.into(), bytes, max: MAX_PLUGIN_BYTES };
    let file = File::open(path).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    if len > MAX_PLUGIN_BYTES {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(MAX_PLUGIN_BYTES + 1).read_to_end(&mut bytes).map_err(read_err)?;
    if bytes.len() as u64 > MAX_PLUGIN_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// 16 hex digits identifying which compiled code `engine` can load.
fn engine_hash(engine: &Engine) -> String {
    // std's DefaultHasher may change between Rust releases; sha-256 names stay stable.
    struct Sha256Hasher(Sha256);
    impl Hasher for Sha256Hasher {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            let sum = self.0.clone().finalize();
            u64::from_be_bytes(sum[..8].try_into().expect("sha-256 has 32 bytes"))
        }
    }
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    WASMTIME_VERSION.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// `<sha-256 of the wasm>-<engine hash>`, the entry's file stem.
fn entry_name(digest: &Digest, engine_hash: &str) -> String {
    format!("{}-{engine_hash}", hex(digest))
}

fn encode_entry(name: &str, payload: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(MAGIC.len() + name.len() + 66 + payload.len());
    entry.extend_from_slice(MAGIC);
    entry.extend_from_slice(name.as_bytes());
    entry.push(b'\n');
    entry.extend_from_slice(hex(&sha256(payload)).as_bytes());
    entry.push(b'\n');
    entry.extend_from_slice(payload);
    entry
}

/// The payload of an entry named `name`, once its header and checksum are verified.
fn decode_entry<'a>(entry: &'a [u8], name: &str) -> Result<&'a [u8], &'static str> {
    let rest = entry.strip_prefix(MAGIC).ok_or("not a wasmtap cache entry")?;
    let rest = rest
        .strip_prefix(name.as_bytes())
        .and_then(|r| r.strip_prefix(b"\n"))
        .ok_or("written for another plugin or engine")?;
    let (sum, payload) = match rest.get(64) {
        Some(b'\n') => (&rest[..64], &rest[65..]),
        _ => return Err("truncated header"),
    };
    if sum != hex(&sha256(payload)).as_bytes() {
        return Err("checksum mismatch (truncated or corrupted)");
    }
    Ok(payload)
}

/// The component in the entry at `path`: `None` without one, `Err(reason)` for an entry
/// that must not be used.
fn read_entry(engine: &Engine, path: &Path, name: &str) -> Result<Option<Component>, String> {
    let invalid = |why: &dyn fmt::Display| format!("cache entry {}: {why}", path.display());
    // The directory is ours, so only we put links there; refuse to follow one anyway.
    let mut file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(invalid(&e)),
    };
    let meta = file.metadata().map_err(|e| invalid(&e))?;
    if !meta.is_file() {
        return Err(invalid(&"not a regular file"));
    }
    ours(&meta).map_err(|why| invalid(&why))?;
    let mut entry = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut entry).map_err(|e| invalid(&e))?;
    let payload = decode_entry(&entry, name).map_err(|why| invalid(&why))?;
    let component = deserialize::component(engine, deserialize::Proven::after_checks(payload));
    component.map(Some).map_err(|e| invalid(&format_args!("wasmtime refused it: {e}")))
}

/// Write an entry to a temporary file in `dir`, then rename it over `path`: readers see the
/// old entry or the new one, never half of one.
fn store_entry(dir: &Path, path: &Path, name: &str, payload: &[u8]) -> io::Result<()> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
    // No fsync: an entry torn by a crash fails its checksum and is rebuilt.
    let write = || -> io::Result<()> {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(&encode_entry(name, payload))?;
        std::fs::rename(&tmp, path)
    };
    let result = write();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Create `dir` (mode 0700) if needed and check it is ours.
fn open_dir(dir: &Path) -> Result<(), String> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create cache directory {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot use cache directory {}: {e}", dir.display()))?;
    ours(&meta).map_err(|why| format!("cache directory {} {why}", dir.display()))
}

/// Whether a file or directory belongs to the effective uid and no one else may write it.
fn ours(meta: &Metadata) -> Result<(), String> {
    let euid = crate::sys::euid();
    if meta.uid() != euid {
        return Err(format!("is owned by uid {}, not {euid}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("is writable by group or others (mode {:o})", meta.mode() & 0o7777));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The smallest valid component: the preamble and nothing else.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

    fn temp_dir(tag: &str) -> PathBuf {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("wasmtap-cache-unit-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut v: Vec<PathBuf> = read.map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    }

    #[test]
    fn entry_round_trips() {
        let entry = encode_entry("abc-0123", b"payload bytes");
        assert_eq!(decode_entry(&entry, "abc-0123"), Ok(&b"payload bytes"[..]));
        assert!(entry.starts_with(b"wasmtap-cwasm 1\nabc-0123\n"));
    }

    #[test]
    fn a_flipped_payload_byte_fails_the_checksum() {
        let mut entry = encode_entry("k", &[7u8; 1000]);
        let mid = entry.len() - 500;
        entry[mid] ^= 0xff;
        assert_eq!(decode_entry(&entry, "k"), Err("checksum mismatch (truncated or corrupted)"));
    }

    #[test]
    fn truncation_anywhere_is_rejected() {
        let entry = encode_entry("k", &[7u8; 100]);
        for len in 0..entry.len() {
            assert!(decode_entry(&entry[..len], "k").is_err(), "accepted {len} of {} bytes", entry.len());
        }
    }

    #[test]
    fn an_entry_under_another_name_is_rejected() {
        let entry = encode_entry("aaaa-1", b"x");
        assert_eq!(decode_entry(&entry, "aaaa-2"), Err("written for another plugin or engine"));
        assert_eq!(decode_entry(b"\x7fELF...", "aaaa-1"), Err("not a wasmtap cache entry"));
    }

    #[test]
    fn names_are_content_digest_then_engine_hash() {
        let engine = Engine::default();
        let h = engine_hash(&engine);
        assert_eq!(h.len(), 16);
        assert_eq!(h, engine_hash(&Engine::default()), "stable for equal configurations");
        let mut other = wasmtime::Config::new();
        other.epoch_interruption(true);
        assert_ne!(h, engine_hash(&Engine::new(&other).unwrap()), "differs when compiled code would");
        let name = entry_name(&sha256(b"abc"), &h);
        assert_eq!(name, format!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad-{h}"));
    }

    #[test]
    fn wasmtime_version_matches_the_manifest() {
        let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml")).unwrap();
        let pinned = format!("wasmtime = {{ version = \"={WASMTIME_VERSION}\"");
        assert!(manifest.contains(&pinned), "update WASMTIME_VERSION: {pinned} not in the workspace manifest");
    }

    fn dir_for(vars: &[(&str, &str)]) -> Option<PathBuf> {
        let var = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v));
        Cache::from_vars(var).dir().map(Path::to_path_buf)
    }

    #[test]
    fn environment_picks_the_directory() {
        assert_eq!(dir_for(&[("WASMTAP_CACHE_DIR", "/x/c"), ("HOME", "/")]), Some("/x/c".into()));
        assert_eq!(dir_for(&[("WASMTAP_CACHE_DIR", "off"), ("HOME", "/")]), None);
        assert_eq!(dir_for(&[("WASMTAP_CACHE_DIR", ""), ("HOME", "/")]), None);
        let home = "/nonexistent-home";
        assert_eq!(
            dir_for(&[("XDG_CACHE_HOME", "/nonexistent-xdg"), ("HOME", home)]),
            Some("/nonexistent-xdg/wasmtap".into())
        );
        assert_eq!(
            dir_for(&[("XDG_CACHE_HOME", "relative"), ("HOME", home)]),
            Some("/nonexistent-home/.cache/wasmtap".into())
        );
        assert_eq!(dir_for(&[("HOME", "relative")]), None);
        assert_eq!(dir_for(&[]), None);
    }

    #[test]
    fn a_home_of_another_user_is_not_used() {
        // A directory owned by someone else: `/` when not root, a fresh one handed to nobody when root.
        let foreign = if crate::sys::euid() == 0 {
            let dir = temp_dir("foreign");
            std::fs::create_dir(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            dir
        } else {
            PathBuf::from("/")
        };
        assert_eq!(dir_for(&[("HOME", foreign.to_str().unwrap())]), None);
        if foreign != Path::new("/") {
            std::fs::remove_dir(&foreign).unwrap();
        }
    }

    #[test]
    fn second_load_is_a_hit_and_a_corrupt_entry_is_rebuilt() {
        let engine = Engine::default();
        let dir = temp_dir("hit");
        let cache = Cache::at(dir.clone());
        let (_, outcome) = cache.component(&engine, EMPTY_COMPONENT).unwrap();
        assert_eq!(outcome, Outcome::Compiled);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let [entry] = &entries(&dir)[..] else { panic!("one entry expected: {:?}", entries(&dir)) };
        assert_eq!(std::fs::metadata(entry).unwrap().mode() & 0o777, 0o600);
        let good = std::fs::read(entry).unwrap();
        assert_eq!(cache.component(&engine, EMPTY_COMPONENT).unwrap().1, Outcome::Hit);

        let mut bad = good.clone();
        let mid = bad.len() / 2 + 60;
        bad[mid] ^= 0x55;
        std::fs::write(entry, &bad).unwrap();
        let (_, outcome) = cache.component(&engine, EMPTY_COMPONENT).unwrap();
        assert!(matches!(&outcome, Outcome::Rebuilt { reason } if reason.contains("checksum")), "{outcome:?}");
        assert_eq!(std::fs::read(entry).unwrap(), good);
        assert_eq!(entries(&dir).len(), 1, "no temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_valid_looking_entry_wasmtime_refuses_is_rebuilt() {
        let engine = Engine::default();
        let dir = temp_dir("refused");
        let cache = Cache::at(dir.clone());
        cache.component(&engine, EMPTY_COMPONENT).unwrap();
        let [entry] = &entries(&dir)[..] else { panic!() };
        let name = entry.file_stem().unwrap().to_str().unwrap();
        std::fs::write(entry, encode_entry(name, b"not compiled code")).unwrap();
        let (_, outcome) = cache.component(&engine, EMPTY_COMPONENT).unwrap();
        assert!(matches!(&outcome, Outcome::Rebuilt { reason } if reason.contains("wasmtime refused")), "{outcome:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_group_writable_directory_is_not_used() {
        let engine = Engine::default();
        let dir = temp_dir("shared");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        let (_, outcome) = Cache::at(dir.clone()).component(&engine, EMPTY_COMPONENT).unwrap();
        assert!(matches!(&outcome, Outcome::Uncached { reason } if reason.contains("writable")), "{outcome:?}");
        assert!(entries(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_owned_by_someone_else_is_not_used() {
        // `/` belongs to root; as root, a fresh directory handed to nobody (uid 65534).
        let dir = if crate::sys::euid() == 0 {
            let dir = temp_dir("theirs");
            std::fs::create_dir(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            dir
        } else {
            PathBuf::from("/")
        };
        let (_, outcome) = Cache::at(dir.clone()).component(&Engine::default(), EMPTY_COMPONENT).unwrap();
        assert!(matches!(&outcome, Outcome::Uncached { reason } if reason.contains("is owned by uid")), "{outcome:?}");
        if dir != Path::new("/") {
            assert!(entries(&dir).is_empty());
            std::fs::remove_dir(&dir).unwrap();
        }
    }

    #[test]
    fn a_disabled_cache_compiles_and_a_bad_component_is_an_error() {
        let engine = Engine::default();
        let (_, outcome) = Cache::disabled().component(&engine, EMPTY_COMPONENT).unwrap();
        assert!(matches!(outcome, Outcome::Uncached { .. }));
        let dir = temp_dir("bad");
        assert!(Cache::at(dir.clone()).component(&engine, b"not wasm").is_err());
        assert!(entries(&dir).is_empty(), "nothing stored for a failed compile");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

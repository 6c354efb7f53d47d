//! The compiled-plugin cache: one entry per plugin, reused unchanged, rebuilt when corrupt,
//! never read from or written to a directory others can write. No root needed: `--help`
//! loads the plugin and stops before anything touches the kernel.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use wasmtap_tests::*;

/// A fresh directory to point WASMTAP_CACHE_DIR at (or under).
fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmtap-cache-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `wasmtap run syscount.wasm --help` with the cache in `dir`; it must succeed.
fn help_with_cache(dir: impl AsRef<std::ffi::OsStr>) {
    let o = run(wasmtap().arg("run").arg(wasm("syscount")).arg("--help").env("WASMTAP_CACHE_DIR", dir));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("--param top=INTEGER"), "{}", stdout(&o));
}

/// Every file in `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// The one entry in `dir`, after checking it is the only file there.
fn only_entry(dir: &Path) -> PathBuf {
    let all = files(dir);
    assert_eq!(all.len(), 1, "one file expected: {all:?}");
    assert_eq!(all[0].extension().and_then(|e| e.to_str()), Some("cwasm"), "{all:?}");
    all[0].clone()
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn first_run_stores_one_entry_and_the_second_reuses_it() {
    let dir = fresh_dir("hit");
    help_with_cache(&dir);
    let entry = only_entry(&dir);
    let (bytes, when) = (std::fs::read(&entry).unwrap(), mtime(&entry));
    help_with_cache(&dir);
    assert_eq!(only_entry(&dir), entry);
    assert_eq!(mtime(&entry), when, "a hit does not rewrite the entry");
    assert_eq!(std::fs::read(&entry).unwrap(), bytes);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_or_truncated_entry_is_rebuilt() {
    let dir = fresh_dir("corrupt");
    help_with_cache(&dir);
    let entry = only_entry(&dir);
    let good = std::fs::read(&entry).unwrap();

    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    for b in &mut flipped[mid..mid + 16] {
        *b ^= 0xa5;
    }
    std::fs::write(&entry, &flipped).unwrap();
    help_with_cache(&dir);
    assert_eq!(only_entry(&dir), entry);
    assert!(std::fs::read(&entry).unwrap() == good, "flipped bytes: entry not rewritten to the original");

    std::fs::write(&entry, &good[..good.len() * 2 / 3]).unwrap();
    help_with_cache(&dir);
    assert_eq!(only_entry(&dir), entry);
    assert!(std::fs::read(&entry).unwrap() == good, "truncated: entry not rewritten to the original");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_world_writable_directory_is_neither_read_nor_written() {
    // Learn the entry's name from a trusted directory, then plant garbage under that name
    // in a world-writable one: a run that read it would rebuild and rewrite it.
    let trusted = fresh_dir("trusted");
    help_with_cache(&trusted);
    let name = only_entry(&trusted).file_name().unwrap().to_owned();
    std::fs::remove_dir_all(&trusted).unwrap();

    let shared = fresh_dir("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    help_with_cache(&shared);
    assert!(files(&shared).is_empty(), "nothing written: {:?}", files(&shared));

    let planted = shared.join(&name);
    std::fs::write(&planted, b"planted by someone else").unwrap();
    help_with_cache(&shared);
    assert_eq!(files(&shared), vec![planted.clone()]);
    assert_eq!(std::fs::read(&planted).unwrap(), b"planted by someone else");
    std::fs::remove_dir_all(&shared).unwrap();
}

#[test]
fn cache_off_creates_nothing() {
    let parent = fresh_dir("off");
    std::fs::create_dir(&parent).unwrap();
    // With the cache off, neither the named directory nor the XDG one may appear.
    let o = run(wasmtap()
        .arg("run")
        .arg(wasm("syscount"))
        .arg("--help")
        .env("WASMTAP_CACHE_DIR", "off")
        .env("XDG_CACHE_HOME", &parent)
        .current_dir(&parent));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(files(&parent).is_empty(), "{:?}", files(&parent));
    help_with_cache("");
    std::fs::remove_dir_all(&parent).unwrap();
}

#[test]
fn the_default_directory_follows_xdg_cache_home() {
    let xdg = fresh_dir("xdg");
    std::fs::create_dir(&xdg).unwrap();
    let o = run(wasmtap()
        .arg("run")
        .arg(wasm("syscount"))
        .arg("--help")
        .env_remove("WASMTAP_CACHE_DIR")
        .env("XDG_CACHE_HOME", &xdg));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = xdg.join("wasmtap");
    only_entry(&dir);
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    std::fs::remove_dir_all(&xdg).unwrap();
}

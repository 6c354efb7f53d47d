//! The `syscalls` tapset as a plugin calls it: syscall names, errno names, open flags,
//! signals and wait statuses, strace-like.
//!
//! In a plugin (wasm32) these functions call the tapset component through its interface
//! `wasmtap:syscalls/decode@0.1.0`, which the host links into the plugin at load time:
//! the plugin carries none of the tables, and every plugin in any language that imports
//! the interface decodes the same way. In native builds (a plugin's unit tests) they call
//! the same code directly.
//!
//! Each call crosses into the tapset and back, and a string it returns is copied into the
//! plugin (a few hundred nanoseconds, measured in docs/benchmarks.md): fine once per
//! printed row or report entry. [`syscall_name`] and [`errno_name`], the calls a hot
//! path makes, ask the tapset once per number and remember the answer, so that later
//! calls cost an array lookup, as the tables compiled in did.
//!
//! ```
//! use wasmtap_sdk::syscalls as sc;
//! assert_eq!(sc::format_ret(-2), "-2 ENOENT");
//! assert_eq!(sc::open_flags(sc::o::WRONLY | sc::o::CREAT), "O_WRONLY|O_CREAT");
//! ```

pub use wasmtap_abi::linux::{nr, o};

pub use imp::*;

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code, reason = "wit-bindgen's canonical-ABI glue; generated, not written")]
mod bindings {
    wit_bindgen::generate!({
        path: "../wit/tapsets/syscalls",
        world: "wasmtap:syscalls/user@0.1.0",
    });
}

/// The interface as wit-bindgen makes it, for what the functions below leave out
/// (`syscall-args`).
#[cfg(target_arch = "wasm32")]
pub use bindings::wasmtap::syscalls::decode as raw;

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::raw as t;
    use std::cell::RefCell;

    thread_local! {
        /// Names already asked for, by number: each asked of the tapset once and kept for
        /// the plugin's life (bounded by [`NAMED`] numbers of each kind).
        static SYSCALLS: RefCell<Vec<Option<Option<&'static str>>>> = const { RefCell::new(Vec::new()) };
        static ERRNOS: RefCell<Vec<Option<Option<&'static str>>>> = const { RefCell::new(Vec::new()) };
    }

    /// Numbers below this are remembered once named. No syscall or errno number reaches
    /// it (the kernel's errnos end at 4095, MAX_ERRNO); larger ones are asked every time.
    const NAMED: usize = 4096;

    fn remembered(
        table: &'static std::thread::LocalKey<RefCell<Vec<Option<Option<&'static str>>>>>,
        n: u64,
        ask: impl FnOnce() -> Option<String>,
    ) -> Option<&'static str> {
        let i = usize::try_from(n).ok().filter(|i| *i < NAMED)?;
        if let Some(known) = table.with(|t| t.borrow().get(i).copied().flatten()) {
            return known;
        }
        // Leaked once per number at most: a bounded table of names for the plugin's life.
        let name: Option<&'static str> = ask().map(|s| &*Box::leak(s.into_boxed_str()));
        table.with(|t| {
            let mut t = t.borrow_mut();
            if t.len() <= i {
                t.resize(i + 1, None);
            }
            t[i] = Some(name);
        });
        name
    }

    /// Name of syscall `nr` (`openat`); asked of the tapset once per number.
    pub fn syscall_name(nr: i64) -> Option<&'static str> {
        remembered(&SYSCALLS, u64::try_from(nr).ok()?, || t::syscall_name(nr))
    }
    /// Number of the syscall called `name`.
    pub fn syscall_nr(name: &str) -> Option<i64> {
        t::syscall_nr(name)
    }
    /// Argument `i` of syscall `nr`, printed as strace would.
    pub fn format_arg(nr: i64, i: usize, value: u64) -> String {
        t::format_arg(nr, u32::try_from(i).unwrap_or(u32::MAX), value)
    }
    /// `name=value` for every argument of syscall `nr`.
    pub fn format_args(nr: i64, args: &[u64; 6]) -> String {
        t::format_args(nr, args)
    }
    /// `ENOENT` for 2 or -2; asked of the tapset once per number.
    pub fn errno_name(e: i64) -> Option<&'static str> {
        remembered(&ERRNOS, e.unsigned_abs(), || t::errno_name(e))
    }
    /// Number of the errno called `name`.
    pub fn errno_nr(name: &str) -> Option<i64> {
        t::errno_nr(name)
    }
    /// The C library's message for errno `e`.
    pub fn errno_message(e: i64) -> Option<String> {
        t::errno_message(e)
    }
    /// `-2 ENOENT`, or the number.
    pub fn format_ret(ret: i64) -> String {
        t::format_ret(ret)
    }
    /// `O_WRONLY|O_CREAT|O_TRUNC`.
    pub fn open_flags(flags: u64) -> String {
        t::open_flags(flags)
    }
    /// `creat,append` → the flags.
    pub fn parse_open_flags(text: &str) -> Result<u64, String> {
        t::parse_open_flags(text)
    }
    /// Whether an open with these flags may create a file.
    pub fn creates(flags: u64) -> bool {
        t::creates(flags)
    }
    /// `0644`.
    pub fn format_mode(mode: u64) -> String {
        t::format_mode(mode)
    }
    /// `AT_FDCWD` or the number.
    pub fn format_dirfd(fd: i64) -> String {
        t::format_dirfd(fd)
    }
    /// `SIGKILL`, `SIGRTMIN+2`.
    pub fn signal_name(sig: i32) -> Option<String> {
        t::signal_name(sig)
    }
    /// The signal called `name` (`term`, `SIGTERM`, `15`).
    pub fn signal_nr(name: &str) -> Option<i32> {
        t::signal_nr(name)
    }
    /// `exit 3`, `killed by SIGSEGV (core dumped)`.
    pub fn wait_status(status: i32) -> String {
        t::wait_status(status)
    }
    /// Many syscall names in one call (of the tapset, uncached).
    pub fn syscall_names(nrs: &[i64]) -> Vec<Option<String>> {
        t::syscall_names(nrs)
    }
    /// Many errno names in one call (of the tapset, uncached).
    pub fn errno_names(es: &[i64]) -> Vec<Option<String>> {
        t::errno_names(es)
    }
}

/// Natively the tapset's own functions, with the signatures the wasm side has.
#[cfg(not(target_arch = "wasm32"))]
mod imp {
    pub use wasmtap_syscalls::{
        creates, errno_name, errno_nr, format_arg, format_args, format_dirfd, format_mode, format_ret, open_flags,
        parse_open_flags, signal_name, signal_nr, syscall_name, syscall_nr, wait_status,
    };

    /// The C library's message for errno `e`.
    pub fn errno_message(e: i64) -> Option<String> {
        wasmtap_syscalls::errno_message(e).map(str::to_string)
    }
    /// Many syscall names in one call.
    pub fn syscall_names(nrs: &[i64]) -> Vec<Option<String>> {
        nrs.iter().map(|n| syscall_name(*n).map(str::to_string)).collect()
    }
    /// Many errno names in one call.
    pub fn errno_names(es: &[i64]) -> Vec<Option<String>> {
        es.iter().map(|e| errno_name(*e).map(str::to_string)).collect()
    }
}

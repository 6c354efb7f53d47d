//! The tapset as a component: `wasmtap:syscalls/decode@0.1.0`, answered by this crate's
//! functions. The host links it into each plugin that imports the interface; it runs in
//! that plugin's store, under that plugin's limits.

#![allow(unsafe_code, reason = "wit-bindgen's canonical-ABI glue; generated, not written")]

use crate::ArgKind;

wit_bindgen::generate!({
    path: "../../wit/tapsets/syscalls",
    world: "wasmtap:syscalls/tapset@0.1.0",
});

use exports::wasmtap::syscalls::decode::{self, Guest};

struct Tapset;

fn kind(k: ArgKind) -> decode::ArgKind {
    match k {
        ArgKind::Fd => decode::ArgKind::Fd,
        ArgKind::DirFd => decode::ArgKind::DirFd,
        ArgKind::Path => decode::ArgKind::Path,
        ArgKind::Str => decode::ArgKind::Str,
        ArgKind::OpenFlags => decode::ArgKind::OpenFlags,
        ArgKind::Mode => decode::ArgKind::Mode,
        ArgKind::Signal => decode::ArgKind::Signal,
        ArgKind::Pid => decode::ArgKind::Pid,
        ArgKind::Size => decode::ArgKind::Size,
        ArgKind::Int => decode::ArgKind::Int,
        ArgKind::Uint => decode::ArgKind::Uint,
        ArgKind::Ptr => decode::ArgKind::Ptr,
        ArgKind::Flags => decode::ArgKind::Flags,
    }
}

impl Guest for Tapset {
    fn syscall_name(nr: i64) -> Option<String> {
        crate::syscall_name(nr).map(str::to_string)
    }

    fn syscall_nr(name: String) -> Option<i64> {
        crate::syscall_nr(&name)
    }

    fn syscall_args(nr: i64) -> Option<Vec<decode::Arg>> {
        let args = crate::syscall_args(nr)?;
        Some(args.iter().map(|a| decode::Arg { name: a.name.into(), ty: a.ty.into(), kind: kind(a.kind) }).collect())
    }

    fn format_arg(nr: i64, i: u32, value: u64) -> String {
        crate::format_arg(nr, i as usize, value)
    }

    fn format_args(nr: i64, args: Vec<u64>) -> String {
        // Six registers; fewer are zeros, more are not arguments.
        let mut six = [0u64; 6];
        for (slot, v) in six.iter_mut().zip(args) {
            *slot = v;
        }
        crate::format_args(nr, &six)
    }

    fn errno_name(e: i64) -> Option<String> {
        crate::errno_name(e).map(str::to_string)
    }

    fn errno_nr(name: String) -> Option<i64> {
        crate::errno_nr(&name)
    }

    fn errno_message(e: i64) -> Option<String> {
        crate::errno_message(e).map(str::to_string)
    }

    fn format_ret(ret: i64) -> String {
        crate::format_ret(ret)
    }

    fn open_flags(flags: u64) -> String {
        crate::open_flags(flags)
    }

    fn parse_open_flags(text: String) -> Result<u64, String> {
        crate::parse_open_flags(&text)
    }

    fn creates(flags: u64) -> bool {
        crate::creates(flags)
    }

    fn format_mode(mode: u64) -> String {
        crate::format_mode(mode)
    }

    fn format_dirfd(fd: i64) -> String {
        crate::format_dirfd(fd)
    }

    fn signal_name(sig: i32) -> Option<String> {
        crate::signal_name(sig)
    }

    fn signal_nr(name: String) -> Option<i32> {
        crate::signal_nr(&name)
    }

    fn wait_status(status: i32) -> String {
        crate::wait_status(status)
    }

    fn syscall_names(nrs: Vec<i64>) -> Vec<Option<String>> {
        nrs.into_iter().map(Self::syscall_name).collect()
    }

    fn errno_names(es: Vec<i64>) -> Vec<Option<String>> {
        es.into_iter().map(Self::errno_name).collect()
    }
}

export!(Tapset);

//! The seccomp filter of the dispatch thread: the thread that runs plugin code
//! (wasmtime) and hands it records. Once the collectors are attached it needs no new
//! process, program, file, socket, mount, namespace, credential or kernel object, so a
//! deny list refuses those with `EPERM` — what code that escaped wasmtime would reach for
//! first. The filter is installed on that thread alone (no TSYNC): the symbolizer thread
//! still reads `/proc` and binaries, and threads the dispatch thread starts later inherit
//! it.
//!
//! Two filters, since one seccompiler filter has one action for every match:
//! - [`deny_list`]: `EPERM` for the calls in [`DENIED`] and, by argument, for `clone`
//!   without `CLONE_THREAD` (a new process), signals to other processes, and `bpf(2)`
//!   commands other than reading and deleting elements of maps already held. A system
//!   call of another ABI (32-bit `int 0x80`) ends the process (seccompiler's arch check).
//! - [`clone3_and_x32`]: `ENOSYS` for `clone3`, whose flags a filter cannot read, so that
//!   glibc falls back to `clone`, where `CLONE_THREAD` is checked: a thread may still be
//!   started, a process may not; and `EPERM` for x32 system calls (numbers with bit 30
//!   set), which the deny list's numbers would not cover.

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// System calls the dispatch thread is refused whatever their arguments.
pub const DENIED: &[libc::c_long] = &[
    // Programs and other processes.
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_getfd,
    libc::SYS_pidfd_send_signal,
    libc::SYS_tkill,
    // The network.
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
    // Files: opening, creating, removing, renaming, linking, changing owners and modes.
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_memfd_create,
    libc::SYS_truncate,
    libc::SYS_mknodat,
    libc::SYS_mkdirat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchmodat2,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    // Mounts and namespaces.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    // Kernel objects and settings.
    libc::SYS_perf_event_open,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_quotactl_fd,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    libc::SYS_personality,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    // Credentials. (glibc's set*id functions make every thread of the process repeat the
    // call and abort if one fails, so no thread may call them once the filter is in.)
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_setgroups,
    libc::SYS_capset,
];

/// The older forms x86_64 still has beside the `*at` calls above.
#[cfg(target_arch = "x86_64")]
const DENIED_LEGACY: &[libc::c_long] = &[
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_open,
    libc::SYS_creat,
    libc::SYS_mknod,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_unlink,
    libc::SYS_rename,
    libc::SYS_link,
    libc::SYS_symlink,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_uselib,
    libc::SYS_iopl,
    libc::SYS_ioperm,
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_LEGACY: &[libc::c_long] = &[];

/// `bpf(2)` commands the dispatch thread may still use, on the maps it already holds:
/// look up, iterate and delete elements (counters, kernel aggregations) and read an
/// object's info. Creating maps, loading programs or BTF, attaching, pinning, getting
/// objects by id and updating elements are refused.
const BPF_ALLOWED: &[u32] = &[
    1,  // BPF_MAP_LOOKUP_ELEM
    3,  // BPF_MAP_DELETE_ELEM
    4,  // BPF_MAP_GET_NEXT_KEY
    15, // BPF_OBJ_GET_INFO_BY_FD
    21, // BPF_MAP_LOOKUP_AND_DELETE_ELEM
    24, // BPF_MAP_LOOKUP_BATCH
    25, // BPF_MAP_LOOKUP_AND_DELETE_BATCH
    27, // BPF_MAP_DELETE_BATCH
];

fn cond(arg: u8, op: Op, value: u64) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, Len::Dword, op, value)
}

/// One rule per range of `bpf` commands outside [`BPF_ALLOWED`] (a rule holds at most 6
/// conditions, so "none of these" is written as the ranges between them).
fn bpf_rules() -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let mut rules = Vec::new();
    let mut from = 0u32;
    for &allowed in BPF_ALLOWED.iter().chain(&[u32::MAX]) {
        if allowed > from {
            let mut conds = vec![cond(0, Op::Ge, from.into())?];
            if allowed != u32::MAX {
                conds.push(cond(0, Op::Le, (allowed - 1).into())?);
            }
            rules.push(SeccompRule::new(conds)?);
        }
        from = allowed.saturating_add(1);
    }
    Ok(rules)
}

/// The `EPERM` filter. `command`: the `-c` command's pid, the only process the thread may
/// still signal (to stop it when the run ends); `own_pid`: this process, which glibc
/// signals with `tgkill` (abort, raise).
pub fn deny_list(command: Option<u32>, own_pid: u32) -> io::Result<BpfProgram> {
    let err = |e: &dyn std::fmt::Display| io::Error::other(format!("seccomp filter: {e}"));
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| err(&e))?;
    let build = || -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().chain(DENIED_LEGACY).map(|&nr| (nr, Vec::new())).collect();
        // A new process: clone without CLONE_THREAD (fork and posix_spawn come here
        // once clone3 answers ENOSYS).
        let no_thread = cond(0, Op::MaskedEq(libc::CLONE_THREAD as u64), 0)?;
        rules.insert(libc::SYS_clone, vec![SeccompRule::new(vec![no_thread])?]);
        // Signals: only the command, with kill; only this process, with the others.
        let kill = match command {
            Some(pid) => vec![SeccompRule::new(vec![cond(0, Op::Ne, pid.into())?])?],
            None => Vec::new(),
        };
        rules.insert(libc::SYS_kill, kill);
        for nr in [libc::SYS_tgkill, libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo] {
            rules.insert(nr, vec![SeccompRule::new(vec![cond(0, Op::Ne, own_pid.into())?])?]);
        }
        rules.insert(libc::SYS_bpf, bpf_rules()?);
        Ok(rules)
    };
    let rules = build().map_err(|e| err(&e))?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(|e| err(&e))?;
    BpfProgram::try_from(filter).map_err(|e| err(&e))
}

/// `AUDIT_ARCH_*` of this build (linux/audit.h).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 243 | 0x8000_0000 | 0x4000_0000;

/// The x32 ABI's bit in x86_64 system call numbers.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The second filter: `ENOSYS` for `clone3`, `EPERM` for x32 system calls (x86_64),
/// everything else allowed (the deny list judges it).
pub fn clone3_and_x32() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    // Elsewhere no system call number reaches this bound but -1, which has no call.
    let x32 = if cfg!(target_arch = "x86_64") { X32_SYSCALL_BIT } else { u32::MAX };
    // A jump of n skips n instructions.
    vec![
        ins(LD_W_ABS, 0, 0, 4),                                          // 0: seccomp_data.arch
        ins(JEQ_K, 0, 3, AUDIT_ARCH),                                    // 1: another ABI: 5 (the deny list kills)
        ins(LD_W_ABS, 0, 0, 0),                                          // 2: seccomp_data.nr
        ins(JGE_K, 3, 0, x32),                                           // 3: x32: 7
        ins(JEQ_K, 1, 0, libc::SYS_clone3 as u32),                       // 4: clone3: 6
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),                       // 5
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32), // 6
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),  // 7
    ]
}

/// Install both filters on the calling thread only. Needs `no_new_privs`, which the
/// thread already has after [`super::creds::restrict_all_threads`] (seccompiler sets it
/// again).
pub fn confine_this_thread(command: Option<u32>) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let own_pid = unsafe { libc::getpid() } as u32;
    let deny = deny_list(command, own_pid)?;
    let err = |e: seccompiler::Error| io::Error::other(format!("cannot install the seccomp filter: {e}"));
    seccompiler::apply_filter(&clone3_and_x32()).map_err(err)?;
    seccompiler::apply_filter(&deny).map_err(err)
}

#[cfg(test)]
mod tests;

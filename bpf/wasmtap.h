/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Record layouts shared by every collector. This header is the single source of
 * truth for the event ABI; guest-sdk/abi/src/lib.rs mirrors it field for field and
 * the host checks both at build time (tests/abi.rs). Every record starts with
 * `struct wt_header`; `size` is the whole record in bytes, a multiple of 8.
 * All integers are little-endian (x86_64).
 */
#ifndef WASMTAP_H
#define WASMTAP_H

#define WT_COMM_LEN 16

enum wt_kind {
	WT_SYS_ENTER = 1,
	WT_SYS_EXIT = 2,
	WT_EXEC = 3,
	WT_FORK = 4,
	WT_EXIT = 5,
};

/* Per-CPU counter slots, per kind: COUNTERS[kind * WT_SLOTS + slot]. */
enum wt_slot {
	WT_SLOT_FILTERED = 0, /* seen, rejected by a kernel filter */
	WT_SLOT_EMITTED = 1,  /* written to the ring buffer */
	WT_SLOT_DROPPED = 2,  /* ring buffer full */
	WT_SLOTS = 3,
};
#define WT_KINDS 8

struct wt_header {
	__u16 kind;
	__u16 size;
	__u16 sub;   /* subscription index; the host fills it in per plugin */
	__u16 flags;
	__u64 ts_ns; /* CLOCK_MONOTONIC */
	__u32 pid;   /* tgid */
	__u32 tid;
	__u32 uid;
	__u32 gid;
	__u64 cgroup_id;
	char comm[WT_COMM_LEN];
}; /* 56 bytes */

struct wt_sys_enter {
	struct wt_header h;
	__s64 id;
	__u64 args[6];
}; /* 112 bytes */

struct wt_sys_exit {
	struct wt_header h;
	__s64 id;
	__s64 ret;
}; /* 72 bytes */

#define WT_EXEC_ARGS_MAX 2048 /* bytes of argv kept, NUL-separated */
#define WT_EXEC_ARGC_MAX 32
#define WT_EXEC_TRUNCATED 1   /* h.flags: argv was cut */

struct wt_exec {
	struct wt_header h;
	__u32 ppid;
	__s32 ret;    /* execve return value: 0 or -errno */
	__u32 argc;   /* arguments kept */
	__u32 args_len; /* bytes used in args */
	char args[WT_EXEC_ARGS_MAX];
}; /* 72 + args, rounded up to 8 when emitted */

#define WT_FORK_THREAD 1 /* h.flags: the child is a thread (CLONE_THREAD) */

struct wt_fork {
	struct wt_header h; /* the parent */
	__u32 child_pid;
	__u32 child_tid;
}; /* 64 bytes */

#define WT_EXIT_GROUP_DEAD 1 /* h.flags: the last thread of the process exited */

struct wt_exit {
	struct wt_header h;
	__s32 exit_code; /* wait(2) status: code << 8 | signal */
	__u32 ppid;
	__u64 start_ns;  /* task start time, CLOCK_MONOTONIC */
}; /* 72 bytes */

#endif /* WASMTAP_H */

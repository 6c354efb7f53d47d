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
	WT_TRACEPOINT = 6, /* any tracepoint: the kernel's raw entry */
	WT_USER = 7,       /* uprobe, uretprobe, USDT */
	WT_SAMPLE = 8,     /* perf software event: cpu-clock sampling, page faults... */
	WT_OPEN = 10,      /* a completed open/openat/openat2/creat, with its path */
};

/* Per-CPU counter slots, per row: COUNTERS[row * WT_SLOTS + slot]. */
enum wt_slot {
	WT_SLOT_FILTERED = 0, /* seen, rejected by a kernel filter */
	WT_SLOT_EMITTED = 1,  /* written to the ring buffer */
	WT_SLOT_DROPPED = 2,  /* ring buffer full */
	WT_SLOT_LOST = 3,     /* lost in the kernel for a reason of enum wt_loss */
	WT_SLOTS = 4,
};

/*
 * Why the kernel lost something other than to a full ring buffer: per-CPU counters in
 * each collector's LOSSES map, indexed by reason. Every failed map update, refused
 * record and lost interval is counted here, on the failure path only. The names are
 * the host's (collect::LossReason) and the reports'.
 */
enum wt_loss {
	WT_LOSS_TARGETS_FULL = 0,  /* targets_full: a child of a target not followed (TARGETS full) */
	WT_LOSS_EXEC_MAP_FULL = 1, /* exec_map_full: an exec not reported (EXECS full) */
	WT_LOSS_OPEN_MAP_FULL = 2, /* open_map_full: an open not reported (OPENS full) */
	WT_LOSS_TOO_BIG = 3,       /* record_too_big: a record larger than its buffer */
	WT_LOSS_AGG_MAP_FULL = 4,  /* agg_map_full: an aggregation update lost (AGG_VALUES full) */
	WT_LOSS_STARTS_FULL = 5,   /* start_map_full: an interval's start not kept (AGG_STARTS full) */
	WT_LOSS_SCOPE_FULL = 6,    /* scope_map_full: a thread in scope not remembered (SCOPED_TIDS full) */
	WT_LOSS_QUOTA = 7,         /* quota: an event over the run's events-per-second quota (QUOTA) */
	WT_LOSSES = 8,
};
#define WT_KINDS 16

/*
 * Counter rows: each event is counted once, in the row of the finest probe its
 * collector knows (the host sums rows into per-kind totals). Rows below WT_KINDS are
 * record kinds with no finer row (exec, fork, exit; syscall ids out of range; the
 * aggregation collector's WT_AGG_KIND). The sizes are the collectors' own caps.
 */
#define WT_NR_SYSCALLS 512 /* syscall ids with a row (and a SYSCALLS/ARG_PREDS entry) */
#define WT_TP_SLOTS 1024   /* tracepoints per run (TP_CONFIG entries) */
#define WT_USER_SLOTS 256  /* uprobe/USDT attachments per run (USER_CONFIG entries) */
#define WT_PERF_EVENTS 12  /* perf software events (PERF_COUNT_SW_MAX on 6.x) */
#define WT_ROW_SYS_ENTER 16   /* + syscall id */
#define WT_ROW_SYS_EXIT 528   /* + syscall id */
#define WT_ROW_TRACEPOINT 1040 /* + the tracepoint's slot (struct wt_tp_config) */
#define WT_ROW_USER 2064      /* + the attach cookie */
#define WT_ROW_PERF 2320      /* + the perf entry's slot (struct wt_perf_config) */
#define WT_ROWS 2332

_Static_assert(WT_ROW_SYS_ENTER == WT_KINDS, "rows: kinds, then syscall entries");
_Static_assert(WT_ROW_SYS_EXIT == WT_ROW_SYS_ENTER + WT_NR_SYSCALLS, "rows: syscall exits");
_Static_assert(WT_ROW_TRACEPOINT == WT_ROW_SYS_EXIT + WT_NR_SYSCALLS, "rows: tracepoints");
_Static_assert(WT_ROW_USER == WT_ROW_TRACEPOINT + WT_TP_SLOTS, "rows: user probes");
_Static_assert(WT_ROW_PERF == WT_ROW_USER + WT_USER_SLOTS, "rows: perf events");
_Static_assert(WT_ROWS == WT_ROW_PERF + WT_PERF_EVENTS, "rows: end");

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
	/* CPU time of the process so far: its threads already reaped plus this one. cpu_ns
	 * is the scheduler's exact runtime; user_ns and sys_ns are its tick-sampled split. */
	__u64 cpu_ns;
	__u64 user_ns;
	__u64 sys_ns;
}; /* 96 bytes; 72 in recordings made before the CPU times were added */

/*
 * file:open. One record per completed open, openat, openat2 or creat, emitted at the
 * syscall's exit (where the kernel has just read the path, so it is resident). data
 * holds the path as passed, NUL-terminated (path_len bytes with the NUL; 0 if it could
 * not be read). For a relative path, base_len bytes follow:
 * the directory it is relative to (the cwd, or the dir fd's), as names from the
 * innermost up, each NUL-terminated; the process's root ends the walk.
 */
#define WT_OPEN_PATH_MAX 512   /* bytes of path kept */
#define WT_OPEN_NAME_MAX 256   /* bytes of one directory name kept */
#define WT_OPEN_BASE_MAX 512   /* bytes of directory names kept */
#define WT_OPEN_DEPTH_MAX 24   /* directory names kept */
#define WT_OPEN_DATA_MAX (WT_OPEN_PATH_MAX + WT_OPEN_BASE_MAX + WT_OPEN_NAME_MAX)
#define WT_OPEN_PATH_TRUNCATED 1 /* h.flags: the path was cut */
#define WT_OPEN_BASE_TRUNCATED 2 /* h.flags: the directory is deeper than what was kept */
#define WT_OPEN_BASE_WALKED 4    /* h.flags: base holds the directory (none: absolute path, bad dir fd) */

struct wt_open {
	struct wt_header h;
	__s32 nr;         /* syscall: open, openat, openat2 or creat */
	__s32 dfd;        /* the dir fd; AT_FDCWD (-100) for open and creat */
	__u64 flags;      /* open flags (openat2: how.flags; creat: O_CREAT|O_WRONLY|O_TRUNC) */
	__u64 mode;       /* creation mode */
	__s64 ret;        /* the new fd, or -errno */
	__u64 latency_ns; /* syscall entry to exit */
	__u16 path_len;
	__u16 base_len;
	__u16 base_depth; /* names in base */
	__u16 reserved;
	char data[WT_OPEN_DATA_MAX];
}; /* 104 + data, rounded up to 8 when emitted */

/*
 * Stacks. A record of kind tracepoint, user or sample whose h.flags has WT_HAS_STACK
 * ends with a stack trailer: kernel frames, then user frames (u64 instruction
 * addresses, innermost first), then struct wt_stack_counts as the record's last 8 bytes.
 */
#define WT_HAS_STACK 0x8000
#define WT_STACK_MAX 127 /* frames per stack (the kernel's perf_event_max_stack) */

struct wt_stack_counts {
	__u16 kernel;
	__u16 user;
	__u32 reserved;
};

/*
 * Strings in the traced process's memory, read in the kernel as the probe fires
 * (bpftrace's str()): a record of kind tracepoint or user whose h.flags has
 * WT_HAS_STRINGS carries, right after the kind's own bytes (a tracepoint's entry padded
 * to 8; a user record's 168 bytes) and before any stack trailer, a struct wt_strings,
 * then its strings in order, each NUL-terminated and padded to 8 (an unreadable one
 * takes no bytes).
 */
#define WT_HAS_STRINGS 0x4000
#define WT_STR_MAX 4          /* strings per record */
#define WT_STR_BYTES 256      /* bytes of a string kept, its NUL included */
#define WT_STR_UNREADABLE 0xffff

struct wt_strings {
	__u16 n;                  /* strings that follow, at most WT_STR_MAX */
	__u16 reserved;
	__u16 src[WT_STR_MAX];    /* each one's source: a tracepoint field's offset in the entry, a user probe's index in args */
	__u16 len[WT_STR_MAX];    /* each one's bytes before its NUL; WT_STR_UNREADABLE if it could not be read */
	__u32 reserved2;
}; /* 24 bytes */

/* Per-subscription comparisons evaluated in the kernel, ANDed (docs/architecture.md). */
enum wt_op {
	WT_OP_EQ = 1,
	WT_OP_NE = 2,
	WT_OP_LT = 3,
	WT_OP_LE = 4,
	WT_OP_GT = 5,
	WT_OP_GE = 6,
	WT_OP_MASK_ANY = 7,  /* (v & value) != 0 */
	WT_OP_MASK_NONE = 8, /* (v & value) == 0 */
};
#define WT_PRED_SIGNED 1
#define WT_PREDS_MAX 4

struct wt_pred {
	__u16 off;  /* byte offset of the value in the probe's data */
	__u8 size;  /* 1, 2, 4 or 8 */
	__u8 flags; /* WT_PRED_SIGNED */
	__u8 op;    /* enum wt_op; 0 ends the list */
	__u8 pad[3];
	__u64 value;
}; /* 16 bytes */

struct wt_preds {
	struct wt_pred p[WT_PREDS_MAX];
};

#define WT_TP_DATA_MAX 4032 /* bytes of a tracepoint entry kept */
#define WT_TP_TRUNCATED 1   /* h.flags: the entry was longer than WT_TP_DATA_MAX */

struct wt_tracepoint {
	struct wt_header h;
	__u32 event_id; /* the tracefs event id (events/CAT/NAME/id) */
	__u32 data_len; /* bytes of the entry in data */
	/* __u8 data[data_len]: the kernel's trace entry, fields at the offsets of the
	 * tracefs format file; padded to 8; then the stack trailer if any */
}; /* 64 bytes + data */

#define WT_USER_RETURN 1 /* h.flags: a uretprobe; args[0] is the return value */
#define WT_USER_ARGS 12

struct wt_user {
	struct wt_header h;
	__u32 probe;    /* the host's index of the probe (the attach cookie) */
	__u32 nargs;    /* valid entries in args */
	__u64 ip;       /* the probed instruction (virtual address in the process) */
	__u64 args[WT_USER_ARGS]; /* uprobe: arg0-5 by the SysV ABI; usdt: evaluated arguments */
}; /* 168 bytes, then the stack trailer if any */

struct wt_sample {
	struct wt_header h;
	__u32 event;  /* the perf software event: PERF_COUNT_SW_* */
	__u32 cpu;
	__u64 addr;   /* page faults: the faulting address; otherwise 0 */
	__u64 ip;     /* the interrupted instruction */
}; /* 80 bytes, then the stack trailer if any */

/*
 * Kernel aggregations (agg.bpf.c). Nothing is streamed: each probe site runs up to
 * WT_AGG_ACTIONS actions, each of which updates one aggregation in AGG_VALUES (a
 * per-CPU hash the host sums) or, when its key is a small integer, in AGG_ARRAY (a
 * per-CPU array, one slot a key: no hashing), or records the start of an interval in
 * AGG_STARTS.
 * Histogram bucket numbers are those of wasmtap_abi::hist (DTrace's quantize and
 * lquantize), so the host, the SDK and the kernel agree on every boundary.
 */
#define WT_AGG_KEYS 4
#define WT_AGG_ACTIONS 8
#define WT_AGG_SITES 64
#define WT_AGG_SYS_ENTER 0 /* site of the sys_enter program */
#define WT_AGG_SYS_EXIT 1  /* site of the sys_exit program */
/* The scheduler's tracepoints attached as BTF tracepoints (agg.bpf.c); tracefs
 * tracepoints use WT_AGG_TP_SITES.. (the cookie). */
#define WT_AGG_SCHED_SWITCH 2
#define WT_AGG_SCHED_WAKEUP 3
#define WT_AGG_SCHED_WAKEUP_NEW 4
#define WT_AGG_TP_SITES 5
#define WT_AGG_KIND 9      /* (not a record kind) COUNTERS row: filtered, aggregated, dropped (map full) */
/* Aggregation ids below WT_AGG_ARRAY_AGGS may keep their values in AGG_ARRAY, at
 * agg * WT_AGG_ARRAY_SLOTS + the key's slot (enum wt_agg_slots). */
#define WT_AGG_ARRAY_AGGS 8
#define WT_AGG_ARRAY_SLOTS 512
/* (Aggregation, comm) pairs with an index in AGG_COMM_VALUES, over every aggregation. */
#define WT_AGG_COMMS 8192
/* Aggregation ids below WT_AGG_SYS_HIST_AGGS keyed by the syscall number alone with a
 * log2 histogram (WT_SLOTS_SYSCALL_BUCKETS) keep each syscall's buckets in
 * AGG_SYS_HIST, at (agg * WT_NR_SYSCALLS + nr) * WT_AGG_SYS_HIST_STRIDE + bucket;
 * bucket WT_AGG_SYS_HIST_USED of a syscall marks, per CPU, the buckets it has used. */
#define WT_AGG_SYS_HIST_AGGS 2
#define WT_AGG_SYS_HIST_STRIDE 66
#define WT_AGG_SYS_HIST_USED 65
/* Aggregation ids below WT_AGG_TASK_STARTS whose intervals start and end on the current
 * thread keep its start with the thread (AGG_TASK_STARTS), at index agg. */
#define WT_AGG_TASK_STARTS 8
/* Each CPU's last comm and its index, per aggregation id modulo this (AGG_COMM_LAST). */
#define WT_AGG_COMM_LAST 8

/* Where an action's values go: the hash, or the array by one of these slots. A key
 * with no slot (a syscall number past the array) goes to the hash. */
enum wt_agg_slots {
	WT_SLOTS_HASH = 0,
	WT_SLOTS_SYSCALL = 1, /* the key is the syscall number alone: slot = number */
	WT_SLOTS_SINGLE = 2,  /* no key: slot 0 */
	WT_SLOTS_BUCKETS = 3, /* no key, a histogram: slot = WT_AGG_ARRAY_SLOTS / 2 + bucket */
	WT_SLOTS_COMM = 4,    /* the key is the comm alone: AGG_COMM_VALUES, by the comm's index */
	WT_SLOTS_SYSCALL_BUCKETS = 5, /* the syscall number alone, a log2 histogram: AGG_SYS_HIST */
};

enum wt_agg_source {
	WT_SRC_NONE = 0,
	WT_SRC_COMM = 1,
	WT_SRC_PID = 2,
	WT_SRC_TID = 3,
	WT_SRC_UID = 4,
	WT_SRC_CGROUP = 5,
	WT_SRC_SYSCALL = 7,
	WT_SRC_FIELD = 8,   /* size bytes at off of the probe's data */
	WT_SRC_LATENCY = 9, /* ns since the matching start */
};

enum wt_agg_fn {
	WT_FN_COUNT = 1,
	WT_FN_SUM = 2,
	WT_FN_MIN = 3,
	WT_FN_MAX = 4,
	WT_FN_LOG2 = 5,
	WT_FN_LINEAR = 6,
};

enum wt_agg_role {
	WT_ROLE_UPDATE = 0, /* aggregate this event */
	WT_ROLE_START = 1,  /* remember when this event happened, by corr */
	WT_ROLE_END = 2,    /* aggregate the time since the start with the same corr */
};

/* A correlation field that is a thread id: the run's scope applies to that thread, not
 * to the task running when the event fires (a wakeup is often run by another CPU's
 * idle task, a switch by the task leaving). */
#define WT_SRC_TASK 2
/* A correlation by the current thread whose every start and end is on that thread: the
 * start is kept with the thread (AGG_TASK_STARTS), not in AGG_STARTS. */
#define WT_SRC_CURRENT 4
/* A correlation by a field that names a task the probe hands over (the scheduler's
 * BTF tracepoints: prev, next, the woken task), whose every start and end is such a
 * field: the start is kept with that task (AGG_TASK_STARTS), not in AGG_STARTS. */
#define WT_SRC_NAMED 8

struct wt_agg_src {
	__u8 src;   /* enum wt_agg_source */
	__u8 size;  /* WT_SRC_FIELD: 1, 2, 4 or 8 */
	__u8 flags; /* WT_PRED_SIGNED, WT_SRC_TASK */
	__u8 pad;
	__u16 off;  /* WT_SRC_FIELD: byte offset in the probe's data */
	__u16 pad2;
}; /* 8 bytes */

/* The probe's data: a tracepoint's entry; for syscalls { id, args[6] } on entry and
 * { id, ret } on exit (the record layouts from offset 56). */
struct wt_agg_action {
	__u32 agg;              /* aggregation id (AGG_VALUES key) */
	__u8 role;              /* enum wt_agg_role */
	__u8 fn;                /* enum wt_agg_fn */
	__u8 filter_syscalls;   /* only syscall numbers set in `syscalls` */
	__u8 slots;             /* enum wt_agg_slots */
	struct wt_agg_src keys[WT_AGG_KEYS]; /* WT_SRC_NONE ends the key */
	struct wt_agg_src value;
	struct wt_agg_src corr; /* start and end: WT_SRC_TID or WT_SRC_FIELD */
	__s64 lin_min;          /* WT_FN_LINEAR: buckets [min + i*step, ...) */
	__u64 lin_step;
	__u64 lin_levels;
	struct wt_preds preds;
	__u8 syscalls[64];      /* bitmap of syscall numbers below 512 */
}; /* 208 bytes */

#define WT_SITE_TASKS 1 /* an action's correlation is WT_SRC_TASK */
#define WT_SITE_DATA 2  /* an action reads the probe's data (fields, comparisons) */

struct wt_agg_site {
	__u32 n;     /* actions used */
	__u32 flags; /* WT_SITE_TASKS */
	struct wt_agg_action a[WT_AGG_ACTIONS];
}; /* 1672 bytes */

struct wt_agg_key {
	__u32 agg;
	__s32 bucket;            /* histograms: the bucket number; otherwise 0 */
	__u64 parts[WT_AGG_KEYS]; /* key i (not comm) in parts[i] */
	char comm[WT_COMM_LEN];  /* the comm key part, if any */
}; /* 56 bytes */

struct wt_agg_value {
	__u64 count;
	__s64 sum;
	__s64 min;
	__s64 max;
}; /* 32 bytes, per CPU */

/* A bucket of AGG_SYS_HIST. */
struct wt_agg_bucket {
	__u64 count;
	__s64 sum;
};

struct wt_agg_comm_key {
	__u32 agg;
	char comm[WT_COMM_LEN];
}; /* 20 bytes */

struct wt_agg_start_key {
	__u32 agg;
	__u32 pad;
	__u64 corr;
};

/* Aggregation ids with loss counters of their own (AGG_LOSSES), so that a report can
 * say whose losses they were: [agg * 2] updates lost (WT_LOSS_AGG_MAP_FULL), [agg * 2
 * + 1] starts refused (WT_LOSS_STARTS_FULL). Larger ids count in LOSSES only. */
#define WT_AGG_IDS 1024

/* The aggregations whose intervals are keyed by a thread id, for the exit program
 * (AGG_TID_AGGS): at most WT_AGG_TID_AGGS; the host refuses more. */
#define WT_AGG_TID_AGGS 64

struct wt_agg_tid_aggs {
	__u32 n;
	__u32 agg[WT_AGG_TID_AGGS];
}; /* 260 bytes */

#endif /* WASMTAP_H */

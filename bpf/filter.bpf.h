/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every collector shares: the ring buffer, the per-CPU counters, and the
 * kernel-side filters the host configures before attaching (docs/architecture.md):
 * its own tgid excluded, a target process set that follows forks (-p / -c),
 * uid and comm sets. Each collector is a separate object, so each has its own
 * copy of these maps; the host writes the same configuration into all of them.
 */
#ifndef WASMTAP_FILTER_BPF_H
#define WASMTAP_FILTER_BPF_H

#include "wasmtap.h"

#define BPF_RB_NO_WAKEUP_FLAG 1

const volatile __u32 cfg_self_tgid = 0;
/* The overload guard's measuring process, another process of ours (0: none). */
const volatile __u32 cfg_meter_tgid = 0;
/* A tenant's executor, the process that runs its plugins, another process of ours (0: none). */
const volatile __u32 cfg_executor_tgid = 0;
const volatile __u32 cfg_filter_targets = 0;  /* only tgids in TARGETS */
const volatile __u32 cfg_follow_children = 0; /* forks of a target become targets */
/* 1: the task's uid must be in UIDS; 2: it must be cfg_uid (one uid, as a tenant's own
 * scope: two loads and a compare where the hash costs tens of ns). */
const volatile __u32 cfg_filter_uids = 0;
const volatile __u32 cfg_uid = 0;
const volatile __u32 cfg_filter_euid = 0;     /* the effective uid must pass too */
const volatile __u32 cfg_filter_comms = 0;
const volatile __u32 cfg_filter_cgroups = 0;  /* only tasks in or below a cgroup of CGROUPS */
const volatile __u32 cfg_cgroup_levels = 0;   /* deepest level of a cgroup in CGROUPS */
const volatile __u64 cfg_submit_flags = BPF_RB_NO_WAKEUP_FLAG;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} EVENTS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} TARGETS SEC(".maps");

/* How many times TARGETS has changed: slot 0 counts the kernel's changes (a target's
 * child added, a target gone), slot 1 the host's. Each slot has one kind of writer, so
 * neither loses the other's counts. (The host writes the set before attaching and then
 * freezes it, so its slot stays 0 today.) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} TARGETS_GEN SEC(".maps");

/* The target whose last thread this CPU saw exit last (wt_untrack_exit), removed from
 * TARGETS there: the other programs of its sched_process_exit, which run after the
 * tracking program, still see its exit as a target's. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} EXITED SEC(".maps");

/* This CPU's last answer of TARGETS: a syscall-heavy task asks about the same tgid
 * event after event, and an array slot costs a few ns where the hash costs tens. Valid
 * while both counts of TARGETS_GEN are those it was taken at. */
struct wt_target_cache {
	__u32 tgid;
	__u32 verdict; /* 0: empty, 1: not a target, 2: a target */
	__u64 gen[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_target_cache);
} TARGET_CACHE SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} UIDS SEC(".maps");

struct wt_comm_key {
	char comm[WT_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct wt_comm_key);
	__type(value, __u8);
} COMMS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u8);
} CGROUPS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WT_ROWS * WT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} COUNTERS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WT_LOSSES);
	__type(key, __u32);
	__type(value, __u64);
} LOSSES SEC(".maps");

/*
 * The run's events-per-second quota (a tenant's `events_per_sec`): one budget for all
 * the run's collectors, since each collector is an object of its own. The host creates
 * one array of one counter, sets it in every collector's QUOTA before attaching, and
 * zeroes the counter at the start of every window (100 ms): the kernel only counts and
 * compares, with no clock to read. An event past the window's budget is lost under
 * WT_LOSS_QUOTA before it is built or written; only events that pass every filter
 * count. A host too slow to start the next window lets fewer events through, never more.
 */
const volatile __u64 cfg_quota_per_window = 0; /* 0: no quota, none of this runs */

struct wt_quota_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64); /* events let through in this window */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct wt_quota_map);
} QUOTA SEC(".maps");

/* Count one loss under its reason (enum wt_loss); called on failure paths only. */
static __always_inline void wt_lose(__u32 reason)
{
	__u64 *v = bpf_map_lookup_elem(&LOSSES, &reason);

	if (v)
		*v += 1;
}

/* Count one event in `row` (wasmtap.h): one lookup, whatever the row. */
static __always_inline void wt_count(__u32 row, __u32 slot)
{
	__u32 key = row * WT_SLOTS + slot;
	__u64 *v = bpf_map_lookup_elem(&COUNTERS, &key);

	if (v)
		*v += 1;
}

/* An event of `row` lost in the kernel for `reason`: counted in both. */
static __always_inline void wt_count_lost(__u32 row, __u32 reason)
{
	wt_count(row, WT_SLOT_LOST);
	wt_lose(reason);
}

/* Whether the run's quota lets one more event of `row` out; if not, it is counted lost
 * under WT_LOSS_QUOTA. Without a quota this is nothing (the verifier drops it). */
static __always_inline int wt_quota_pass(__u32 row)
{
	__u32 zero = 0;
	__u64 *used = NULL;
	void *inner;

	if (!cfg_quota_per_window)
		return 1;
	inner = bpf_map_lookup_elem(&QUOTA, &zero);
	if (inner)
		used = bpf_map_lookup_elem(inner, &zero);
	/* Without its budget (the host sets it before attaching) nothing goes out. */
	if (!used || *used >= cfg_quota_per_window) {
		wt_count_lost(row, WT_LOSS_QUOTA);
		return 0;
	}
	__sync_fetch_and_add(used, 1);
	return 1;
}

/* The row of entry `i` of a probe table whose rows start at `base` and number `n`;
 * the kind's own row if `i` is out of range. */
static __always_inline __u32 wt_row(__u32 kind, __u32 base, __u32 n, __u64 i)
{
	return i < n ? base + (__u32)i : kind;
}

#define WT_CGROUP_LEVELS_MAX 16

/* 1 when the current task is in a cgroup of CGROUPS or below one. */
static __always_inline int wt_in_cgroups(void)
{
	__u64 id = bpf_get_current_cgroup_id();
	int level;

	if (bpf_map_lookup_elem(&CGROUPS, &id))
		return 1;
	for (level = 1; level <= WT_CGROUP_LEVELS_MAX; level++) {
		if (level > cfg_cgroup_levels)
			break;
		id = bpf_get_current_ancestor_cgroup_id(level);
		if (id && bpf_map_lookup_elem(&CGROUPS, &id))
			return 1;
	}
	return 0;
}

/* Whether `tgid` is one of the run's own processes: the host, the overload guard's
 * measuring process, and a tenant's executor. */
static __always_inline int wt_is_ours(__u32 tgid)
{
	return tgid == cfg_self_tgid || (cfg_meter_tgid && tgid == cfg_meter_tgid) ||
	       (cfg_executor_tgid && tgid == cfg_executor_tgid);
}

/* A change to TARGETS, made after the map was changed: every CPU's cached answer is
 * stale from now on. */
static __always_inline void wt_targets_changed(void)
{
	__u32 kernel = 0;
	__u64 *gen = bpf_map_lookup_elem(&TARGETS_GEN, &kernel);

	if (gen)
		__sync_fetch_and_add(gen, 1);
}

/* Whether `tgid` is in TARGETS, from this CPU's cache when nothing has changed since.
 * The counts are read before the map, so a change that lands between the two leaves
 * an answer that is already stale when stored. */
static __always_inline int wt_is_target(__u32 tgid)
{
	__u32 k0 = 0, k1 = 1;
	__u64 *g0 = bpf_map_lookup_elem(&TARGETS_GEN, &k0);
	__u64 *g1 = bpf_map_lookup_elem(&TARGETS_GEN, &k1);
	struct wt_target_cache *c = bpf_map_lookup_elem(&TARGET_CACHE, &k0);
	__u64 gen0, gen1;
	int is;

	if (!g0 || !g1 || !c)
		return bpf_map_lookup_elem(&TARGETS, &tgid) != NULL;
	gen0 = *(volatile __u64 *)g0;
	gen1 = *(volatile __u64 *)g1;
	if (c->verdict && c->tgid == tgid && c->gen[0] == gen0 && c->gen[1] == gen1)
		return c->verdict == 2;
	is = bpf_map_lookup_elem(&TARGETS, &tgid) != NULL;
	c->tgid = tgid;
	c->verdict = is ? 2 : 1;
	c->gen[0] = gen0;
	c->gen[1] = gen1;
	return is;
}

#define WT_PF_EXITING 0x00000004

/* Whether the current task is the last thread of target `tgid` exiting, which
 * wt_untrack_exit has just removed from TARGETS on this CPU (the same task: its pid
 * cannot be reused while it runs). One load for any task that is not exiting. */
static __always_inline int wt_exiting_target(__u32 tgid)
{
	__u32 zero = 0, *exited;

	if (!(bpf_get_current_task_btf()->flags & WT_PF_EXITING))
		return 0;
	exited = bpf_map_lookup_elem(&EXITED, &zero);
	return exited && *exited == tgid;
}

/* Process-level filters: 1 when process `tgid`, running as the current task (its uid,
 * comm and cgroup), is in the run's scope. Our own processes never are: the host never
 * traces itself. */
static __always_inline int wt_in_scope(__u32 tgid)
{
	if (wt_is_ours(tgid))
		return 0;
	if (cfg_filter_targets && !wt_is_target(tgid) && !wt_exiting_target(tgid))
		return 0;
	if (cfg_filter_uids) {
		/* Read in place from the task's credentials (BTF loads, no helper call). */
		const struct cred *cred = bpf_get_current_task_btf()->cred;
		__u32 uid = cred->uid.val;

		if (cfg_filter_uids == 2 ? uid != cfg_uid : !bpf_map_lookup_elem(&UIDS, &uid))
			return 0;
		if (cfg_filter_euid) {
			__u32 euid = cred->euid.val;

			if (euid != uid && (cfg_filter_uids == 2 || !bpf_map_lookup_elem(&UIDS, &euid)))
				return 0;
		}
	}
	if (cfg_filter_comms) {
		struct wt_comm_key k = {};

		bpf_get_current_comm(&k.comm, sizeof(k.comm));
		if (!bpf_map_lookup_elem(&COMMS, &k))
			return 0;
	}
	if (cfg_filter_cgroups && !wt_in_cgroups())
		return 0;
	return 1;
}

/* 1 when task `t`'s cgroup (of cgroup v2, as bpf_get_current_cgroup_id reads the
 * current task's) is in CGROUPS or below one. */
static __always_inline int wt_task_in_cgroups(const struct task_struct *t)
{
	struct cgroup *cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	__u64 ancestors = bpf_core_field_offset(struct cgroup, ancestors);
	__u64 id;
	int level, deepest;

	if (!cg)
		return 0;
	id = BPF_CORE_READ(cg, kn, id);
	if (bpf_map_lookup_elem(&CGROUPS, &id))
		return 1;
	deepest = BPF_CORE_READ(cg, level);
	for (level = 1; level <= WT_CGROUP_LEVELS_MAX; level++) {
		struct cgroup *a = NULL;

		if (level > cfg_cgroup_levels || level > deepest)
			break;
		if (bpf_probe_read_kernel(&a, sizeof(a), (const void *)((__u64)cg + ancestors + level * 8)) || !a)
			break;
		id = BPF_CORE_READ(a, kn, id);
		if (id && bpf_map_lookup_elem(&CGROUPS, &id))
			return 1;
	}
	return 0;
}

/* wt_in_scope of task `t`, which need not be the current one: a task the scheduler's
 * tracepoints hand over (the one switched in, the one woken), judged by its own tgid,
 * uid, comm and cgroup as its own events are. */
static __always_inline int wt_task_in_scope(const struct task_struct *t)
{
	__u32 tgid = BPF_CORE_READ(t, tgid);

	if (wt_is_ours(tgid))
		return 0;
	if (cfg_filter_targets && !wt_is_target(tgid))
		return 0;
	if (cfg_filter_uids) {
		const struct cred *cred = BPF_CORE_READ(t, cred);
		__u32 uid = BPF_CORE_READ(cred, uid.val);

		if (cfg_filter_uids == 2 ? uid != cfg_uid : !bpf_map_lookup_elem(&UIDS, &uid))
			return 0;
		if (cfg_filter_euid) {
			__u32 euid = BPF_CORE_READ(cred, euid.val);

			if (euid != uid && (cfg_filter_uids == 2 || !bpf_map_lookup_elem(&UIDS, &euid)))
				return 0;
		}
	}
	if (cfg_filter_comms) {
		struct wt_comm_key k = {};

		bpf_probe_read_kernel_str(&k.comm, sizeof(k.comm), t->comm);
		if (!bpf_map_lookup_elem(&COMMS, &k))
			return 0;
	}
	if (cfg_filter_cgroups && !wt_task_in_cgroups(t))
		return 0;
	return 1;
}

/* wt_in_scope for the current task's events; a rejection is counted in `row`, except
 * of our own processes' events. */
static __always_inline int wt_pass_task(__u32 row, __u32 tgid)
{
	if (wt_in_scope(tgid))
		return 1;
	if (!wt_is_ours(tgid))
		wt_count(row, WT_SLOT_FILTERED);
	return 0;
}

/* Whether any scope filter is set. */
static __always_inline int wt_scoped(void)
{
	return cfg_filter_targets || cfg_filter_uids || cfg_filter_comms || cfg_filter_cgroups;
}

/* Whether a tracefs tracepoint fired in the current task's own context rather than in
 * an interrupt taken while it ran (a block completion, a packet, a timer): the kernel
 * runs interrupts on their own stacks, so the caller's stack pointer, which it passes in
 * the first word of the entry, lies within the task's stack only in the task's context.
 * Only for programs of tracefs tracepoints (their context is that entry). */
static __always_inline int wt_tp_in_task_context(void *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = NULL;
	__u64 sp = 0, stack;

	if (bpf_probe_read_kernel(&regs, sizeof(regs), ctx) || !regs)
		return 1;
	if (bpf_probe_read_kernel(&sp, sizeof(sp), &regs->sp))
		return 1;
	stack = (__u64)task->stack;
	/* THREAD_SIZE is 16 KiB on x86-64, 32 KiB with KASAN; interrupt stacks are elsewhere. */
	return sp - stack < (32 << 10);
}

/* wt_pass_task for a tracefs tracepoint's program. An event of an interrupt taken while
 * one of our own processes ran is not ours (the interrupted task only happened to be on
 * the CPU): it is judged as a system-wide event, not dropped. */
static __always_inline int wt_pass_task_tp(__u32 row, __u32 tgid, void *ctx)
{
	if (wt_in_scope(tgid))
		return 1;
	if (!wt_is_ours(tgid)) {
		wt_count(row, WT_SLOT_FILTERED);
		return 0;
	}
	if (wt_tp_in_task_context(ctx))
		return 0;
	if (wt_scoped()) {
		wt_count(row, WT_SLOT_FILTERED);
		return 0;
	}
	return 1;
}

/* One comparison: the value at base + p->off, of p->size bytes, against p->value. */
static __always_inline int wt_pred_holds(const struct wt_pred *p, const void *base)
{
	__u32 size = p->size;
	__u64 v = 0;

	if (size != 1 && size != 2 && size != 4 && size != 8)
		return 0;
	if (bpf_probe_read_kernel(&v, size & 15, (const char *)base + p->off))
		return 0;
	if (p->flags & WT_PRED_SIGNED) {
		int shift = 64 - size * 8;
		__s64 sv = ((__s64)(v << shift)) >> shift;
		__s64 want = (__s64)p->value;

		switch (p->op) {
		case WT_OP_EQ: return sv == want;
		case WT_OP_NE: return sv != want;
		case WT_OP_LT: return sv < want;
		case WT_OP_LE: return sv <= want;
		case WT_OP_GT: return sv > want;
		case WT_OP_GE: return sv >= want;
		}
	} else {
		switch (p->op) {
		case WT_OP_EQ: return v == p->value;
		case WT_OP_NE: return v != p->value;
		case WT_OP_LT: return v < p->value;
		case WT_OP_LE: return v <= p->value;
		case WT_OP_GT: return v > p->value;
		case WT_OP_GE: return v >= p->value;
		}
	}
	switch (p->op) {
	case WT_OP_MASK_ANY: return (v & p->value) != 0;
	case WT_OP_MASK_NONE: return (v & p->value) == 0;
	}
	return 0;
}

/* All comparisons of a list hold (an empty list passes); counts a rejection. */
static __always_inline int wt_preds_pass(__u32 row, const struct wt_preds *preds, const void *base)
{
	int i;

	for (i = 0; i < WT_PREDS_MAX; i++) {
		const struct wt_pred *p = &preds->p[i];

		if (!p->op)
			break;
		if (!wt_pred_holds(p, base)) {
			wt_count(row, WT_SLOT_FILTERED);
			return 0;
		}
	}
	return 1;
}

static __always_inline void wt_fill_header(struct wt_header *h, __u32 kind, __u32 size)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 ug = bpf_get_current_uid_gid();

	h->kind = kind;
	h->size = size;
	h->sub = 0;
	h->flags = 0;
	h->ts_ns = bpf_ktime_get_ns();
	h->pid = id >> 32;
	h->tid = (__u32)id;
	h->uid = (__u32)ug;
	h->gid = ug >> 32;
	h->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(&h->comm, sizeof(h->comm));
}

/* The syscall arguments and number from the registers saved at entry (x86-64), read
 * at once: raw tracepoints (no kernel BTF needed to attach them) cannot dereference
 * their pointer arguments. */
struct wt_sys_regs {
	__u64 r10, r9, r8, ax, cx, dx, si, di, orig_ax;
};

/* The six syscall arguments, in order, into args (zeros if unreadable). */
static __always_inline void wt_read_sys_args(__u64 *args, const struct pt_regs *regs)
{
	struct wt_sys_regs r = {};

	/* r10 .. orig_ax are contiguous in struct pt_regs. */
	bpf_probe_read_kernel(&r, sizeof(r), &regs->r10);
	args[0] = r.di;
	args[1] = r.si;
	args[2] = r.dx;
	args[3] = r.r10;
	args[4] = r.r8;
	args[5] = r.r9;
}

/* Layout of the syscalls:sys_{enter,exit}_* tracepoints, fixed by their tracefs format
 * files (not CO-RE: aya 0.14 rejects relocations into the flexible args[]). */
struct wt_syscall_enter_ctx {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

struct wt_syscall_exit_ctx {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

/* Keep the target set closed under fork: a child process of a target is a target. */
static __always_inline void wt_track_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid, ctgid;
	__u8 one = 1;

	if (!cfg_follow_children)
		return;
	ptgid = BPF_CORE_READ(parent, tgid);
	ctgid = BPF_CORE_READ(child, tgid);
	if (ptgid == ctgid || !bpf_map_lookup_elem(&TARGETS, &ptgid))
		return;
	/* A full set would leave the child out of the trace: its events then count as
	 * filtered. Counted here, once per child, so that the report says so. */
	if (bpf_map_update_elem(&TARGETS, &ctgid, &one, BPF_ANY))
		wt_lose(WT_LOSS_TARGETS_FULL);
	else
		wt_targets_changed();
}

/* A target process that is gone leaves the set, so the set stays small and a reused
 * pid is not traced by mistake. */
static __always_inline void wt_untrack_exit(struct task_struct *task)
{
	__u32 tgid;

	if (!cfg_filter_targets || BPF_CORE_READ(task, signal, live.counter) != 0)
		return;
	tgid = BPF_CORE_READ(task, tgid);
	if (!bpf_map_delete_elem(&TARGETS, &tgid)) {
		__u32 zero = 0, *exited = bpf_map_lookup_elem(&EXITED, &zero);

		if (exited)
			*exited = tgid;
		wt_targets_changed();
	}
}

/* The programs that keep the target set, for a collector named `prefix`. */
#define WT_TRACKING_PROGRAMS(prefix)                                                              \
	SEC("raw_tp/sched_process_fork")                                                          \
	int BPF_PROG(prefix##_track_fork, struct task_struct *parent, struct task_struct *child) \
	{                                                                                         \
		wt_track_fork(parent, child);                                                     \
		return 0;                                                                         \
	}                                                                                         \
	SEC("raw_tp/sched_process_exit")                                                          \
	int BPF_PROG(prefix##_untrack_exit, struct task_struct *task)                            \
	{                                                                                         \
		wt_untrack_exit(task);                                                            \
		return 0;                                                                         \
	}

#endif /* WASMTAP_FILTER_BPF_H */

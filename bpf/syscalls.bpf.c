// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * syscalls: every syscall's entry (number and six arguments) and exit (return value),
 * via the raw tracepoints sys_enter/sys_exit, the cheapest hook on this kernel.
 * Filters: those of filter.bpf.h, a syscall-number set, and per syscall comparisons on
 * its arguments (entry) or return value (exit). Every event is counted in the row of
 * its syscall id (WT_ROW_SYS_ENTER/EXIT + id), ids out of range in the kind's row.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "filter.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 cfg_filter_syscalls = 0;
const volatile __u32 cfg_filter_args = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WT_NR_SYSCALLS);
	__type(key, __u32);
	__type(value, __u8);
} SYSCALLS SEC(".maps");

/* ARG_PREDS[nr]: comparisons on the entry's args[6] (offset 8 * i);
 * ARG_PREDS[WT_NR_SYSCALLS + nr]: on the exit's return value (offset 0). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * WT_NR_SYSCALLS);
	__type(key, __u32);
	__type(value, struct wt_preds);
} ARG_PREDS SEC(".maps");

static __always_inline int wt_pass_args(__u32 row, __u32 key, const void *values)
{
	struct wt_preds *preds = bpf_map_lookup_elem(&ARG_PREDS, &key);

	return !preds || wt_preds_pass(row, preds, values);
}

static __always_inline int wt_pass_syscall(__u32 row, long id)
{
	__u32 key = (__u32)id;
	__u8 *on;

	if (!cfg_filter_syscalls)
		return 1;
	on = bpf_map_lookup_elem(&SYSCALLS, &key);
	if (on && *on)
		return 1;
	wt_count(row, WT_SLOT_FILTERED);
	return 0;
}

SEC("raw_tp/sys_enter")
int BPF_PROG(wt_sys_enter, struct pt_regs *regs, long id)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 row = wt_row(WT_SYS_ENTER, WT_ROW_SYS_ENTER, WT_NR_SYSCALLS, id);
	struct wt_sys_enter *e;
	__u64 args[6];

	if (!wt_pass_task(row, tgid) || !wt_pass_syscall(row, id))
		return 0;
	wt_read_sys_args(args, regs);
	if (cfg_filter_args && !wt_pass_args(row, (__u32)id, args))
		return 0;
	if (!wt_quota_pass(row))
		return 0;
	e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		wt_count(row, WT_SLOT_DROPPED);
		return 0;
	}
	wt_fill_header(&e->h, WT_SYS_ENTER, sizeof(*e));
	e->id = id;
	__builtin_memcpy(e->args, args, sizeof(args));
	bpf_ringbuf_submit(e, cfg_submit_flags);
	wt_count(row, WT_SLOT_EMITTED);
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(wt_sys_exit, struct pt_regs *regs, long ret)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	long id = BPF_CORE_READ(regs, orig_ax);
	__u32 row = wt_row(WT_SYS_EXIT, WT_ROW_SYS_EXIT, WT_NR_SYSCALLS, id);
	struct wt_sys_exit *e;

	if (!wt_pass_task(row, tgid) || !wt_pass_syscall(row, id))
		return 0;
	if (cfg_filter_args && !wt_pass_args(row, WT_NR_SYSCALLS + (__u32)id, &ret))
		return 0;
	if (!wt_quota_pass(row))
		return 0;
	e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		wt_count(row, WT_SLOT_DROPPED);
		return 0;
	}
	wt_fill_header(&e->h, WT_SYS_EXIT, sizeof(*e));
	e->id = id;
	e->ret = ret;
	bpf_ringbuf_submit(e, cfg_submit_flags);
	wt_count(row, WT_SLOT_EMITTED);
	return 0;
}

WT_TRACKING_PROGRAMS(wt_syscalls)

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * tracepoint: any tracepoint, one program attached to each. The program tells them
 * apart by the attach cookie, which the host sets to the event id (the tracefs `id`
 * file; the entry's own `common_type` is not filled in yet when BPF runs), and looks
 * up what the host configured for it: how many bytes to keep, where its dynamic fields'
 * locators sit, comparisons on its fields, and stacks. The record carries the raw
 * entry; the host gives plugins the field layout from the tracefs format file.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define WT_TP_DYN_MAX 4
#define WT_TP_DYN_RELATIVE 0x8000 /* a __rel_loc field: offset counts from the field's end */

struct wt_tp_config {
	__u16 fixed_len;              /* bytes of the entry's fixed part */
	__u8 n_dyn;                   /* dynamic fields */
	__u8 stacks;                  /* WT_STACK_KERNEL | WT_STACK_USER */
	__u16 dyn_off[WT_TP_DYN_MAX]; /* offsets of their u32 locators */
	__u32 pad;
	struct wt_preds preds;        /* offsets into the entry */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct wt_tp_config);
} TP_CONFIG SEC(".maps");

/* The entry's length: the fixed part, or the end of its farthest dynamic field. */
static __always_inline __u32 wt_entry_len(void *ctx, const struct wt_tp_config *cfg)
{
	__u32 len = cfg->fixed_len;
	int i;

	for (i = 0; i < WT_TP_DYN_MAX; i++) {
		__u32 loc = 0, off, end;

		if (i >= cfg->n_dyn)
			break;
		off = cfg->dyn_off[i] & 0x7fff;
		if (bpf_probe_read_kernel(&loc, sizeof(loc), (char *)ctx + off))
			continue;
		end = (loc & 0xffff) + (loc >> 16);
		if (cfg->dyn_off[i] & WT_TP_DYN_RELATIVE)
			end += off + 4;
		if (end > len)
			len = end;
	}
	return len;
}

SEC("tracepoint")
int wt_tracepoint(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 id = (__u32)bpf_get_attach_cookie(ctx), tgid = pid_tgid >> 32, len, size;
	struct trace_entry *common;
	struct wt_tp_config *cfg;
	struct wt_tracepoint *e;
	__u8 *buf;

	cfg = bpf_map_lookup_elem(&TP_CONFIG, &id);
	if (!cfg || !wt_pass_task(WT_TRACEPOINT, tgid) || !wt_preds_pass(WT_TRACEPOINT, &cfg->preds, ctx))
		return 0;
	buf = wt_scratch();
	if (!buf)
		return 0;
	e = (struct wt_tracepoint *)buf;
	wt_fill_header(&e->h, WT_TRACEPOINT, 0);
	len = wt_entry_len(ctx, cfg);
	if (len > WT_TP_DATA_MAX) {
		len = WT_TP_DATA_MAX;
		e->h.flags |= WT_TP_TRUNCATED;
	}
	/* keep the verifier's bound on len: the compiler would drop a plain mask */
	asm volatile("%0 &= 0xfff" : "+r"(len));
	e->event_id = id;
	e->data_len = len;
	if (bpf_probe_read_kernel(buf + sizeof(*e), len, ctx))
		return 0;
	/* The kernel keeps a pointer in the common fields while BPF runs: write them
	 * as the format file describes them instead. */
	common = (struct trace_entry *)(buf + sizeof(*e));
	common->type = id;
	common->flags = 0;
	common->preempt_count = 0;
	common->pid = (__u32)pid_tgid;
	size = (sizeof(*e) + len + 7) & ~7U;
	if (cfg->stacks)
		size = wt_add_stacks(ctx, buf, size, cfg->stacks);
	wt_output(WT_TRACEPOINT, buf, size);
	return 0;
}

WT_TRACKING_PROGRAMS(wt_tracepoint)

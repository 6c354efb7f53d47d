// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * perf: software perf events on every CPU: cpu-clock sampling (`profile:hz:N`) and
 * the counted software events (page faults, context switches, migrations...). One
 * program per event type, so each knows what it counts; PERF_CONFIG holds, per type,
 * the stacks to take and comparisons on the record (e.g. the fault address).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct wt_perf_config {
	__u8 stacks;
	__u8 pad[3];
	__u32 slot;            /* the host's index of the entry: its counter row */
	struct wt_preds preds; /* offsets into the record */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WT_PERF_EVENTS);
	__type(key, __u32);
	__type(value, struct wt_perf_config);
} PERF_CONFIG SEC(".maps");

static __always_inline int wt_perf(struct bpf_perf_event_data *ctx, __u32 event)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct wt_perf_config *cfg = bpf_map_lookup_elem(&PERF_CONFIG, &event);
	struct wt_sample *e;
	__u32 row;
	__u8 *buf;

	if (!cfg)
		return 0;
	row = wt_row(WT_SAMPLE, WT_ROW_PERF, WT_PERF_EVENTS, cfg->slot);
	if (!wt_pass_task(row, tgid))
		return 0;
	buf = wt_scratch();
	if (!buf)
		return 0;
	e = (struct wt_sample *)buf;
	wt_fill_header(&e->h, WT_SAMPLE, 0);
	e->event = event;
	e->cpu = bpf_get_smp_processor_id();
	e->addr = ctx->addr;
	e->ip = PT_REGS_IP(&ctx->regs);
	if (!wt_preds_pass(row, &cfg->preds, buf))
		return 0;
	wt_finish(ctx, row, buf, sizeof(*e), cfg->stacks);
	return 0;
}

#define WT_PERF_PROGRAM(n)                                     \
	SEC("perf_event")                                      \
	int wt_perf_##n(struct bpf_perf_event_data *ctx)       \
	{                                                      \
		return wt_perf(ctx, n);                        \
	}

WT_PERF_PROGRAM(0)  /* cpu-clock */
WT_PERF_PROGRAM(1)  /* task-clock */
WT_PERF_PROGRAM(2)  /* page-faults */
WT_PERF_PROGRAM(3)  /* context-switches */
WT_PERF_PROGRAM(4)  /* cpu-migrations */
WT_PERF_PROGRAM(5)  /* minor-faults */
WT_PERF_PROGRAM(6)  /* major-faults */
WT_PERF_PROGRAM(7)  /* alignment-faults */
WT_PERF_PROGRAM(8)  /* emulation-faults */
WT_PERF_PROGRAM(9)  /* dummy */
WT_PERF_PROGRAM(11) /* cgroup-switches */

WT_TRACKING_PROGRAMS(wt_perf)

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * tracepoint: any tracepoint, one program attached to each. The program tells them
 * apart by the attach cookie, which the host sets to the event id (the tracefs `id`
 * file; the entry's own `common_type` is not filled in yet when BPF runs), and looks
 * up what the host configured for it: how many bytes to keep, where its dynamic fields'
 * locators sit, comparisons on its fields, stacks, and its slot (its counter row). The
 * record carries the raw entry; the host gives plugins the field layout from the
 * tracefs format file.
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
	__u32 slot;                   /* the host's index of the tracepoint: its counter row */
	struct wt_preds preds;        /* offsets into the entry */
	__u8 n_str;                   /* pointer fields whose strings the record carries */
	__u8 pad;
	__u16 str_off[WT_STR_MAX];    /* their offsets in the entry */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WT_TP_SLOTS);
	__type(key, __u32);
	__type(value, struct wt_tp_config);
} TP_CONFIG SEC(".maps");

static __always_inline __u32 wt_tp_row(const struct wt_tp_config *cfg)
{
	return wt_row(WT_TRACEPOINT, WT_ROW_TRACEPOINT, WT_TP_SLOTS, cfg->slot);
}

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

/* The strings the entry's pointer fields point to, after the entry (which ends at `off`). */
static __always_inline __u32 wt_tp_strings(__u8 *buf, __u32 off, const struct wt_tp_config *cfg, __u32 len)
{
	__u64 ptrs[WT_STR_MAX] = {};
	__u16 srcs[WT_STR_MAX] = {};
	__u32 n = cfg->n_str > WT_STR_MAX ? WT_STR_MAX : cfg->n_str;
	int i;

	for (i = 0; i < WT_STR_MAX; i++) {
		__u32 at;

		if (i >= n)
			break;
		at = cfg->str_off[i];
		srcs[i] = at;
		/* A field past what the entry kept reads as no pointer: unreadable. */
		if (at + 8 <= len)
			bpf_probe_read_kernel(&ptrs[i], 8, buf + sizeof(struct wt_tracepoint) + (at & 0xfff));
	}
	return wt_add_strings(buf, off, ptrs, srcs, n);
}

/* Finish a tracepoint record of `len` data bytes in the scratch buffer: strings,
 * stacks, then out. */
static __always_inline void wt_tp_emit(void *ctx, __u8 *buf, const struct wt_tp_config *cfg, __u32 len)
{
	__u32 size;

	((struct wt_tracepoint *)buf)->data_len = len;
	size = (sizeof(struct wt_tracepoint) + len + 7) & ~7U;
	if (cfg->n_str)
		size = wt_tp_strings(buf, size, cfg, len);
	wt_finish(ctx, wt_tp_row(cfg), buf, size, cfg->stacks);
}

SEC("tracepoint")
int wt_tracepoint(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 id = (__u32)bpf_get_attach_cookie(ctx), tgid = pid_tgid >> 32, len, row;
	struct trace_entry *common;
	struct wt_tp_config *cfg;
	struct wt_tracepoint *e;
	__u8 *buf;

	cfg = bpf_map_lookup_elem(&TP_CONFIG, &id);
	if (!cfg)
		return 0;
	row = wt_tp_row(cfg);
	if (!wt_pass_task_tp(row, tgid, ctx) || !wt_preds_pass(row, &cfg->preds, ctx))
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
	wt_tp_emit(ctx, buf, cfg, len);
	return 0;
}

WT_TRACKING_PROGRAMS(wt_tracepoint)

/*
 * BTF-typed events (`btf:NAME`): the arguments of a few raw tracepoints, read with
 * CO-RE (the kernel's BTF, at load), where the tracefs records lack what analyses need (the tgid of both tasks of a context switch, the
 * request pointer that identifies a block I/O from issue to completion, the name of a
 * slab cache). Each writes a tracepoint record with a fixed layout and an event id of
 * its own (WT_BTF_*), which the host describes like a tracefs format.
 */
#define WT_BTF_SCHED_SWITCH 0x10001
#define WT_BTF_SCHED_WAKEUP 0x10002
#define WT_BTF_BLOCK_RQ_ISSUE 0x10003
#define WT_BTF_BLOCK_RQ_COMPLETE 0x10004
#define WT_BTF_KMEM_CACHE_ALLOC 0x10005

struct wt_btf_switch {
	__u64 common;
	char prev_comm[16];
	__s32 prev_pid;
	__s32 prev_tgid;
	__s32 prev_prio;
	__u32 preempt;
	__s64 prev_state;
	char next_comm[16];
	__s32 next_pid;
	__s32 next_tgid;
	__s32 next_prio;
	__u32 pad;
};

struct wt_btf_wakeup {
	__u64 common;
	char comm[16];
	__s32 pid;
	__s32 tgid;
	__s32 prio;
	__s32 target_cpu;
};

struct wt_btf_rq {
	__u64 common;
	__u64 rq;
	__u32 dev;
	__u32 nr_sector;
	__u64 sector;
	__u32 cmd_flags;
	__s32 error;
	__u32 bytes;
	__u32 pad;
};

struct wt_btf_kmem {
	__u64 common;
	__u64 call_site;
	__u64 ptr;
	char name[32];
	__u32 object_size;
	__u32 size;
	__u32 gfp_flags;
	__s32 node;
};

/* Start a BTF record: config, filters, header; NULL if it is not to be emitted. */
static __always_inline __u8 *wt_btf_begin(__u32 id, struct wt_tp_config **cfgp)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct wt_tp_config *cfg = bpf_map_lookup_elem(&TP_CONFIG, &id);
	struct wt_tracepoint *e;
	struct trace_entry *common;
	__u8 *buf;

	if (!cfg || !wt_pass_task(wt_tp_row(cfg), pid_tgid >> 32))
		return NULL;
	buf = wt_scratch();
	if (!buf)
		return NULL;
	__builtin_memset(buf + sizeof(*e), 0, 128);
	e = (struct wt_tracepoint *)buf;
	wt_fill_header(&e->h, WT_TRACEPOINT, 0);
	e->event_id = id;
	common = (struct trace_entry *)(buf + sizeof(*e));
	common->type = id;
	common->pid = (__u32)pid_tgid;
	*cfgp = cfg;
	return buf;
}

/* Finish a BTF record: its comparisons run on the data built, not on the context. */
static __always_inline void wt_btf_end(void *ctx, __u8 *buf, struct wt_tp_config *cfg, __u32 len)
{
	if (wt_preds_pass(wt_tp_row(cfg), &cfg->preds, buf + sizeof(struct wt_tracepoint)))
		wt_tp_emit(ctx, buf, cfg, len);
}

static __always_inline void wt_task_ids(struct task_struct *t, char *comm, __s32 *pid, __s32 *tgid, __s32 *prio)
{
	bpf_probe_read_kernel_str(comm, WT_COMM_LEN, t->comm);
	*pid = BPF_CORE_READ(t, pid);
	*tgid = BPF_CORE_READ(t, tgid);
	*prio = BPF_CORE_READ(t, prio);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(wt_btf_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct wt_tp_config *cfg;
	__u8 *buf = wt_btf_begin(WT_BTF_SCHED_SWITCH, &cfg);
	struct wt_btf_switch *d;

	if (!buf)
		return 0;
	d = (struct wt_btf_switch *)(buf + sizeof(struct wt_tracepoint));
	wt_task_ids(prev, d->prev_comm, &d->prev_pid, &d->prev_tgid, &d->prev_prio);
	wt_task_ids(next, d->next_comm, &d->next_pid, &d->next_tgid, &d->next_prio);
	d->prev_state = BPF_CORE_READ(prev, __state);
	d->preempt = preempt;
	wt_btf_end(ctx, buf, cfg, sizeof(*d));
	return 0;
}

static __always_inline int wt_btf_wakeup(void *ctx, struct task_struct *p)
{
	struct wt_tp_config *cfg;
	__u8 *buf = wt_btf_begin(WT_BTF_SCHED_WAKEUP, &cfg);
	struct wt_btf_wakeup *d;

	if (!buf)
		return 0;
	d = (struct wt_btf_wakeup *)(buf + sizeof(struct wt_tracepoint));
	wt_task_ids(p, d->comm, &d->pid, &d->tgid, &d->prio);
	d->target_cpu = BPF_CORE_READ(p, wake_cpu);
	wt_btf_end(ctx, buf, cfg, sizeof(*d));
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(wt_btf_sched_wakeup, struct task_struct *p)
{
	return wt_btf_wakeup(ctx, p);
}

static __always_inline int wt_btf_rq(void *ctx, __u32 id, struct request *rq, int error, __u32 bytes)
{
	struct wt_tp_config *cfg;
	__u8 *buf = wt_btf_begin(id, &cfg);
	struct gendisk *disk;
	struct wt_btf_rq *d;

	if (!buf)
		return 0;
	d = (struct wt_btf_rq *)(buf + sizeof(struct wt_tracepoint));
	d->rq = (__u64)rq;
	disk = BPF_CORE_READ(rq, q, disk);
	if (disk)
		d->dev = (BPF_CORE_READ(disk, major) << 20) | BPF_CORE_READ(disk, first_minor);
	d->sector = BPF_CORE_READ(rq, __sector);
	d->nr_sector = BPF_CORE_READ(rq, __data_len) >> 9;
	d->cmd_flags = BPF_CORE_READ(rq, cmd_flags);
	d->error = error;
	d->bytes = bytes ? bytes : BPF_CORE_READ(rq, __data_len);
	wt_btf_end(ctx, buf, cfg, sizeof(*d));
	return 0;
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(wt_btf_block_rq_issue, struct request *rq)
{
	return wt_btf_rq(ctx, WT_BTF_BLOCK_RQ_ISSUE, rq, 0, 0);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(wt_btf_block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	return wt_btf_rq(ctx, WT_BTF_BLOCK_RQ_COMPLETE, rq, error, nr_bytes);
}

SEC("raw_tp/kmem_cache_alloc")
int BPF_PROG(wt_btf_kmem_cache_alloc, unsigned long call_site, const void *ptr, struct kmem_cache *s, gfp_t gfp_flags,
	     int node)
{
	struct wt_tp_config *cfg;
	__u8 *buf = wt_btf_begin(WT_BTF_KMEM_CACHE_ALLOC, &cfg);
	struct wt_btf_kmem *d;
	const char *name;

	if (!buf)
		return 0;
	d = (struct wt_btf_kmem *)(buf + sizeof(struct wt_tracepoint));
	d->call_site = call_site;
	d->ptr = (__u64)ptr;
	name = BPF_CORE_READ(s, name);
	bpf_probe_read_kernel_str(d->name, sizeof(d->name), name);
	d->object_size = BPF_CORE_READ(s, object_size);
	d->size = BPF_CORE_READ(s, size);
	d->gfp_flags = gfp_flags;
	d->node = node;
	wt_btf_end(ctx, buf, cfg, sizeof(*d));
	return 0;
}

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * user: uprobes, uretprobes and USDT probes. Every attachment carries a cookie, the
 * index of its configuration in USER_CONFIG: what to read (the argument registers, the
 * return value, or the USDT argument specs parsed by the host from the ELF notes),
 * comparisons on those values, and stacks.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

enum wt_user_mode {
	WT_MODE_UPROBE = 1,
	WT_MODE_URETPROBE = 2,
	WT_MODE_USDT = 3,
};

enum wt_usdt_loc {
	WT_LOC_CONST = 1, /* value */
	WT_LOC_REG = 2,   /* the register at reg_off in pt_regs */
	WT_LOC_MEM = 3,   /* memory at register + value */
};

struct wt_usdt_arg {
	__u8 loc;
	__u8 size; /* 1, 2, 4, 8 */
	__u8 is_signed;
	__u8 pad;
	__u16 reg_off;
	__u16 pad2;
	__s64 value; /* constant or displacement */
};

struct wt_user_config {
	__u8 mode;
	__u8 nargs;
	__u8 stacks;
	__u8 n_str;                /* arguments whose strings the record carries */
	__u8 str_arg[WT_STR_MAX];  /* their indices in args */
	struct wt_usdt_arg args[WT_USER_ARGS];
	struct wt_preds preds; /* offsets into the record */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WT_USER_SLOTS);
	__type(key, __u32);
	__type(value, struct wt_user_config);
} USER_CONFIG SEC(".maps");

static __always_inline __u64 wt_extend(__u64 v, __u32 size, __u32 is_signed)
{
	int shift;

	if (size >= 8)
		return v;
	shift = 64 - size * 8;
	return is_signed ? (__u64)(((__s64)(v << shift)) >> shift) : (v << shift) >> shift;
}

static __always_inline __u64 wt_usdt_arg(struct pt_regs *ctx, const struct wt_usdt_arg *a)
{
	__u64 v = 0, mem = 0;
	__u32 size = a->size;

	if (size != 1 && size != 2 && size != 4 && size != 8)
		return 0;
	switch (a->loc) {
	case WT_LOC_CONST:
		return (__u64)a->value;
	case WT_LOC_REG:
		if (bpf_probe_read_kernel(&v, sizeof(v), (char *)ctx + (a->reg_off & 0xff)))
			return 0;
		return wt_extend(v, size, a->is_signed);
	case WT_LOC_MEM:
		if (bpf_probe_read_kernel(&v, sizeof(v), (char *)ctx + (a->reg_off & 0xff)))
			return 0;
		if (bpf_probe_read_user(&mem, size & 15, (void *)(v + a->value)))
			return 0;
		return wt_extend(mem, size, a->is_signed);
	}
	return 0;
}

static __always_inline int wt_user(struct pt_regs *ctx)
{
	__u32 slot = (__u32)bpf_get_attach_cookie(ctx), tgid = bpf_get_current_pid_tgid() >> 32, i;
	struct wt_user_config *cfg = bpf_map_lookup_elem(&USER_CONFIG, &slot);
	__u32 row = wt_row(WT_USER, WT_ROW_USER, WT_USER_SLOTS, slot);
	struct wt_user *e;
	__u32 size;
	__u8 *buf;

	if (!cfg || !wt_pass_task(row, tgid))
		return 0;
	buf = wt_scratch();
	if (!buf)
		return 0;
	e = (struct wt_user *)buf;
	wt_fill_header(&e->h, WT_USER, 0);
	e->probe = slot;
	e->ip = PT_REGS_IP(ctx);
	__builtin_memset(e->args, 0, sizeof(e->args));
	switch (cfg->mode) {
	case WT_MODE_UPROBE:
		e->nargs = 6;
		e->args[0] = ctx->di;
		e->args[1] = ctx->si;
		e->args[2] = ctx->dx;
		e->args[3] = ctx->cx;
		e->args[4] = ctx->r8;
		e->args[5] = ctx->r9;
		break;
	case WT_MODE_URETPROBE:
		e->h.flags |= WT_USER_RETURN;
		e->nargs = 1;
		e->args[0] = ctx->ax;
		break;
	case WT_MODE_USDT:
		e->nargs = cfg->nargs > WT_USER_ARGS ? WT_USER_ARGS : cfg->nargs;
		for (i = 0; i < WT_USER_ARGS; i++) {
			if (i >= e->nargs)
				break;
			e->args[i] = wt_usdt_arg(ctx, &cfg->args[i]);
		}
		break;
	default:
		return 0;
	}
	if (!wt_preds_pass(row, &cfg->preds, buf))
		return 0;
	size = sizeof(*e);
	if (cfg->n_str) {
		__u64 ptrs[WT_STR_MAX] = {};
		__u16 srcs[WT_STR_MAX] = {};
		__u32 n = cfg->n_str > WT_STR_MAX ? WT_STR_MAX : cfg->n_str;

		for (i = 0; i < WT_STR_MAX; i++) {
			__u32 a;

			if (i >= n)
				break;
			a = cfg->str_arg[i];
			srcs[i] = a;
			if (a < WT_USER_ARGS)
				ptrs[i] = e->args[a];
		}
		size = wt_add_strings(buf, size, ptrs, srcs, n);
	}
	wt_finish(ctx, row, buf, size, cfg->stacks);
	return 0;
}

SEC("uprobe")
int wt_uprobe(struct pt_regs *ctx)
{
	return wt_user(ctx);
}

SEC("uretprobe")
int wt_uretprobe(struct pt_regs *ctx)
{
	return wt_user(ctx);
}

WT_TRACKING_PROGRAMS(wt_user)

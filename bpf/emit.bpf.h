/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Variable-size records: built in a per-CPU scratch buffer (the ring buffer's reserve
 * needs a size known to the verifier), optionally followed by the stack trailer of
 * wasmtap.h, then copied into the ring buffer with one bpf_ringbuf_output.
 */
#ifndef WASMTAP_EMIT_BPF_H
#define WASMTAP_EMIT_BPF_H

#include "filter.bpf.h"

#define WT_SCRATCH_BYTES 8192
#define WT_STACK_BYTES (WT_STACK_MAX * 8)
#define WT_STACK_KERNEL 1
#define WT_STACK_USER 2

struct wt_scratch {
	__u8 buf[WT_SCRATCH_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_scratch);
} SCRATCH SEC(".maps");

static __always_inline __u8 *wt_scratch(void)
{
	__u32 zero = 0;
	struct wt_scratch *s = bpf_map_lookup_elem(&SCRATCH, &zero);

	return s ? s->buf : NULL;
}

/* Where a record's own bytes and strings may end at the most: a tracepoint's entry
 * (64 + 4032 bytes), its strings block and WT_STR_MAX strings. */
#define WT_BODY_MAX (4096 + 24 + WT_STR_MAX * WT_STR_BYTES)

_Static_assert(WT_BODY_MAX + 2 * WT_STACK_BYTES + 8 <= WT_SCRATCH_BYTES, "scratch: body, strings, stacks");

/* Append the strings block at `off` (a multiple of 8, at most 4096): the `n` strings
 * that user pointers `ptrs` point to, `srcs` naming their sources (struct
 * wt_strings). Returns the new size. */
static __always_inline __u32 wt_add_strings(__u8 *buf, __u32 off, const __u64 *ptrs, const __u16 *srcs, __u32 n)
{
	struct wt_strings *s;
	int i;

	off &= 0x1ff8;
	if (off > 4096)
		return off;
	s = (struct wt_strings *)(buf + off);
	__builtin_memset(s, 0, sizeof(*s));
	off += sizeof(*s);
	for (i = 0; i < WT_STR_MAX; i++) {
		long r;

		if (i >= n)
			break;
		/* keep the verifier's bound on off: the compiler would drop a plain check */
		asm volatile("%0 &= 0x1fff" : "+r"(off));
		if (off > WT_BODY_MAX - WT_STR_BYTES)
			break;
		s->src[i] = srcs[i];
		r = bpf_probe_read_user_str(buf + off, WT_STR_BYTES, (const void *)ptrs[i]);
		if (r > 0 && r <= WT_STR_BYTES) {
			s->len[i] = r - 1;
			off += (r + 7) & ~7;
		} else {
			s->len[i] = WT_STR_UNREADABLE;
		}
		s->n = i + 1;
	}
	((struct wt_header *)buf)->flags |= WT_HAS_STRINGS;
	/* the verifier's bound on the size, for the copy into the ring */
	asm volatile("%0 &= 0x1ff8" : "+r"(off));
	return off;
}

/* Append the stack trailer at `off` (a multiple of 8, at most WT_BODY_MAX); returns
 * the new size. */
static __always_inline __u32 wt_add_stacks(void *ctx, __u8 *buf, __u32 off, __u32 mode)
{
	struct wt_stack_counts counts = {};
	long n;

	off &= 0x1ff8;
	if (off > WT_BODY_MAX)
		return off;
	if (mode & WT_STACK_KERNEL) {
		n = bpf_get_stack(ctx, buf + off, WT_STACK_BYTES, 0);
		if (n > 0 && n <= WT_STACK_BYTES) {
			counts.kernel = n / 8;
			off += counts.kernel * 8;
		}
	}
	if (off > WT_BODY_MAX + WT_STACK_BYTES)
		return off;
	if (mode & WT_STACK_USER) {
		n = bpf_get_stack(ctx, buf + off, WT_STACK_BYTES, BPF_F_USER_STACK);
		if (n > 0 && n <= WT_STACK_BYTES) {
			counts.user = n / 8;
			off += counts.user * 8;
		}
	}
	if (off > WT_BODY_MAX + 2 * WT_STACK_BYTES)
		return off;
	__builtin_memcpy(buf + off, &counts, sizeof(counts));
	((struct wt_header *)buf)->flags |= WT_HAS_STACK;
	return off + sizeof(counts);
}

/* Copy a finished record of `size` bytes from the scratch buffer into the ring,
 * counting it in `row`. */
static __always_inline void wt_output(__u32 row, __u8 *buf, __u32 size)
{
	if (size < sizeof(struct wt_header) || size > WT_SCRATCH_BYTES) {
		wt_count_lost(row, WT_LOSS_TOO_BIG);
		return;
	}
	((struct wt_header *)buf)->size = size;
	if (bpf_ringbuf_output(&EVENTS, buf, size, cfg_submit_flags))
		wt_count(row, WT_SLOT_DROPPED);
	else
		wt_count(row, WT_SLOT_EMITTED);
}

/* Finish a record of `size` bytes that passed its filters: within the run's quota, add
 * the stacks `stacks` asks for (WT_STACK_*), then out into the ring. */
static __always_inline void wt_finish(void *ctx, __u32 row, __u8 *buf, __u32 size, __u32 stacks)
{
	if (!wt_quota_pass(row))
		return;
	if (stacks)
		size = wt_add_stacks(ctx, buf, size, stacks);
	wt_output(row, buf, size);
}

#endif /* WASMTAP_EMIT_BPF_H */

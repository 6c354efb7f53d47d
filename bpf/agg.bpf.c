// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * agg: aggregations computed in the kernel (docs/aggregations.md). No event leaves the kernel;
 * each probe site runs the actions the host configured in AGG_SITES: count, sum, min,
 * max or a log2/linear histogram of a value, keyed by up to four parts (comm, pid, tid,
 * uid, cgroup, syscall number, a field of the probe), or the latency between a
 * start event and an end event matched by a key (the thread, or a field such as a
 * request pointer). Values go to a per-CPU hash that the host reads and sums, or, for
 * keys that are small integers (a syscall number, a bucket, no key at all), to a slot
 * of a per-CPU array: no key to build and hash; keyed by the comm alone, to a slot of
 * a per-CPU array by the comm's index.
 *
 * Sites: the sys_enter and sys_exit programs (raw tracepoints) are sites 0
 * and 1; every other tracepoint is attached with its site number as the cookie.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "filter.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WT_AGG_SITES);
	__type(key, __u32);
	__type(value, struct wt_agg_site);
} AGG_SITES SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct wt_agg_key);
	__type(value, struct wt_agg_value);
} AGG_VALUES SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WT_AGG_ARRAY_AGGS * WT_AGG_ARRAY_SLOTS);
	__type(key, __u32);
	__type(value, struct wt_agg_value);
} AGG_ARRAY SEC(".maps");

/* Values keyed by the comm alone (WT_SLOTS_COMM), the key of bpftrace's @[comm]: each
 * (aggregation, comm) is given an index the first time it is seen (AGG_COMM_IDS, from
 * the counter AGG_COMM_NEXT), and its values are that slot of the per-CPU array
 * AGG_COMM_VALUES. Each CPU remembers the last comm it counted for an aggregation and
 * its index (AGG_COMM_LAST), so a thread making call after call finds its slot with no
 * hash at all. An index is never moved or given to another comm, so values only grow
 * in place and a read is exact. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WT_AGG_COMMS);
	__type(key, struct wt_agg_comm_key);
	__type(value, __u32);
} AGG_COMM_IDS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WT_AGG_COMMS);
	__type(key, __u32);
	__type(value, struct wt_agg_value);
} AGG_COMM_VALUES SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} AGG_COMM_NEXT SEC(".maps");

struct wt_agg_comm_last {
	__u32 agg;
	__u32 idx; /* the index + 1; 0: none yet */
	__u64 comm[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WT_AGG_COMM_LAST);
	__type(key, __u32);
	__type(value, struct wt_agg_comm_last);
} AGG_COMM_LAST SEC(".maps");

/* Start times of intervals, by aggregation and correlation key; 0 once ended. Not an
 * LRU map: an LRU evicts silently, and an evicted start is an interval lost with no
 * trace. Here a start that finds the map full is refused and counted
 * (WT_LOSS_STARTS_FULL), so the count is exact: every start the map could not keep.
 * What keeps it from filling: an ended entry is reused by its key's next start, and
 * the entries of a thread-keyed interval (AGG_TID_AGGS) go when the thread exits.
 * Entries keyed by a field (a request pointer) stay, zeroed, until the key comes back. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct wt_agg_start_key);
	__type(value, __u64);
} AGG_STARTS SEC(".maps");

/* The starts of intervals that begin and end on the current thread (WT_SRC_CURRENT),
 * kept with the thread: no key to hash, and gone when the thread is. */
struct wt_agg_task_starts {
	__u64 ts[WT_AGG_TASK_STARTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct wt_agg_task_starts);
} AGG_TASK_STARTS SEC(".maps");

/*
 * The syscall in flight on each CPU, for a run whose syscall sites do one thing: time
 * each syscall of the current thread, entry to exit (cfg_agg_sys_interval; syslatency's
 * shape). Its start is kept in this CPU's record, tagged with the task, where task
 * storage would cost a lookup at each end. A syscall ends on the CPU it started on
 * unless its thread was switched out in between; the switch moves the start into the
 * thread's task storage (wt_agg_sys_move), where the end looks when the record is not
 * its own. The programs that touch the record run with preemption off (a tracepoint's
 * programs do) and never in an interrupt, so each sees it whole.
 */
const volatile __u32 cfg_agg_sys_interval = 0; /* the aggregation's id + 1; 0: no such run */

struct wt_agg_in_flight {
	__u64 task; /* the task whose start this is; 0: none */
	__u64 ts;
	__s64 id;   /* the syscall's number at its entry */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_agg_in_flight);
} AGG_IN_FLIGHT SEC(".maps");

/* Log2 histograms keyed by the syscall number alone (WT_SLOTS_SYSCALL_BUCKETS): a slot
 * per syscall and bucket; sized by the host to the aggregations that use it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_agg_bucket);
} AGG_SYS_HIST SEC(".maps");

/* The aggregations whose intervals are keyed by a thread id (WT_SRC_TID, or a field
 * with WT_SRC_TASK): their starts are removed when the thread exits. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_agg_tid_aggs);
} AGG_TID_AGGS SEC(".maps");

/* Threads known to be in the run's scope, for intervals named by a thread id
 * (WT_SRC_TASK): a wakeup is often run by another CPU's idle task, so the woken
 * thread is not the current one. Added at fork when the child is in scope and when
 * a thread is seen in scope at a site with such intervals; removed when seen out of
 * it (an exec to another comm, a setuid) and at exit. Not an LRU map, so that none
 * is forgotten silently: an insert into a full map is counted (WT_LOSS_SCOPE_FULL);
 * the exits keep it to the threads alive. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} SCOPED_TIDS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WT_AGG_IDS * 2);
	__type(key, __u32);
	__type(value, __u64);
} AGG_LOSSES SEC(".maps");

/* A loss of aggregation `agg`: counted under its reason, and as that aggregation's
 * (`which`: 0 an update lost, 1 a start refused). */
static __always_inline void wt_agg_lose(__u32 agg, __u32 reason, __u32 which)
{
	__u32 key = agg * 2 + which;
	__u64 *v;

	wt_lose(reason);
	if (agg >= WT_AGG_IDS)
		return;
	v = bpf_map_lookup_elem(&AGG_LOSSES, &key);
	if (v)
		*v += 1;
}

struct wt_agg_ctx {
	const void *data; /* the tracepoint entry; NULL for syscalls (then sys) */
	__u64 sys[7];
	__u64 pid_tgid;
	__s64 id; /* syscall number, or -1 */
	__u8 out_of_scope; /* the current task is outside the run's scope (-p, -c, uid, comm, cgroup) */
	const struct pt_regs *regs; /* sys_enter: the arguments, read into sys only if a site needs them */
	__u64 now; /* the event's time, read once by the first action that needs it; 0 until then */
	/* The scheduler's BTF tracepoints: the tasks the probe hands over, and the offset in
	 * data of the field that holds each one's id (WT_SRC_NAMED). */
	struct task_struct *named[2];
	__u16 named_off[2];
};

/* The event's time: one clock read per event, however many of its actions start or end
 * an interval (a switch ends one thread's wait and starts another's). The clock is the
 * dearest step of a latency, and read first where an action needs it, so an interval
 * leaves out the collector's own work after it. */
static __always_inline __u64 wt_agg_now(struct wt_agg_ctx *c)
{
	if (!c->now)
		c->now = bpf_ktime_get_ns();
	return c->now;
}

/* A value of `size` bytes at `off` of the probe's data, sign-extended if asked. */
static __always_inline int wt_agg_field(const struct wt_agg_ctx *c, const struct wt_agg_src *s, __u64 *out)
{
	const void *base = c->data ? c->data : (const void *)c->sys;
	__u32 size = s->size;
	__u64 v = 0;

	if (size != 1 && size != 2 && size != 4 && size != 8)
		return -1;
	if (bpf_probe_read_kernel(&v, size & 15, (const char *)base + s->off))
		return -1;
	if ((s->flags & WT_PRED_SIGNED) && size < 8) {
		int shift = 64 - size * 8;

		v = (__u64)(((__s64)(v << shift)) >> shift);
	}
	*out = v;
	return 0;
}

static __always_inline int wt_agg_read(const struct wt_agg_ctx *c, const struct wt_agg_src *s, __u64 *out)
{
	switch (s->src) {
	case WT_SRC_PID:
		*out = c->pid_tgid >> 32;
		return 0;
	case WT_SRC_TID:
		*out = (__u32)c->pid_tgid;
		return 0;
	case WT_SRC_UID:
		*out = (__u32)bpf_get_current_uid_gid();
		return 0;
	case WT_SRC_CGROUP:
		*out = bpf_get_current_cgroup_id();
		return 0;
	case WT_SRC_SYSCALL:
		*out = (__u64)c->id;
		return 0;
	case WT_SRC_FIELD:
		return wt_agg_field(c, s, out);
	}
	*out = 0;
	return 0;
}

/* Whether the thread whose id is the field `s` is in the run's scope (-p, -c, -u,
 * --comm, --cgroup): the current thread as filtered, another as last seen. */
static __always_inline int wt_agg_task_in_scope(const struct wt_agg_ctx *c, const struct wt_agg_src *s)
{
	__u64 tid;
	__u32 key;

	if (wt_agg_field(c, s, &tid) || !tid)
		return 0;
	if (tid == (__u32)c->pid_tgid)
		return !c->out_of_scope;
	/* A task the probe hands over is judged itself: one in scope that has not run
	 * since the collectors attached (a command let run by -c, a thread asleep since
	 * before the start) is not yet in SCOPED_TIDS. */
	if (c->named[0] && s->off == c->named_off[0])
		return wt_task_in_scope(c->named[0]);
	if (c->named[1] && s->off == c->named_off[1])
		return wt_task_in_scope(c->named[1]);
	key = (__u32)tid;
	return bpf_map_lookup_elem(&SCOPED_TIDS, &key) != NULL;
}

/* Keep SCOPED_TIDS true of the current thread. */
static __always_inline void wt_agg_note_current(const struct wt_agg_ctx *c)
{
	__u32 tid = (__u32)c->pid_tgid;
	__u8 *seen = bpf_map_lookup_elem(&SCOPED_TIDS, &tid);

	if (!c->out_of_scope && !seen) {
		__u8 one = 1;

		if (bpf_map_update_elem(&SCOPED_TIDS, &tid, &one, BPF_ANY))
			wt_lose(WT_LOSS_SCOPE_FULL);
	} else if (c->out_of_scope && seen) {
		bpf_map_delete_elem(&SCOPED_TIDS, &tid);
	}
}

static __always_inline __u32 wt_ilog2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r;
}

/* wasmtap_abi::hist::log2_bucket: 0 for 0, 1 + log2(v) above, the negation below. */
static __always_inline __s32 wt_log2_bucket(__s64 v)
{
	__u64 m;
	__s32 b;

	if (v == 0)
		return 0;
	m = v < 0 ? (__u64)0 - (__u64)v : (__u64)v;
	b = 1 + (__s32)wt_ilog2(m);
	return v < 0 ? -b : b;
}

/* wasmtap_abi::hist::Linear::bucket: 0 below min, 1..=levels, levels + 1 above. */
static __always_inline __s32 wt_linear_bucket(const struct wt_agg_action *a, __s64 v)
{
	__u64 k;

	if (v < a->lin_min || !a->lin_step)
		return 0;
	k = ((__u64)v - (__u64)a->lin_min) / a->lin_step;
	return k < a->lin_levels ? (__s32)k + 1 : (__s32)a->lin_levels + 1;
}

/* One sample into this CPU's values of a key. */
static __always_inline void wt_agg_fold(struct wt_agg_value *cur, __s64 v)
{
	if (!cur->count || v < cur->min)
		cur->min = v;
	if (!cur->count || v > cur->max)
		cur->max = v;
	cur->count += 1;
	cur->sum += v;
}

/* The sample `v` into the action's array slot, if its key has one: 1 when done. */
static __always_inline int wt_agg_array_update(const struct wt_agg_ctx *c, const struct wt_agg_action *a,
					       __s32 bucket, __s64 v)
{
	struct wt_agg_value *cur;
	__s64 slot;
	__u32 idx;

	if (a->slots == WT_SLOTS_SYSCALL)
		slot = c->id;
	else if (a->slots == WT_SLOTS_SINGLE)
		slot = 0;
	else if (a->slots == WT_SLOTS_BUCKETS)
		slot = WT_AGG_ARRAY_SLOTS / 2 + (__s64)bucket;
	else
		return 0;
	if (slot < 0 || slot >= WT_AGG_ARRAY_SLOTS || a->agg >= WT_AGG_ARRAY_AGGS)
		return 0;
	idx = a->agg * WT_AGG_ARRAY_SLOTS + (__u32)slot;
	cur = bpf_map_lookup_elem(&AGG_ARRAY, &idx);
	if (!cur)
		return 0;
	wt_agg_fold(cur, v);
	return 1;
}

/* The sample `v` into its syscall's bucket of AGG_SYS_HIST: 1 when done (a negative
 * bucket or a syscall past the table goes to the hash). */
static __always_inline int wt_agg_sys_hist_update(const struct wt_agg_ctx *c, const struct wt_agg_action *a,
						  __s32 bucket, __s64 v)
{
	struct wt_agg_bucket *cur, *used;
	__u32 base, idx;

	if (c->id < 0 || c->id >= WT_NR_SYSCALLS || bucket < 0 || bucket >= WT_AGG_SYS_HIST_USED ||
	    a->agg >= WT_AGG_SYS_HIST_AGGS)
		return 0;
	base = (a->agg * WT_NR_SYSCALLS + (__u32)c->id) * WT_AGG_SYS_HIST_STRIDE;
	idx = base + (__u32)bucket;
	cur = bpf_map_lookup_elem(&AGG_SYS_HIST, &idx);
	if (!cur)
		return 0;
	if (!cur->count) {
		/* This CPU's first sample in the bucket: mark it used, for the reader. */
		idx = base + WT_AGG_SYS_HIST_USED;
		used = bpf_map_lookup_elem(&AGG_SYS_HIST, &idx);
		if (!used)
			return 0;
		if (bucket < 64)
			used->count |= 1ULL << bucket;
		else
			used->sum |= 1;
	}
	cur->count += 1;
	cur->sum += v;
	return 1;
}

/* The sample `v` into AGG_VALUES under key `k`. */
static __always_inline void wt_agg_update(const struct wt_agg_key *k, __s64 v)
{
	struct wt_agg_value *cur = bpf_map_lookup_elem(&AGG_VALUES, k);

	if (!cur) {
		struct wt_agg_value init = { .count = 1, .sum = v, .min = v, .max = v };

		if (!bpf_map_update_elem(&AGG_VALUES, k, &init, BPF_NOEXIST))
			return;
		/* Another CPU created the key first; our slot of it is zero. */
		cur = bpf_map_lookup_elem(&AGG_VALUES, k);
		if (!cur) {
			wt_count(WT_AGG_KIND, WT_SLOT_DROPPED);
			wt_agg_lose(k->agg, WT_LOSS_AGG_MAP_FULL, 0);
			return;
		}
	}
	wt_agg_fold(cur, v);
}

/* The index of (aggregation, comm) `k` in AGG_COMM_VALUES, given now if it has none;
 * -1 when every index is taken (counted as a loss). */
static __always_inline __s64 wt_agg_comm_index(const struct wt_agg_comm_key *k)
{
	__u32 *idx = bpf_map_lookup_elem(&AGG_COMM_IDS, k);
	__u32 zero = 0, n, *next;

	if (idx)
		return *idx;
	next = bpf_map_lookup_elem(&AGG_COMM_NEXT, &zero);
	if (!next)
		return -1;
	/* Read first so that the counter stops near the end and never wraps. */
	if (*next >= WT_AGG_COMMS)
		goto full;
	n = __sync_fetch_and_add(next, 1);
	if (n >= WT_AGG_COMMS)
		goto full;
	if (!bpf_map_update_elem(&AGG_COMM_IDS, k, &n, BPF_NOEXIST))
		return n;
	/* Another CPU gave this comm an index first (n is left unused), or the map is full. */
	idx = bpf_map_lookup_elem(&AGG_COMM_IDS, k);
	if (idx)
		return *idx;
full:
	wt_count(WT_AGG_KIND, WT_SLOT_DROPPED);
	wt_agg_lose(k->agg, WT_LOSS_AGG_MAP_FULL, 0);
	return -1;
}

/* The sample `v` keyed by the current task's comm alone (WT_SLOTS_COMM). */
static __always_inline void wt_agg_comm_update(const struct wt_agg_action *a, __s64 v)
{
	struct wt_agg_comm_key k = { .agg = a->agg };
	struct wt_agg_comm_last *last;
	struct wt_agg_value *cur;
	struct task_struct *task;
	__u32 slot = a->agg % WT_AGG_COMM_LAST, idx;
	__u64 c0, c1;
	__s64 found;

	/* Read in place: two loads where bpf_get_current_comm copies through a helper.
	 * The kernel keeps a comm NUL-padded, as the helper returns it. */
	task = bpf_get_current_task_btf();
	c0 = *(const __u64 *)&task->comm[0];
	c1 = *(const __u64 *)&task->comm[8];
	last = bpf_map_lookup_elem(&AGG_COMM_LAST, &slot);
	if (!last)
		return;
	if (last->idx && last->agg == a->agg && last->comm[0] == c0 && last->comm[1] == c1) {
		idx = last->idx - 1;
	} else {
		__builtin_memcpy(&k.comm[0], &c0, 8);
		__builtin_memcpy(&k.comm[8], &c1, 8);
		found = wt_agg_comm_index(&k);
		if (found < 0)
			return;
		idx = (__u32)found;
		last->agg = a->agg;
		last->idx = idx + 1;
		last->comm[0] = c0;
		last->comm[1] = c1;
	}
	cur = bpf_map_lookup_elem(&AGG_COMM_VALUES, &idx);
	if (cur)
		wt_agg_fold(cur, v);
}

/* The sample `v` of action `a` (a value, or an interval's length) into its slot, or
 * into the hash under key `k`, which the caller zeroed (at the top of its program:
 * zeroed later, the verifier's states of the action loop no longer prune). */
static __always_inline void wt_agg_put(const struct wt_agg_ctx *c, const struct wt_agg_action *a, __u64 v,
				       struct wt_agg_key *k)
{
	int i;

	if (a->fn == WT_FN_LOG2)
		k->bucket = wt_log2_bucket((__s64)v);
	else if (a->fn == WT_FN_LINEAR)
		k->bucket = wt_linear_bucket(a, (__s64)v);
	if (a->slots == WT_SLOTS_COMM) {
		wt_agg_comm_update(a, a->fn == WT_FN_COUNT ? 0 : (__s64)v);
		return;
	}
	if (a->slots == WT_SLOTS_SYSCALL_BUCKETS) {
		if (wt_agg_sys_hist_update(c, a, k->bucket, (__s64)v))
			return;
	} else if (a->slots && wt_agg_array_update(c, a, k->bucket, a->fn == WT_FN_COUNT ? 0 : (__s64)v)) {
		return;
	}
	k->agg = a->agg;
	for (i = 0; i < WT_AGG_KEYS; i++) {
		const struct wt_agg_src *s = &a->keys[i];

		if (s->src == WT_SRC_NONE)
			break;
		if (s->src == WT_SRC_COMM)
			bpf_get_current_comm(&k->comm, sizeof(k->comm));
		else if (wt_agg_read(c, s, &k->parts[i]))
			return;
	}
	wt_agg_update(k, a->fn == WT_FN_COUNT ? 0 : (__s64)v);
}

/* Whether the action wants syscall `id` (its syscall filter); one it does not is counted
 * as filtered. */
static __always_inline int wt_agg_wants_syscall(const struct wt_agg_action *a, __s64 id)
{
	__u32 nr = (__u32)id;

	if (!a->filter_syscalls)
		return 1;
	if (id >= 0 && nr < 512 && (a->syscalls[(nr >> 3) & 63] & (1 << (nr & 7))))
		return 1;
	wt_count(WT_AGG_KIND, WT_SLOT_FILTERED);
	return 0;
}

static __always_inline void wt_agg_act(struct wt_agg_ctx *c, const struct wt_agg_action *a)
{
	const void *base = c->data ? c->data : (const void *)c->sys;
	struct wt_agg_start_key sk = {};
	struct wt_agg_key k = {};
	__u64 v = 0, *ts;
	int i;

	if (a->corr.flags & WT_SRC_TASK) {
		/* The interval is the thread's named by the field: in scope or not by it. */
		if (wt_scoped() && !wt_agg_task_in_scope(c, &a->corr))
			return;
	} else if (c->out_of_scope) {
		/* Outside the scope only an end may count: it closes an interval whose start
		 * was in scope (a request issued by the traced task, completed in an
		 * interrupt). Its keys must not name the current task: that is someone
		 * else's. */
		if (a->role != WT_ROLE_END)
			return;
		for (i = 0; i < WT_AGG_KEYS; i++) {
			__u8 src = a->keys[i].src;

			if (src == WT_SRC_NONE)
				break;
			if (src != WT_SRC_FIELD && src != WT_SRC_SYSCALL)
				return;
		}
	}
	if (!wt_agg_wants_syscall(a, c->id))
		return;
	if (!wt_preds_pass(WT_AGG_KIND, &a->preds, base))
		return;
	if (a->corr.flags & (WT_SRC_CURRENT | WT_SRC_NAMED)) {
		/* Started and ended on the current thread, or on a task the probe hands over:
		 * the start is kept with that task. */
		struct wt_agg_task_starts *t;
		struct task_struct *task;
		__u32 slot = a->agg;

		if (slot >= WT_AGG_TASK_STARTS)
			return;
		if (a->corr.flags & WT_SRC_CURRENT)
			task = bpf_get_current_task_btf();
		else if (c->named[0] && a->corr.off == c->named_off[0])
			task = c->named[0];
		else if (c->named[1] && a->corr.off == c->named_off[1])
			task = c->named[1];
		else
			return;
		t = bpf_task_storage_get(&AGG_TASK_STARTS, task, 0,
					 a->role == WT_ROLE_START ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
		if (a->role == WT_ROLE_START) {
			if (t)
				t->ts[slot] = wt_agg_now(c);
			else
				wt_agg_lose(a->agg, WT_LOSS_STARTS_FULL, 1);
			return;
		}
		if (!t || !t->ts[slot])
			return;
		v = t->ts[slot];
		t->ts[slot] = 0;
		v = wt_agg_now(c) - v;
	} else if (a->role == WT_ROLE_START) {
		sk.agg = a->agg;
		if (wt_agg_read(c, &a->corr, &sk.corr))
			return;
		/* A key seen before (a thread's next syscall) is stamped in place: no
		 * insert or delete on the hot path, only a lookup. A new key is inserted
		 * first and stamped after, so the interval leaves out the insert (a first
		 * insert can take microseconds). */
		ts = bpf_map_lookup_elem(&AGG_STARTS, &sk);
		if (!ts) {
			__u64 zero = 0;

			/* NOEXIST: if another CPU inserted the key meanwhile, its entry is ours
			 * too; only a full map leaves none. */
			bpf_map_update_elem(&AGG_STARTS, &sk, &zero, BPF_NOEXIST);
			ts = bpf_map_lookup_elem(&AGG_STARTS, &sk);
		}
		if (ts)
			*ts = wt_agg_now(c);
		else
			wt_agg_lose(sk.agg, WT_LOSS_STARTS_FULL, 1);
		return;
	} else if (a->role == WT_ROLE_END) {
		sk.agg = a->agg;
		if (wt_agg_read(c, &a->corr, &sk.corr))
			return;
		ts = bpf_map_lookup_elem(&AGG_STARTS, &sk);
		if (!ts || !*ts)
			return;
		v = *ts;
		/* Ended: zeroed, not deleted; the entry is reused by the key's next start
		 * and the least recently used go when the map is full. */
		*ts = 0;
		/* As late as the start was stamped early: what lies between the two
		 * stamps is the traced code, not ours. */
		v = wt_agg_now(c) - v;
	} else if (a->fn != WT_FN_COUNT && wt_agg_read(c, &a->value, &v)) {
		return;
	}
	wt_agg_put(c, a, v, &k);
}

static __always_inline void wt_agg_run(struct wt_agg_ctx *c, __u32 site)
{
	struct wt_agg_site *s = bpf_map_lookup_elem(&AGG_SITES, &site);
	int i;

	if (!s)
		return;
	if ((s->flags & WT_SITE_TASKS) && wt_scoped())
		wt_agg_note_current(c);
	if ((s->flags & WT_SITE_DATA) && c->regs)
		wt_read_sys_args(&c->sys[1], c->regs);
	/* An event outside the scope was counted as filtered, whatever its actions do:
	 * each event is counted once. */
	if (!c->out_of_scope)
		wt_count(WT_AGG_KIND, WT_SLOT_EMITTED);
	for (i = 0; i < WT_AGG_ACTIONS; i++) {
		if (i >= s->n)
			break;
		wt_agg_act(c, &s->a[i]);
	}
}

/* Whether syscall number `id` may be a sigreturn, which restores the registers and
 * sets orig_ax to -1: rt_sigreturn (x86_64, and x32's with its bit), sigreturn and
 * rt_sigreturn of 32-bit tasks (119 and 173; 15 is their chmod, read as well). */
static __always_inline bool wt_sys_sigreturn(__s64 id)
{
	return id == 15 || id == 119 || id == 173 || id == (0x40000000 | 513);
}

/* cfg_agg_sys_interval, at syscall site `site`: the current task when it is in scope,
 * with the site's configuration and this CPU's record, the event counted; NULL when
 * there is nothing to do. */
static __always_inline struct task_struct *wt_agg_sys_event(__u32 site, struct wt_agg_site **s,
							    struct wt_agg_in_flight **f)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 zero = 0;

	if (!wt_pass_task(WT_AGG_KIND, task->tgid))
		return NULL;
	*s = bpf_map_lookup_elem(&AGG_SITES, &site);
	*f = bpf_map_lookup_elem(&AGG_IN_FLIGHT, &zero);
	if (!*s || !*f)
		return NULL;
	wt_count(WT_AGG_KIND, WT_SLOT_EMITTED);
	return task;
}

/* cfg_agg_sys_interval: the syscall `id` starts on the current thread. */
static __always_inline void wt_agg_sys_start(__s64 id)
{
	struct wt_agg_in_flight *f = NULL;
	struct wt_agg_site *s = NULL;
	struct task_struct *task = wt_agg_sys_event(WT_AGG_SYS_ENTER, &s, &f);

	if (!task || !s || !f)
		return;
	if (!wt_agg_wants_syscall(&s->a[0], id))
		return;
	/* Another task's start, neither ended nor moved away at a switch (no switch
	 * program ran for it): lost, and counted. A move that finds no task storage
	 * counts its own loss and clears the record. */
	if (f->task && f->task != (__u64)task)
		wt_agg_lose(cfg_agg_sys_interval - 1, WT_LOSS_STARTS_FULL, 1);
	f->task = (__u64)task;
	f->id = id;
	/* Stamped last: the interval leaves out the collector's own work. */
	f->ts = bpf_ktime_get_ns();
}

/* cfg_agg_sys_interval: the current thread's syscall returns `ret`. */
static __always_inline void wt_agg_sys_end(const struct pt_regs *regs, long ret)
{
	__u32 slot = cfg_agg_sys_interval - 1;
	struct wt_agg_in_flight *f = NULL;
	struct wt_agg_site *s = NULL;
	struct task_struct *task = wt_agg_sys_event(WT_AGG_SYS_EXIT, &s, &f);
	const struct wt_agg_action *a;
	struct wt_agg_ctx c = {};
	struct wt_agg_key k = {};
	__u64 now, start;
	bool own;

	if (!task || !s || !f)
		return;
	a = &s->a[0];
	own = f->task == (__u64)task;
	/* The number as the general path reads it at the exit (orig_ax). Only a sigreturn
	 * rewrites the register during the syscall, so any other number is the one its
	 * entry saw, kept in the record: a read of the register costs about 50 ns. */
	if (own && !wt_sys_sigreturn(f->id))
		c.id = f->id;
	else
		c.id = BPF_CORE_READ(regs, orig_ax);
	c.pid_tgid = ((__u64)task->tgid << 32) | (__u32)task->pid;
	c.sys[0] = c.id;
	c.sys[1] = ret;
	if (!wt_agg_wants_syscall(a, c.id) || !wt_preds_pass(WT_AGG_KIND, &a->preds, c.sys))
		return;
	now = bpf_ktime_get_ns();
	if (own) {
		start = f->ts;
		f->task = 0;
	} else {
		/* Switched out since it started: the start was moved to the task. */
		struct wt_agg_task_starts *t = bpf_task_storage_get(&AGG_TASK_STARTS, task, 0, 0);

		if (!t || slot >= WT_AGG_TASK_STARTS)
			return;
		start = t->ts[slot];
		t->ts[slot] = 0;
	}
	if (start)
		wt_agg_put(&c, a, now - start, &k);
}

/* cfg_agg_sys_interval: the current thread is being switched out; the start of its
 * syscall in flight goes with it (a thread that is exiting has none to end). */
static __always_inline void wt_agg_sys_move(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 zero = 0, slot = cfg_agg_sys_interval - 1;
	struct wt_agg_task_starts *t;
	struct wt_agg_in_flight *f;

	if (!cfg_agg_sys_interval)
		return;
	f = bpf_map_lookup_elem(&AGG_IN_FLIGHT, &zero);
	if (!f || f->task != (__u64)task)
		return;
	f->task = 0;
	if ((task->flags & WT_PF_EXITING) || slot >= WT_AGG_TASK_STARTS)
		return;
	t = bpf_task_storage_get(&AGG_TASK_STARTS, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t)
		t->ts[slot] = f->ts;
	else
		wt_agg_lose(slot, WT_LOSS_STARTS_FULL, 1);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(wt_agg_sys_enter, struct pt_regs *regs, long id)
{
	struct wt_agg_ctx c = {};

	if (cfg_agg_sys_interval) {
		wt_agg_sys_start(id);
		return 0;
	}
	c.pid_tgid = bpf_get_current_pid_tgid();
	if (!wt_pass_task(WT_AGG_KIND, c.pid_tgid >> 32))
		return 0;
	c.id = id;
	c.sys[0] = id;
	c.regs = regs;
	wt_agg_run(&c, WT_AGG_SYS_ENTER);
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(wt_agg_sys_exit, struct pt_regs *regs, long ret)
{
	struct wt_agg_ctx c = {};

	if (cfg_agg_sys_interval) {
		wt_agg_sys_end(regs, ret);
		return 0;
	}
	c.pid_tgid = bpf_get_current_pid_tgid();
	if (!wt_pass_task(WT_AGG_KIND, c.pid_tgid >> 32))
		return 0;
	c.id = BPF_CORE_READ(regs, orig_ax);
	c.sys[0] = c.id;
	c.sys[1] = ret;
	wt_agg_run(&c, WT_AGG_SYS_EXIT);
	return 0;
}

SEC("tracepoint")
int wt_agg_tracepoint(void *ctx)
{
	struct wt_agg_ctx c = {};

	c.pid_tgid = bpf_get_current_pid_tgid();
	/* Not a return: an end outside the scope may close an interval started in it. */
	c.out_of_scope = !wt_pass_task_tp(WT_AGG_KIND, c.pid_tgid >> 32, ctx);
	c.data = ctx;
	c.id = -1;
	wt_agg_run(&c, (__u32)bpf_get_attach_cookie(ctx));
	return 0;
}

/*
 * The scheduler's tracepoints as BTF tracepoints: the kernel calls these with the tasks
 * themselves and builds no trace record for them (a tracefs tracepoint fills one in the
 * perf buffer before any program runs). Each builds on its stack the record the tracefs
 * format describes, with the same fields at the same offsets (the host checks the format
 * before it chooses these), so predicates, keys and values read it as they read the
 * kernel's, and a recording replays to the same result.
 */
struct wt_sched_switch_entry {
	__u64 common;
	char prev_comm[16];
	__s32 prev_pid;
	__s32 prev_prio;
	__s64 prev_state;
	char next_comm[16];
	__s32 next_pid;
	__s32 next_prio;
}; /* 64 bytes: prev_pid at 24, prev_state at 32, next_pid at 56 */

struct wt_sched_wakeup_entry {
	__u64 common;
	char comm[16];
	__s32 pid;
	__s32 prio;
	__s32 target_cpu;
	__u32 pad;
}; /* 40 bytes: pid at 24 */

/* The kernel's task states (include/linux/sched.h), as the sched_switch tracepoint
 * reports them. */
#define WT_TASK_REPORT 0x7f
#define WT_TASK_IDLE 0x402
#define WT_TASK_REPORT_IDLE 0x80
#define WT_TASK_REPORT_MAX 0x100
#define WT_TASK_UNINTERRUPTIBLE 0x2
#define WT_TASK_RTLOCK_WAIT 0x1000
#define WT_TASK_FROZEN 0x8000

/* __trace_sched_switch_state: what the tracepoint records as prev_state. */
static __always_inline __s64 wt_switch_state(bool preempt, unsigned int prev_state, struct task_struct *prev)
{
	unsigned int state;

	if (preempt)
		return WT_TASK_REPORT_MAX;
	state = (prev_state | (unsigned int)prev->exit_state) & WT_TASK_REPORT;
	if ((prev_state & WT_TASK_IDLE) == WT_TASK_IDLE)
		state = WT_TASK_REPORT_IDLE;
	if ((prev_state & WT_TASK_RTLOCK_WAIT) || (prev_state & WT_TASK_FROZEN))
		state = WT_TASK_UNINTERRUPTIBLE;
	/* fls(state), then 1 << (fls - 1): the highest bit set. */
	return state ? (__s64)1 << wt_ilog2(state) : 0;
}

static __always_inline void wt_agg_comm(char *dst, const struct task_struct *t)
{
	*(__u64 *)&dst[0] = *(const __u64 *)&t->comm[0];
	*(__u64 *)&dst[8] = *(const __u64 *)&t->comm[8];
}

static __always_inline void wt_agg_sched(struct wt_agg_ctx *c, const void *entry, __u32 site)
{
	c->pid_tgid = bpf_get_current_pid_tgid();
	/* Not a return: an end outside the scope may close an interval started in it. */
	c->out_of_scope = !wt_pass_task(WT_AGG_KIND, c->pid_tgid >> 32);
	c->data = entry;
	c->id = -1;
	wt_agg_run(c, site);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(wt_agg_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct wt_sched_switch_entry e = {};
	struct wt_agg_ctx c = {};

	wt_agg_sys_move();
	if (!prev || !next)
		return 0;
	wt_agg_comm(e.prev_comm, prev);
	e.prev_pid = prev->pid;
	e.prev_prio = prev->prio;
	e.prev_state = wt_switch_state(preempt, prev_state, prev);
	wt_agg_comm(e.next_comm, next);
	e.next_pid = next->pid;
	e.next_prio = next->prio;
	c.named[0] = prev;
	c.named_off[0] = 24;
	c.named[1] = next;
	c.named_off[1] = 56;
	wt_agg_sched(&c, &e, WT_AGG_SCHED_SWITCH);
	return 0;
}

/* The switch for cfg_agg_sys_interval alone, when no aggregation uses sched_switch (a
 * raw tracepoint: the current task is the one switched out). */
SEC("raw_tp/sched_switch")
int BPF_PROG(wt_agg_sys_switch)
{
	wt_agg_sys_move();
	return 0;
}

static __always_inline void wt_agg_wakeup(struct task_struct *p, __u32 site)
{
	struct wt_sched_wakeup_entry e = {};
	struct wt_agg_ctx c = {};

	wt_agg_comm(e.comm, p);
	e.pid = p->pid;
	e.prio = p->prio;
	e.target_cpu = p->thread_info.cpu;
	c.named[0] = p;
	c.named_off[0] = 24;
	wt_agg_sched(&c, &e, site);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(wt_agg_sched_wakeup, struct task_struct *p)
{
	if (p)
		wt_agg_wakeup(p, WT_AGG_SCHED_WAKEUP);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(wt_agg_sched_wakeup_new, struct task_struct *p)
{
	if (p)
		wt_agg_wakeup(p, WT_AGG_SCHED_WAKEUP_NEW);
	return 0;
}

/* WT_TRACKING_PROGRAMS, and SCOPED_TIDS kept. The fork runs as the parent, whose
 * uid, comm and cgroup the child inherits; its own tgid says whether wt_track_fork
 * has made it a target. (A child cloned into another cgroup is corrected the first
 * time it is seen running.) */
SEC("raw_tp/sched_process_fork")
int BPF_PROG(wt_agg_track_fork, struct task_struct *parent, struct task_struct *child)
{
	wt_track_fork(parent, child);
	if (wt_scoped() && wt_in_scope(BPF_CORE_READ(child, tgid))) {
		__u32 tid = BPF_CORE_READ(child, pid);
		__u8 one = 1;

		if (bpf_map_update_elem(&SCOPED_TIDS, &tid, &one, BPF_ANY))
			wt_lose(WT_LOSS_SCOPE_FULL);
	}
	return 0;
}

/* A thread that exits has no interval left to end: its starts go. */
static __always_inline void wt_agg_forget_starts(__u32 tid)
{
	struct wt_agg_start_key sk = { .corr = tid };
	struct wt_agg_tid_aggs *t;
	__u32 zero = 0;
	int i;

	t = bpf_map_lookup_elem(&AGG_TID_AGGS, &zero);
	if (!t)
		return;
	for (i = 0; i < WT_AGG_TID_AGGS; i++) {
		if (i >= t->n)
			break;
		sk.agg = t->agg[i];
		bpf_map_delete_elem(&AGG_STARTS, &sk);
	}
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(wt_agg_untrack_exit, struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);

	wt_untrack_exit(task);
	if (wt_scoped())
		bpf_map_delete_elem(&SCOPED_TIDS, &tid);
	wt_agg_forget_starts(tid);
	return 0;
}

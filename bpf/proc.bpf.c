// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * proc: the process lifecycle. exec (with argv and the execve return value, like
 * libbpf-tools execsnoop: argv is kept at entry and emitted at exit), fork/clone
 * (parent and child), and exit (wait status, start time, CPU time).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "filter.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define WT_ARG_MAX 256

/* The fork and exit programs also keep the target set; they emit only when asked. */
const volatile __u32 cfg_emit_fork = 0;
const volatile __u32 cfg_emit_exit = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct wt_exec);
} EXECS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_exec);
} EXEC_SCRATCH SEC(".maps");

/* The argv copy, one bpf_loop step per argument: verified once, not once per
 * unrolled iteration (a 32-iteration loop took the verifier ~50 ms per program). */
struct wt_argv_walk {
	const char *const *argv;
	__u32 len;
	__u32 argc;
	__u16 flags;
};

static long wt_argv_step(__u64 i, struct wt_argv_walk *w)
{
	__u32 zero = 0, len = w->len;
	struct wt_exec *e = bpf_map_lookup_elem(&EXEC_SCRATCH, &zero);
	const char *argp = NULL;
	long n;

	if (!e || bpf_probe_read_user(&argp, sizeof(argp), &w->argv[i]) || !argp)
		return 1;
	if (len > WT_EXEC_ARGS_MAX - WT_ARG_MAX) {
		w->flags |= WT_EXEC_TRUNCATED;
		return 1;
	}
	n = bpf_probe_read_user_str(&e->args[len & (WT_EXEC_ARGS_MAX - 1)], WT_ARG_MAX, argp);
	if (n <= 0) {
		/* Not resident (a fresh child's untouched .rodata): an empty argument
		 * for now; a successful exec rereads argv from the new image. */
		e->args[len & (WT_EXEC_ARGS_MAX - 1)] = 0;
		n = 1;
	}
	w->len = len + n;
	w->argc++;
	if (w->argc == WT_EXEC_ARGC_MAX)
		w->flags |= WT_EXEC_TRUNCATED;
	return 0;
}

static __always_inline int wt_exec_enter(const char *const *argv)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id, zero = 0;
	struct wt_argv_walk w = { .argv = argv };
	struct wt_exec *e;

	if (!wt_pass_task(WT_EXEC, tgid))
		return 0;
	e = bpf_map_lookup_elem(&EXEC_SCRATCH, &zero);
	if (!e)
		return 0;
	bpf_loop(WT_EXEC_ARGC_MAX, wt_argv_step, &w, 0);
	e->h.flags = w.flags;
	e->argc = w.argc;
	e->args_len = w.len;
	/* Full (4,096 execs in flight at once): this exec's exit finds nothing to report. */
	if (bpf_map_update_elem(&EXECS, &tid, e, BPF_ANY))
		wt_count_lost(WT_EXEC, WT_LOSS_EXEC_MAP_FULL);
	return 0;
}

static __always_inline int wt_exec_exit(long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct task_struct *task;
	struct wt_exec *e;
	__u16 flags;
	__u64 size, len;

	e = bpf_map_lookup_elem(&EXECS, &tid);
	if (!e)
		return 0;
	flags = e->h.flags;
	task = (struct task_struct *)bpf_get_current_task();
	if (ret == 0) {
		/* The new image's argv, just written by the kernel: always resident. */
		unsigned long start = BPF_CORE_READ(task, mm, arg_start);
		unsigned long end = BPF_CORE_READ(task, mm, arg_end);
		__u64 n = end - start;

		if (end > start) {
			if (n > WT_EXEC_ARGS_MAX - 1) {
				n = WT_EXEC_ARGS_MAX - 1;
				flags |= WT_EXEC_TRUNCATED;
			}
			n &= WT_EXEC_ARGS_MAX - 1;
			if (!bpf_probe_read_user(e->args, n, (void *)start)) {
				e->args[n] = 0;
				e->args_len = n;
			}
		}
	}
	len = ((__u64)e->args_len + 7) & ~7ULL;
	if (len > WT_EXEC_ARGS_MAX)
		len = WT_EXEC_ARGS_MAX;
	size = offsetof(struct wt_exec, args) + len;
	wt_fill_header(&e->h, WT_EXEC, size);
	e->h.flags = flags;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->ret = ret;
	if (size > sizeof(*e))
		wt_count_lost(WT_EXEC, WT_LOSS_TOO_BIG);
	else if (wt_quota_pass(WT_EXEC))
		wt_count(WT_EXEC,
			 bpf_ringbuf_output(&EVENTS, e, size, cfg_submit_flags) ? WT_SLOT_DROPPED : WT_SLOT_EMITTED);
	bpf_map_delete_elem(&EXECS, &tid);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execve")
int wt_execve_enter(struct wt_syscall_enter_ctx *ctx)
{
	return wt_exec_enter((const char *const *)ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int wt_execveat_enter(struct wt_syscall_enter_ctx *ctx)
{
	return wt_exec_enter((const char *const *)ctx->args[2]);
}

SEC("tracepoint/syscalls/sys_exit_execve")
int wt_execve_exit(struct wt_syscall_exit_ctx *ctx)
{
	return wt_exec_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_execveat")
int wt_execveat_exit(struct wt_syscall_exit_ctx *ctx)
{
	return wt_exec_exit(ctx->ret);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(wt_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	struct wt_fork *e;

	wt_track_fork(parent, child);
	if (!cfg_emit_fork || !wt_pass_task(WT_FORK, ptgid) || !wt_quota_pass(WT_FORK))
		return 0;
	e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		wt_count(WT_FORK, WT_SLOT_DROPPED);
		return 0;
	}
	wt_fill_header(&e->h, WT_FORK, sizeof(*e));
	e->child_pid = BPF_CORE_READ(child, tgid);
	e->child_tid = BPF_CORE_READ(child, pid);
	if (e->child_pid == ptgid)
		e->h.flags = WT_FORK_THREAD;
	bpf_ringbuf_submit(e, cfg_submit_flags);
	wt_count(WT_FORK, WT_SLOT_EMITTED);
	return 0;
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(wt_exit, struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	struct wt_exit *e;

	if (!cfg_emit_exit || !wt_pass_task(WT_EXIT, tgid) || !wt_quota_pass(WT_EXIT))
		goto out;
	e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		wt_count(WT_EXIT, WT_SLOT_DROPPED);
		goto out;
	}
	wt_fill_header(&e->h, WT_EXIT, sizeof(*e));
	e->exit_code = BPF_CORE_READ(task, exit_code);
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->start_ns = BPF_CORE_READ(task, start_time);
	e->cpu_ns = BPF_CORE_READ(task, signal, sum_sched_runtime) + BPF_CORE_READ(task, se.sum_exec_runtime);
	e->user_ns = BPF_CORE_READ(task, signal, utime) + BPF_CORE_READ(task, utime);
	e->sys_ns = BPF_CORE_READ(task, signal, stime) + BPF_CORE_READ(task, stime);
	if (BPF_CORE_READ(task, signal, live.counter) == 0)
		e->h.flags = WT_EXIT_GROUP_DEAD;
	bpf_ringbuf_submit(e, cfg_submit_flags);
	wt_count(WT_EXIT, WT_SLOT_EMITTED);
out:
	wt_untrack_exit(task);
	return 0;
}

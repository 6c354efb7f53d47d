// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * file: opens. open, openat, openat2 and creat are kept at entry (per thread) and
 * emitted once, at exit, with the return value, the latency and the path, read there
 * (the kernel has just read it, so the page is resident; bpftrace's opensnoop reads it
 * at exit too). A relative path comes with the directory it is relative to, walked
 * from the cwd or the dir fd's file up to the process's root, crossing mounts, as
 * libbpf-tools opensnoop's --full-path does. See struct wt_open in wasmtap.h.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "filter.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define WT_AT_FDCWD -100
#define WT_O_CREAT_WRONLY_TRUNC 01101 /* what creat(2) is */

/* The x86_64 syscall numbers this collector serves. */
#define WT_NR_OPEN 2
#define WT_NR_CREAT 85
#define WT_NR_OPENAT 257
#define WT_NR_OPENAT2 437

/* What an open's entry leaves for its exit. */
struct wt_open_entry {
	__u64 ts_ns;
	__u64 filename; /* user pointer */
	__u64 flags;    /* openat2: the user pointer to its struct open_how */
	__u64 mode;
	__s32 dfd;
	__s32 nr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);
	__type(value, struct wt_open_entry);
} OPENS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wt_open);
} OPEN_SCRATCH SEC(".maps");

static __always_inline int wt_open_enter(__s32 nr, __s32 dfd, __u64 filename, __u64 flags, __u64 mode)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct wt_open_entry e = {
		.ts_ns = bpf_ktime_get_ns(),
		.filename = filename,
		.flags = flags,
		.mode = mode,
		.dfd = dfd,
		.nr = nr,
	};

	if (!wt_pass_task(WT_OPEN, tgid))
		return 0;
	if (bpf_map_update_elem(&OPENS, &tid, &e, BPF_ANY))
		wt_count_lost(WT_OPEN, WT_LOSS_OPEN_MAP_FULL);
	return 0;
}

/* A walk up the directory tree, one bpf_loop step at a time (verified once). */
struct wt_walk {
	struct dentry *d;
	struct vfsmount *vm;
	struct mount *mnt;
	struct dentry *root_d;
	struct vfsmount *root_m;
	__u32 off; /* where the names go in data: just after the path */
	__u32 len;
	__u32 depth;
	__u32 done;
};

static long wt_walk_step(__u64 i, struct wt_walk *w)
{
	struct dentry *d = w->d, *parent;
	struct vfsmount *vm = w->vm;
	struct mount *mnt = w->mnt;
	const unsigned char *name;
	__u32 zero = 0;
	struct wt_open *e = bpf_map_lookup_elem(&OPEN_SCRATCH, &zero);
	long n;

	if (!e || !d || (d == w->root_d && vm == w->root_m))
		goto done;
	if (d == BPF_CORE_READ(vm, mnt_root)) {
		struct mount *up = BPF_CORE_READ(mnt, mnt_parent);

		if (!up || up == mnt)
			goto done;
		w->d = BPF_CORE_READ(mnt, mnt_mountpoint);
		w->mnt = up;
		w->vm = __builtin_preserve_access_index(&up->mnt);
		return 0;
	}
	parent = BPF_CORE_READ(d, d_parent);
	if (parent == d)
		goto done;
	if (w->depth >= WT_OPEN_DEPTH_MAX || w->len >= WT_OPEN_BASE_MAX)
		return 1;
	name = BPF_CORE_READ(d, d_name.name);
	n = bpf_probe_read_kernel_str(&e->data[(w->off + w->len) & (WT_OPEN_PATH_MAX + WT_OPEN_BASE_MAX - 1)],
				      WT_OPEN_NAME_MAX, name);
	if (n <= 0)
		return 1;
	w->len += n;
	w->depth++;
	w->d = parent;
	return 0;
done:
	w->done = 1;
	return 1;
}

/* The directory `dir` as names from the innermost up to the process's root, appended
 * to e->data at `off` (just after the path). */
static __always_inline void wt_base_dir(struct wt_open *e, __u32 off, const struct path *dir, struct task_struct *task)
{
	struct fs_struct *fs = BPF_CORE_READ(task, fs);
	struct vfsmount *vm = BPF_CORE_READ(dir, mnt);
	struct wt_walk w = {
		.d = BPF_CORE_READ(dir, dentry),
		.vm = vm,
		.mnt = container_of(vm, struct mount, mnt),
		.root_d = BPF_CORE_READ(fs, root.dentry),
		.root_m = BPF_CORE_READ(fs, root.mnt),
		.off = off,
	};

	bpf_loop(2 * WT_OPEN_DEPTH_MAX, wt_walk_step, &w, 0);
	e->h.flags |= WT_OPEN_BASE_WALKED;
	if (!w.done)
		e->h.flags |= WT_OPEN_BASE_TRUNCATED;
	e->base_len = w.len;
	e->base_depth = w.depth;
}

static __always_inline int wt_open_exit(long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct wt_open_entry *in;
	struct task_struct *task;
	struct wt_open *e;
	__u64 size;
	long n;

	in = bpf_map_lookup_elem(&OPENS, &tid);
	if (!in)
		return 0;
	e = bpf_map_lookup_elem(&OPEN_SCRATCH, &zero);
	if (!e)
		goto out;
	wt_fill_header(&e->h, WT_OPEN, 0);
	e->nr = in->nr;
	e->dfd = in->dfd;
	e->flags = in->flags;
	e->mode = in->mode;
	if (in->nr == WT_NR_OPENAT2) {
		struct open_how how = {};

		bpf_probe_read_user(&how, sizeof(how), (void *)in->flags);
		e->flags = how.flags;
		e->mode = how.mode;
	}
	e->ret = ret;
	e->latency_ns = e->h.ts_ns - in->ts_ns;
	e->base_len = 0;
	e->base_depth = 0;
	e->reserved = 0;
	n = bpf_probe_read_user_str(e->data, WT_OPEN_PATH_MAX, (void *)in->filename);
	if (n <= 0) {
		n = 0;
	} else if (n == WT_OPEN_PATH_MAX) {
		/* Full: the path was cut (or is exactly as long as what is kept). */
		e->h.flags |= WT_OPEN_PATH_TRUNCATED;
	}
	e->path_len = n;
	task = (struct task_struct *)bpf_get_current_task();
	if (n > 0 && e->data[0] != '/') {
		const struct path *dir = NULL;

		if (in->dfd == WT_AT_FDCWD) {
			struct fs_struct *fs = BPF_CORE_READ(task, fs);

			dir = __builtin_preserve_access_index(&fs->pwd);
		} else if (in->dfd >= 0) {
			struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
			struct file **fds = BPF_CORE_READ(fdt, fd);
			struct file *f = NULL;

			if ((__u32)in->dfd < BPF_CORE_READ(fdt, max_fds) &&
			    !bpf_probe_read_kernel(&f, sizeof(f), &fds[in->dfd]) && f)
				dir = __builtin_preserve_access_index(&f->f_path);
		}
		if (dir)
			wt_base_dir(e, n, dir, task);
	}
	size = offsetof(struct wt_open, data) + (((__u64)e->path_len + e->base_len + 7) & ~7ULL);
	if (size > sizeof(*e)) {
		wt_count_lost(WT_OPEN, WT_LOSS_TOO_BIG);
		goto out;
	}
	e->h.size = size;
	if (!wt_quota_pass(WT_OPEN))
		goto out;
	if (bpf_ringbuf_output(&EVENTS, e, size, cfg_submit_flags))
		wt_count(WT_OPEN, WT_SLOT_DROPPED);
	else
		wt_count(WT_OPEN, WT_SLOT_EMITTED);
out:
	bpf_map_delete_elem(&OPENS, &tid);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_open")
int wt_open_enter_open(struct wt_syscall_enter_ctx *ctx)
{
	return wt_open_enter(WT_NR_OPEN, WT_AT_FDCWD, ctx->args[0], ctx->args[1], ctx->args[2]);
}

SEC("tracepoint/syscalls/sys_enter_openat")
int wt_open_enter_openat(struct wt_syscall_enter_ctx *ctx)
{
	return wt_open_enter(WT_NR_OPENAT, (__s32)ctx->args[0], ctx->args[1], ctx->args[2], ctx->args[3]);
}

SEC("tracepoint/syscalls/sys_enter_openat2")
int wt_open_enter_openat2(struct wt_syscall_enter_ctx *ctx)
{
	return wt_open_enter(WT_NR_OPENAT2, (__s32)ctx->args[0], ctx->args[1], ctx->args[2], 0);
}

SEC("tracepoint/syscalls/sys_enter_creat")
int wt_open_enter_creat(struct wt_syscall_enter_ctx *ctx)
{
	return wt_open_enter(WT_NR_CREAT, WT_AT_FDCWD, ctx->args[0], WT_O_CREAT_WRONLY_TRUNC, ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_exit_open")
int wt_open_exit_open(struct wt_syscall_exit_ctx *ctx)
{
	return wt_open_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_openat")
int wt_open_exit_openat(struct wt_syscall_exit_ctx *ctx)
{
	return wt_open_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_openat2")
int wt_open_exit_openat2(struct wt_syscall_exit_ctx *ctx)
{
	return wt_open_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_creat")
int wt_open_exit_creat(struct wt_syscall_exit_ctx *ctx)
{
	return wt_open_exit(ctx->ret);
}

WT_TRACKING_PROGRAMS(wt_file)

/*
 * wasmtap_events.h: the batch layout of docs/abi.md, decoded: wasmtap's events for C
 * plugins. Nothing is copied: a wt_event points into the batch, and each accessor reads
 * one field of the record where it lies. Every kind of the layout has its accessors;
 * those of another kind's record read nothing meaningful, so test `ev.kind` first.
 *
 * This part of the SDK needs nothing of the host (wasmtap.h includes it), so it builds
 * natively too: the languages test checks it against guest-sdk/vectors.json, the table
 * the Rust SDK writes.
 */
#ifndef WASMTAP_EVENTS_H
#define WASMTAP_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
	WT_SYS_ENTER = 1,
	WT_SYS_EXIT = 2,
	WT_EXEC = 3,
	WT_FORK = 4,
	WT_EXIT = 5,
	WT_TRACEPOINT = 6,
	WT_USER = 7,
	WT_SAMPLE = 8,
	WT_OPEN = 10,
};

/* One record of a batch: the header's fields, and the record itself for the kind's
 * accessors. Valid until the batch is freed. */
typedef struct wt_event {
	uint16_t kind;
	uint16_t size;
	uint16_t sub; /* the index of the subscription it matched */
	uint16_t flags;
	uint64_t ts_ns;
	uint32_t pid, tid, uid, gid;
	uint64_t cgroup;
	char comm[17]; /* NUL-terminated */
	const uint8_t *rec;
} wt_event;

/* The next record of the `len` bytes at `batch` from `*offset` into `ev`; false at the
 * end, or at a record whose kind or size is not valid (a decoder stops there). A plugin
 * calls wt_next (wasmtap.h), which takes the batch as the host hands it over. */
bool wt_next_record(const uint8_t *batch, size_t len, size_t *offset, wt_event *ev);

/* sys_enter, sys_exit: the syscall number; arguments (enter, 0-5); the return (exit). */
int64_t wt_sys_nr(const wt_event *ev);
uint64_t wt_sys_arg(const wt_event *ev, unsigned i);
int64_t wt_sys_ret(const wt_event *ev);
/* The name of syscall `nr` on this machine (x86_64), or NULL. */
const char *wt_syscall_name(int64_t nr);

/* open: the path (NUL-terminated, in the record), flags, mode, and the fd or -errno. */
const char *wt_open_path(const wt_event *ev);
uint64_t wt_open_flags(const wt_event *ev);
uint64_t wt_open_mode(const wt_event *ev);
int64_t wt_open_ret(const wt_event *ev);
int32_t wt_open_nr(const wt_event *ev);

/* The path made absolute, as the Rust SDK's `Open::full_path`: a relative path joined to
 * the directory the kernel walked (leading `./` dropped); otherwise as passed. Into `buf`,
 * cut to `n` bytes with its NUL. */
void wt_open_full_path(const wt_event *ev, char *buf, size_t n);
/* Open flags decoded: the access mode, then each flag set, then unknown bits in hex
 * ("O_WRONLY|O_CREAT|O_TRUNC"). */
void wt_open_flags_str(uint64_t flags, char *buf, size_t n);
/* The name of errno `e` or `-e` ("ENOENT"), or NULL. */
const char *wt_errno_name(int64_t e);

/* sys_enter, sys_exit: the syscall's name, as wt_syscall_name(wt_sys_nr(ev)). */

/* exec: the parent, execve's return, the arguments kept (argc), and whether argv was cut;
 * argument `i` (0 <= i < argc) as a pointer into the record and its length, or NULL. */
uint32_t wt_exec_ppid(const wt_event *ev);
int32_t wt_exec_ret(const wt_event *ev);
uint32_t wt_exec_argc(const wt_event *ev);
bool wt_exec_truncated(const wt_event *ev);
const char *wt_exec_arg(const wt_event *ev, uint32_t i, size_t *len);

/* fork: the child (the header describes the parent), and whether it is a thread. */
uint32_t wt_fork_child_pid(const wt_event *ev);
uint32_t wt_fork_child_tid(const wt_event *ev);
bool wt_fork_is_thread(const wt_event *ev);

/* exit: the wait status (code << 8 | signal) and its parts, the parent, the task's start,
 * whether it was the last thread of its process, and the process's CPU times (false in
 * recordings older than them). */
int32_t wt_exit_status(const wt_event *ev);
int32_t wt_exit_code(const wt_event *ev);
int32_t wt_exit_signal(const wt_event *ev);
bool wt_exit_core_dumped(const wt_event *ev);
uint32_t wt_exit_ppid(const wt_event *ev);
uint64_t wt_exit_start_ns(const wt_event *ev);
bool wt_exit_group_dead(const wt_event *ev);
bool wt_exit_cpu(const wt_event *ev, uint64_t *cpu_ns, uint64_t *user_ns, uint64_t *sys_ns);

/* open, beside the above: the dir fd, the latency, and whether the path or its directory
 * was cut. */
int32_t wt_open_dfd(const wt_event *ev);
uint64_t wt_open_latency_ns(const wt_event *ev);
bool wt_open_path_truncated(const wt_event *ev);
bool wt_open_base_truncated(const wt_event *ev);

/* tracepoint: the tracefs event id, whether the entry was cut, and the entry's bytes. */
uint32_t wt_tp_event_id(const wt_event *ev);
bool wt_tp_truncated(const wt_event *ev);
const uint8_t *wt_tp_data(const wt_event *ev, size_t *len);

/* A field of a tracepoint entry, as `probes.schema` describes it (wt_schema_field in
 * wasmtap.h looks one up by name): `kind` is WT_FIELD_*. */
enum {
	WT_FIELD_SIGNED = 0,
	WT_FIELD_UNSIGNED = 1,
	WT_FIELD_TEXT = 2,
	WT_FIELD_DYNAMIC_TEXT = 3,
	WT_FIELD_DYNAMIC_BYTES = 4,
	WT_FIELD_ARRAY = 5,
};
typedef struct wt_field {
	uint8_t kind;
	bool is_signed;
	uint32_t offset, size, count;
} wt_field;
/* An integer field (signed ones sign-extended), or element `i` of an array field; false
 * if it lies outside the entry or its size is not 1, 2, 4 or 8 bytes. */
bool wt_field_int(const wt_event *ev, const wt_field *f, uint64_t *out);
bool wt_field_elem(const wt_event *ev, const wt_field *f, uint32_t i, uint64_t *out);
/* A text or dynamic text field up to its NUL, or a dynamic bytes field: a pointer into
 * the record and its length; NULL if it lies outside the entry. */
const uint8_t *wt_field_bytes(const wt_event *ev, const wt_field *f, size_t *len);

/* user (uprobe, uretprobe, USDT): the host's probe index, the instruction, the valid
 * arguments and each (0 past them), whether it is a return probe and its value. */
uint32_t wt_user_probe(const wt_event *ev);
uint64_t wt_user_ip(const wt_event *ev);
uint32_t wt_user_nargs(const wt_event *ev);
uint64_t wt_user_arg(const wt_event *ev, uint32_t i);
bool wt_user_is_return(const wt_event *ev);

/* sample (profile, software events): the PERF_COUNT_SW_* event, the CPU, the faulting
 * address (page faults) and the interrupted instruction. */
uint32_t wt_sample_event(const wt_event *ev);
uint32_t wt_sample_cpu(const wt_event *ev);
uint64_t wt_sample_addr(const wt_event *ev);
uint64_t wt_sample_ip(const wt_event *ev);

/* The stacks a tracepoint, user or sample record carries (its subscription asked for
 * them): frames innermost first, read with wt_frame. False if it carries none. */
typedef struct wt_frames {
	const uint8_t *at;
	uint16_t len;
} wt_frames;
bool wt_stacks(const wt_event *ev, wt_frames *kernel, wt_frames *user);
uint64_t wt_frame(wt_frames frames, size_t i);

#ifdef __cplusplus
}
#endif
#endif

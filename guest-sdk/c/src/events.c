/* events.c: the C SDK's decoder of the batch layout of docs/abi.md (include/wasmtap_events.h).
 * It needs nothing of the host, so it also builds natively: the languages test compiles it
 * with a check of every record of guest-sdk/vectors.json, the Rust SDK's table. */
#include "wasmtap_events.h"

#include <stdio.h>
#include <string.h>

#include "wasmtap_names.h" /* WT_SYSCALL_NAMES, WT_ERRNO_NAMES, WT_OPEN_FLAG_NAMES: written by wasmtap-c */

/* Little-endian loads at `off` of a record (wasm32 is little-endian). */
static uint16_t wt_u16(const uint8_t *p, size_t off)
{
	uint16_t v;

	memcpy(&v, p + off, sizeof(v));
	return v;
}

static uint32_t wt_u32(const uint8_t *p, size_t off)
{
	uint32_t v;

	memcpy(&v, p + off, sizeof(v));
	return v;
}

static uint64_t wt_u64(const uint8_t *p, size_t off)
{
	uint64_t v;

	memcpy(&v, p + off, sizeof(v));
	return v;
}

#define WT_HEADER 56

/* The smallest valid size of each kind (docs/abi.md), 0 for a kind that does not exist. */
static size_t wt_min_size(uint16_t kind)
{
	switch (kind) {
	case WT_SYS_ENTER: return 112;
	case WT_SYS_EXIT: return 72;
	case WT_EXEC: return 72;
	case WT_FORK: return 64;
	case WT_EXIT: return 72;
	case WT_TRACEPOINT: return 64;
	case WT_USER: return 168;
	case WT_SAMPLE: return 80;
	case WT_OPEN: return 104;
	}
	return 0;
}

bool wt_next_record(const uint8_t *batch, size_t len, size_t *offset, wt_event *ev)
{
	size_t off = *offset;
	const uint8_t *p;
	size_t size, min;

	if (off > len || len - off < WT_HEADER)
		return false;
	p = batch + off;
	size = wt_u16(p, 2);
	min = wt_min_size(wt_u16(p, 0));
	if (!min || size < min || size % 8 || size > len - off)
		return false;
	ev->kind = wt_u16(p, 0);
	ev->size = (uint16_t)size;
	ev->sub = wt_u16(p, 4);
	ev->flags = wt_u16(p, 6);
	ev->ts_ns = wt_u64(p, 8);
	ev->pid = wt_u32(p, 16);
	ev->tid = wt_u32(p, 20);
	ev->uid = wt_u32(p, 24);
	ev->gid = wt_u32(p, 28);
	ev->cgroup = wt_u64(p, 32);
	memcpy(ev->comm, p + 40, 16);
	ev->comm[16] = 0;
	ev->rec = p;
	*offset = off + size;
	return true;
}

int64_t wt_sys_nr(const wt_event *ev)
{
	return (int64_t)wt_u64(ev->rec, 56);
}

uint64_t wt_sys_arg(const wt_event *ev, unsigned i)
{
	return ev->kind == WT_SYS_ENTER && i < 6 ? wt_u64(ev->rec, 64 + 8 * i) : 0;
}

int64_t wt_sys_ret(const wt_event *ev)
{
	return ev->kind == WT_SYS_EXIT ? (int64_t)wt_u64(ev->rec, 64) : 0;
}

const char *wt_syscall_name(int64_t nr)
{
	if (nr < 0 || (uint64_t)nr >= sizeof(WT_SYSCALL_NAMES) / sizeof(WT_SYSCALL_NAMES[0]))
		return NULL;
	return WT_SYSCALL_NAMES[nr][0] ? WT_SYSCALL_NAMES[nr] : NULL;
}

const char *wt_open_path(const wt_event *ev)
{
	uint16_t len = wt_u16(ev->rec, 96);

	/* The path and its NUL lie inside the record, or there is none. */
	if (len == 0 || 104u + len > ev->size || ev->rec[104 + len - 1] != 0)
		return "";
	return (const char *)ev->rec + 104;
}

uint64_t wt_open_flags(const wt_event *ev)
{
	return wt_u64(ev->rec, 64);
}

uint64_t wt_open_mode(const wt_event *ev)
{
	return wt_u64(ev->rec, 72);
}

int64_t wt_open_ret(const wt_event *ev)
{
	return (int64_t)wt_u64(ev->rec, 80);
}

int32_t wt_open_nr(const wt_event *ev)
{
	return (int32_t)wt_u32(ev->rec, 56);
}

const char *wt_errno_name(int64_t e)
{
	if (e < 0)
		e = -e;
	return e > 0 && e < 4096 ? WT_ERRNO_NAMES[e] : NULL;
}

/* Append `s` to buf[*at..n), keeping it NUL-terminated. */
static void wt_cat(char *buf, size_t n, size_t *at, const char *s)
{
	while (*s && *at + 1 < n)
		buf[(*at)++] = *s++;
	if (n)
		buf[*at < n ? *at : n - 1] = 0;
}

void wt_open_flags_str(uint64_t flags, char *buf, size_t n)
{
	static const char *const modes[] = { "O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE" };
	uint64_t rest = flags & ~(uint64_t)03;
	size_t at = 0;

	if (n)
		buf[0] = 0;
	if (flags & 010000000) {
		wt_cat(buf, n, &at, "O_PATH");
		rest &= ~(uint64_t)010000000;
	} else {
		wt_cat(buf, n, &at, modes[flags & 03]);
	}
	for (size_t i = 0; i < sizeof(WT_OPEN_FLAG_NAMES) / sizeof(WT_OPEN_FLAG_NAMES[0]); i++) {
		if ((rest & WT_OPEN_FLAG_NAMES[i].bits) == WT_OPEN_FLAG_NAMES[i].bits) {
			wt_cat(buf, n, &at, "|");
			wt_cat(buf, n, &at, WT_OPEN_FLAG_NAMES[i].name);
			rest &= ~WT_OPEN_FLAG_NAMES[i].bits;
		}
	}
	if (rest) {
		char hex[24];

		snprintf(hex, sizeof(hex), "|%#llx", (unsigned long long)rest);
		wt_cat(buf, n, &at, hex);
	}
}

void wt_open_full_path(const wt_event *ev, char *buf, size_t n)
{
	const char *path = wt_open_path(ev), *rel = path;
	uint16_t path_len = wt_u16(ev->rec, 96), base_len = wt_u16(ev->rec, 98), depth = wt_u16(ev->rec, 100);
	const char *names[64];
	size_t count = 0, at = 0;

	if (n)
		buf[0] = 0;
	if (path[0] == '/' || path[0] == 0 || !(ev->flags & 4) || 104u + path_len + base_len > ev->size) {
		wt_cat(buf, n, &at, path);
		return;
	}
	/* The directory's names, innermost first, each NUL-terminated, inside the record. */
	for (const char *p = (const char *)ev->rec + 104 + path_len, *end = p + base_len;
	     p < end && count < depth && count < 64;) {
		const char *nul = memchr(p, 0, (size_t)(end - p));

		if (!nul)
			break;
		names[count++] = p;
		p = nul + 1;
	}
	if (ev->flags & 2)
		wt_cat(buf, n, &at, "\u2026");
	while (count)
		wt_cat(buf, n, &at, "/"), wt_cat(buf, n, &at, names[--count]);
	while (rel[0] == '.' && rel[1] == '/') {
		rel += 2;
		while (*rel == '/')
			rel++;
	}
	if (strcmp(rel, ".") != 0) {
		wt_cat(buf, n, &at, "/");
		wt_cat(buf, n, &at, rel);
	} else if (at == 0) {
		wt_cat(buf, n, &at, "/");
	}
}


uint32_t wt_exec_ppid(const wt_event *ev)
{
	return wt_u32(ev->rec, 56);
}

int32_t wt_exec_ret(const wt_event *ev)
{
	return (int32_t)wt_u32(ev->rec, 60);
}

uint32_t wt_exec_argc(const wt_event *ev)
{
	return wt_u32(ev->rec, 64);
}

bool wt_exec_truncated(const wt_event *ev)
{
	return ev->flags & 1;
}

const char *wt_exec_arg(const wt_event *ev, uint32_t i, size_t *len)
{
	size_t n = wt_u32(ev->rec, 68), at = 0;
	const char *p = (const char *)ev->rec + 72;

	if (n == 0 || i >= wt_exec_argc(ev))
		return NULL;
	if (n > ev->size - 72u)
		n = ev->size - 72u;
	if (n && p[n - 1] == 0)
		n--;
	/* Argument i starts after the i-th NUL; the last one may have none (cut). */
	for (uint32_t k = 0; k < i; k++) {
		const char *nul = memchr(p + at, 0, n - at);

		if (!nul)
			return NULL;
		at = (size_t)(nul - p) + 1;
	}
	if (at > n)
		return NULL;
	{
		const char *nul = memchr(p + at, 0, n - at);

		*len = nul ? (size_t)(nul - (p + at)) : n - at;
	}
	return p + at;
}

uint32_t wt_fork_child_pid(const wt_event *ev)
{
	return wt_u32(ev->rec, 56);
}

uint32_t wt_fork_child_tid(const wt_event *ev)
{
	return wt_u32(ev->rec, 60);
}

bool wt_fork_is_thread(const wt_event *ev)
{
	return ev->flags & 1;
}

int32_t wt_exit_status(const wt_event *ev)
{
	return (int32_t)wt_u32(ev->rec, 56);
}

int32_t wt_exit_code(const wt_event *ev)
{
	return (wt_exit_status(ev) >> 8) & 0xff;
}

int32_t wt_exit_signal(const wt_event *ev)
{
	return wt_exit_status(ev) & 0x7f;
}

bool wt_exit_core_dumped(const wt_event *ev)
{
	return wt_exit_status(ev) & 0x80;
}

uint32_t wt_exit_ppid(const wt_event *ev)
{
	return wt_u32(ev->rec, 60);
}

uint64_t wt_exit_start_ns(const wt_event *ev)
{
	return wt_u64(ev->rec, 64);
}

bool wt_exit_group_dead(const wt_event *ev)
{
	return ev->flags & 1;
}

bool wt_exit_cpu(const wt_event *ev, uint64_t *cpu_ns, uint64_t *user_ns, uint64_t *sys_ns)
{
	if (ev->size < 96)
		return false;
	*cpu_ns = wt_u64(ev->rec, 72);
	*user_ns = wt_u64(ev->rec, 80);
	*sys_ns = wt_u64(ev->rec, 88);
	return true;
}

int32_t wt_open_dfd(const wt_event *ev)
{
	return (int32_t)wt_u32(ev->rec, 60);
}

uint64_t wt_open_latency_ns(const wt_event *ev)
{
	return wt_u64(ev->rec, 88);
}

bool wt_open_path_truncated(const wt_event *ev)
{
	return ev->flags & 1;
}

bool wt_open_base_truncated(const wt_event *ev)
{
	return ev->flags & 2;
}

/* The stack trailer's frames, if the record has one that fits it (docs/abi.md). */
bool wt_stacks(const wt_event *ev, wt_frames *kernel, wt_frames *user)
{
	size_t end, start, k, u;

	if (!(ev->flags & 0x8000) ||
	    (ev->kind != WT_TRACEPOINT && ev->kind != WT_USER && ev->kind != WT_SAMPLE))
		return false;
	end = ev->size - 8u;
	k = wt_u16(ev->rec, end);
	u = wt_u16(ev->rec, end + 2);
	if (k > 127 || u > 127 || 8 * (k + u) > end)
		return false;
	start = end - 8 * (k + u);
	if (start < wt_min_size(ev->kind))
		return false;
	kernel->at = ev->rec + start;
	kernel->len = (uint16_t)k;
	user->at = ev->rec + start + 8 * k;
	user->len = (uint16_t)u;
	return true;
}

uint64_t wt_frame(wt_frames frames, size_t i)
{
	return i < frames.len ? wt_u64(frames.at, 8 * i) : 0;
}

uint32_t wt_tp_event_id(const wt_event *ev)
{
	return wt_u32(ev->rec, 56);
}

bool wt_tp_truncated(const wt_event *ev)
{
	return ev->flags & 1;
}

const uint8_t *wt_tp_data(const wt_event *ev, size_t *len)
{
	wt_frames k, u;
	size_t body = ev->size, n = wt_u32(ev->rec, 60);

	if (wt_stacks(ev, &k, &u))
		body = (size_t)(k.at - ev->rec);
	if (n > 4032)
		n = 4032;
	*len = body > 64 ? (n < body - 64 ? n : body - 64) : 0;
	return ev->rec + 64;
}

/* `size` bytes at `off` of the entry, if inside it. */
static const uint8_t *wt_entry(const wt_event *ev, size_t off, size_t size)
{
	size_t len;
	const uint8_t *data = wt_tp_data(ev, &len);

	return off <= len && size <= len - off ? data + off : NULL;
}

static bool wt_int(const uint8_t *p, size_t size, bool is_signed, uint64_t *out)
{
	uint64_t v = 0;

	if (!p || (size != 1 && size != 2 && size != 4 && size != 8))
		return false;
	memcpy(&v, p, size);
	if (is_signed && size < 8 && (v >> (8 * size - 1)) & 1)
		v |= ~(uint64_t)0 << (8 * size);
	*out = v;
	return true;
}

bool wt_field_int(const wt_event *ev, const wt_field *f, uint64_t *out)
{
	if (f->kind != WT_FIELD_SIGNED && f->kind != WT_FIELD_UNSIGNED)
		return false;
	return wt_int(wt_entry(ev, f->offset, f->size), f->size, f->kind == WT_FIELD_SIGNED, out);
}

bool wt_field_elem(const wt_event *ev, const wt_field *f, uint32_t i, uint64_t *out)
{
	size_t elem;

	if (f->kind != WT_FIELD_ARRAY || f->count == 0 || f->size % f->count || i >= f->count ||
	    !wt_entry(ev, f->offset, f->size))
		return false;
	elem = f->size / f->count;
	return wt_int(wt_entry(ev, f->offset + i * elem, elem), elem, f->is_signed, out);
}

const uint8_t *wt_field_bytes(const wt_event *ev, const wt_field *f, size_t *len)
{
	const uint8_t *p;
	uint64_t loc;

	switch (f->kind) {
	case WT_FIELD_TEXT:
		p = wt_entry(ev, f->offset, f->size);
		if (p) {
			const uint8_t *nul = memchr(p, 0, f->size);

			*len = nul ? (size_t)(nul - p) : f->size;
		}
		return p;
	case WT_FIELD_DYNAMIC_TEXT:
	case WT_FIELD_DYNAMIC_BYTES:
		if (!wt_int(wt_entry(ev, f->offset, 4), 4, false, &loc))
			return NULL;
		p = wt_entry(ev, loc & 0xffff, loc >> 16);
		if (!p)
			return NULL;
		*len = loc >> 16;
		if (f->kind == WT_FIELD_DYNAMIC_TEXT) {
			const uint8_t *nul = memchr(p, 0, *len);

			if (nul)
				*len = (size_t)(nul - p);
		}
		return p;
	}
	return NULL;
}

uint32_t wt_user_probe(const wt_event *ev)
{
	return wt_u32(ev->rec, 56);
}

uint64_t wt_user_ip(const wt_event *ev)
{
	return wt_u64(ev->rec, 64);
}

uint32_t wt_user_nargs(const wt_event *ev)
{
	uint32_t n = wt_u32(ev->rec, 60);

	return n < 12 ? n : 12;
}

uint64_t wt_user_arg(const wt_event *ev, uint32_t i)
{
	return i < wt_user_nargs(ev) ? wt_u64(ev->rec, 72 + 8 * i) : 0;
}

bool wt_user_is_return(const wt_event *ev)
{
	return ev->flags & 1;
}

uint32_t wt_sample_event(const wt_event *ev)
{
	return wt_u32(ev->rec, 56);
}

uint32_t wt_sample_cpu(const wt_event *ev)
{
	return wt_u32(ev->rec, 60);
}

uint64_t wt_sample_addr(const wt_event *ev)
{
	return wt_u64(ev->rec, 64);
}

uint64_t wt_sample_ip(const wt_event *ev)
{
	return wt_u64(ev->rec, 72);
}

/* wasmtap.c: the C SDK (include/wasmtap.h). */
#include "wasmtap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wasi/api.h>


/* A new zeroed element at the end of a list the SDK builds (`ptr` and `len`). Its capacity
 * is the power of two at or above `len` (lists here grow only by WT_PUSH), so a list of n
 * elements is reallocated log2(n) times, not n. */
#define WT_PUSH(list)                                                                            \
	(*(void **)&(list)->ptr = wt_grow((list)->ptr, (list)->len, sizeof(*(list)->ptr)),        \
	 &(list)->ptr[(list)->len++])

static void *wt_grow(void *ptr, size_t len, size_t size)
{
	char *p = ptr;

	if ((len & (len - 1)) == 0) {
		p = realloc(ptr, (len ? 2 * len : 1) * size);
		if (!p)
			abort();
	}
	memset(p + len * size, 0, size);
	return p;
}

/* Rows the plugin made since the last flush: sent to the host in one call at the end of
 * each export (the boundary is crossed once a batch, not once a row). */
static wasmtap_plugin_output_list_row_t pending;

static void wt_flush(void)
{
	if (!pending.len)
		return;
	wasmtap_plugin_output_emit(&pending);
	wasmtap_plugin_output_list_row_free(&pending);
	memset(&pending, 0, sizeof(pending));
}

/* The world's exports, around the plugin's wt_plugin_* functions. */
void exports_plugin_info(plugin_plugin_info_t *ret)
{
	memset(ret, 0, sizeof(*ret));
	wt_plugin_info(ret);
}

bool exports_plugin_start(plugin_list_param_t *params, plugin_plan_t *ret, plugin_string_t *err)
{
	bool ok;

	memset(ret, 0, sizeof(*ret));
	memset(err, 0, sizeof(*err));
	ok = wt_plugin_start(params, ret, err);
	plugin_list_param_free(params);
	return ok;
}

void exports_plugin_on_batch(plugin_list_u8_t *batch)
{
	wt_plugin_on_batch(batch);
	plugin_list_u8_free(batch);
	wt_flush();
}

void exports_plugin_on_tick(uint32_t sub, uint64_t now_ns, plugin_list_aggregation_t *ret)
{
	memset(ret, 0, sizeof(*ret));
	wt_plugin_on_tick(sub, now_ns, ret);
	wt_flush();
}

void exports_plugin_finish(plugin_list_aggregation_t *ret)
{
	memset(ret, 0, sizeof(*ret));
	wt_plugin_finish(ret);
	wt_flush();
}

__attribute__((weak)) void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	(void)batch;
}

__attribute__((weak)) void wt_plugin_on_tick(uint32_t sub, uint64_t now_ns, plugin_list_aggregation_t *out)
{
	(void)sub;
	(void)now_ns;
	(void)out;
}

__attribute__((weak)) void wt_plugin_finish(plugin_list_aggregation_t *out)
{
	(void)out;
}

plugin_string_t wt_str(const char *s)
{
	plugin_string_t out;

	plugin_string_dup(&out, s);
	return out;
}

void wt_info(plugin_plugin_info_t *info, const char *name, const char *version, const char *description)
{
	info->name = wt_str(name);
	info->version = wt_str(version);
	info->description = wt_str(description);
}

void wt_info_param(plugin_plugin_info_t *info, const char *name, uint8_t kind, const char *def,
		   const char *description)
{
	wasmtap_plugin_lifecycle_param_spec_t *p = WT_PUSH(&info->params);

	p->name = wt_str(name);
	p->kind = kind;
	p->default_value.is_some = def != NULL;
	if (def)
		p->default_value.val = wt_str(def);
	p->description = wt_str(description);
}

const plugin_string_t *wt_param(const plugin_list_param_t *params, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < params->len; i++) {
		const plugin_string_t *k = &params->ptr[i].name;

		if (k->len == n && memcmp(k->ptr, name, n) == 0)
			return &params->ptr[i].value;
	}
	return NULL;
}

int64_t wt_param_int(const plugin_list_param_t *params, const char *name, int64_t def)
{
	const plugin_string_t *v = wt_param(params, name);
	char buf[32];

	if (!v || v->len == 0 || v->len >= sizeof(buf))
		return def;
	memcpy(buf, v->ptr, v->len);
	buf[v->len] = 0;
	return strtoll(buf, NULL, 10);
}

uint32_t wt_subscribe(plugin_plan_t *plan, const char *probe)
{
	wasmtap_plugin_probes_subscription_t *s = WT_PUSH(&plan->subscriptions);

	s->probe = wt_str(probe);
	return (uint32_t)(plan->subscriptions.len - 1);
}

uint32_t wt_kernel_count(plugin_plan_t *plan, const char *name, const char *probe, const uint8_t *keys,
			 size_t nkeys)
{
	wasmtap_plugin_kernel_aggregations_kernel_aggregation_t *a = WT_PUSH(&plan->aggregations);

	a->name = wt_str(name);
	a->probe = wt_str(probe);
	for (size_t i = 0; i < nkeys; i++)
		WT_PUSH(&a->keys)->tag = keys[i];
	a->function.tag = WASMTAP_PLUGIN_KERNEL_AGGREGATIONS_KERNEL_FUNCTION_COUNT;
	a->value.tag = WASMTAP_PLUGIN_KERNEL_AGGREGATIONS_AGG_SOURCE_PID;
	return (uint32_t)(plan->aggregations.len - 1);
}

bool wt_next(const plugin_list_u8_t *batch, size_t *offset, wt_event *ev)
{
	return wt_next_record(batch->ptr, batch->len, offset, ev);
}

bool wt_schema_field(uint32_t sub, const char *name, wt_field *f)
{
	wasmtap_plugin_probes_probe_schema_t s;
	size_t n = strlen(name);
	bool found = false;

	if (!wasmtap_plugin_probes_schema(sub, &s))
		return false;
	for (size_t i = 0; i < s.fields.len && !found; i++) {
		const wasmtap_plugin_probes_field_t *x = &s.fields.ptr[i];

		if (x->name.len != n || memcmp(x->name.ptr, name, n) != 0)
			continue;
		*f = (wt_field){ .kind = x->kind, .is_signed = x->signed_, .offset = x->offset, .size = x->size,
				 .count = x->count };
		found = true;
	}
	wasmtap_plugin_probes_probe_schema_free(&s);
	return found;
}

uint32_t wt_table(plugin_plan_t *plan, const char *name, const wt_column *cols, size_t ncols)
{
	wasmtap_plugin_output_table_spec_t *t = WT_PUSH(&plan->tables);

	t->name = wt_str(name);
	for (size_t i = 0; i < ncols; i++) {
		wasmtap_plugin_output_column_t *c = WT_PUSH(&t->columns);

		c->name = wt_str(cols[i].name);
		c->kind = cols[i].kind;
		c->width = cols[i].width;
	}
	return (uint32_t)(plan->tables.len - 1);
}

void wt_row(uint32_t table)
{
	WT_PUSH(&pending)->table = table;
}

static wasmtap_plugin_output_value_t *wt_cell(void)
{
	if (!pending.len)
		wt_row(0);
	return WT_PUSH(&pending.ptr[pending.len - 1].values);
}

void wt_cell_int(int64_t v)
{
	wasmtap_plugin_output_value_t *c = wt_cell();

	c->tag = WASMTAP_PLUGIN_OUTPUT_VALUE_INT;
	c->val.int_ = v;
}

void wt_cell_text(const char *s)
{
	wasmtap_plugin_output_value_t *c = wt_cell();

	c->tag = WASMTAP_PLUGIN_OUTPUT_VALUE_TEXT;
	c->val.text = wt_str(s);
}

/* A key's count, or its histogram: one bucket per power of two (wasmtap_abi::hist's
 * numbering, -64..63, at index bucket + 64), allocated at its first sample. */
struct wt_count_entry {
	char *key;
	int64_t count;
	int64_t sum;
	uint64_t *buckets;
};

static uint64_t wt_fnv(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
	return h;
}

static struct wt_count_entry *wt_slot(wt_counts *c, const char *key)
{
	size_t i;

	if (2 * (c->len + 1) > c->cap) {
		wt_counts grown = { calloc(c->cap ? 2 * c->cap : 64, sizeof(struct wt_count_entry)), 0, 0 };

		if (!grown.slots)
			abort();
		grown.cap = c->cap ? 2 * c->cap : 64;
		for (size_t j = 0; j < c->cap; j++) {
			if (!c->slots[j].key)
				continue;
			i = wt_fnv(c->slots[j].key) & (grown.cap - 1);
			while (grown.slots[i].key)
				i = (i + 1) & (grown.cap - 1);
			grown.slots[i] = c->slots[j];
		}
		grown.len = c->len;
		free(c->slots);
		*c = grown;
	}
	i = wt_fnv(key) & (c->cap - 1);
	while (c->slots[i].key && strcmp(c->slots[i].key, key) != 0)
		i = (i + 1) & (c->cap - 1);
	if (!c->slots[i].key) {
		c->slots[i].key = strdup(key);
		if (!c->slots[i].key)
			abort();
		c->len++;
	}
	return &c->slots[i];
}

void wt_count(wt_counts *c, const char *key, int64_t n)
{
	wt_slot(c, key)->count += n;
}

static int wt_log2_bucket(int64_t v)
{
	uint64_t a = v < 0 ? -(uint64_t)v : (uint64_t)v;
	int bits = a ? 64 - __builtin_clzll(a) : 0;

	return v < 0 ? -bits : bits;
}

void wt_hist(wt_counts *c, const char *key, int64_t value)
{
	struct wt_count_entry *e = wt_slot(c, key);

	if (!e->buckets && !(e->buckets = calloc(128, sizeof(uint64_t))))
		abort();
	e->buckets[wt_log2_bucket(value) + 64]++;
	e->count++;
	e->sum += value;
}

/* The values [low, high) of bucket `b`, as wasmtap_abi::hist::log2_range. */
static void wt_log2_range(int b, int64_t *low, int64_t *high)
{
	if (b == 0) {
		*low = 0, *high = 1;
	} else if (b >= 63) {
		*low = (int64_t)1 << 62, *high = INT64_MAX;
	} else if (b > 0) {
		*low = (int64_t)1 << (b - 1), *high = (int64_t)1 << b;
	} else if (b <= -64) {
		*low = INT64_MIN, *high = INT64_MIN + 1;
	} else {
		*low = -(int64_t)((uint64_t)1 << -b) + 1, *high = -((int64_t)1 << (-b - 1)) + 1;
	}
}

void wt_counts_report(plugin_list_aggregation_t *out, const wt_counts *c, const char *name, const char *title,
		      const char *key_name, uint8_t order, uint32_t top)
{
	plugin_aggregation_t *a = WT_PUSH(out);
	bool hist = false;

	a->name = wt_str(name);
	a->title = wt_str(title);
	*WT_PUSH(&a->key_names) = wt_str(key_name);
	a->order = order;
	a->top = top;
	for (size_t i = 0; i < c->cap; i++) {
		const struct wt_count_entry *e = &c->slots[i];
		wasmtap_plugin_aggregations_agg_entry_t *out_e;
		wasmtap_plugin_output_value_t *k;

		if (!e->key)
			continue;
		out_e = WT_PUSH(&a->entries);
		k = WT_PUSH(&out_e->key);
		k->tag = WASMTAP_PLUGIN_OUTPUT_VALUE_TEXT;
		k->val.text = wt_str(e->key);
		if (!e->buckets) {
			out_e->value.tag = WASMTAP_PLUGIN_AGGREGATIONS_AGG_VALUE_SCALAR;
			out_e->value.val.scalar = e->count;
			continue;
		}
		hist = true;
		out_e->value.tag = WASMTAP_PLUGIN_AGGREGATIONS_AGG_VALUE_HISTOGRAM;
		out_e->value.val.histogram.sum = e->sum;
		for (int b = 0; b < 128; b++) {
			wasmtap_plugin_aggregations_bucket_t *bk;

			if (!e->buckets[b])
				continue;
			bk = WT_PUSH(&out_e->value.val.histogram.buckets);
			wt_log2_range(b - 64, &bk->low, &bk->high);
			bk->count = e->buckets[b];
		}
	}
	a->kind = hist ? WASMTAP_PLUGIN_AGGREGATIONS_AGG_KIND_QUANTIZE : WASMTAP_PLUGIN_AGGREGATIONS_AGG_KIND_COUNT;
}

void wt_log(uint8_t level, const char *msg)
{
	plugin_string_t s;

	plugin_string_set(&s, msg);
	wasmtap_plugin_services_log(level, &s);
}

void wt_agg_from_kernel(plugin_list_aggregation_t *out, uint32_t id, const char *name, const char *title,
			const char *const *key_names, size_t nkeys, uint8_t kind, uint8_t order, uint32_t top,
			bool reset)
{
	wasmtap_plugin_kernel_aggregations_list_agg_entry_t entries = {0};
	plugin_string_t err;
	plugin_aggregation_t *a;

	if (!wasmtap_plugin_kernel_aggregations_read_aggregation(id, reset, &entries, &err)) {
		wasmtap_plugin_services_log(WASMTAP_PLUGIN_SERVICES_LEVEL_WARN, &err);
		plugin_string_free(&err);
		return;
	}
	for (size_t k = 0; k < nkeys; k++) {
		if (strcmp(key_names[k], "syscall") != 0)
			continue;
		for (size_t i = 0; i < entries.len; i++) {
			wasmtap_plugin_output_value_t *v;
			const char *n;

			if (k >= entries.ptr[i].key.len)
				continue;
			v = &entries.ptr[i].key.ptr[k];
			if (v->tag != WASMTAP_PLUGIN_OUTPUT_VALUE_INT || !(n = wt_syscall_name(v->val.int_)))
				continue;
			v->tag = WASMTAP_PLUGIN_OUTPUT_VALUE_TEXT;
			v->val.text = wt_str(n);
		}
	}
	a = WT_PUSH(out);
	a->name = wt_str(name);
	a->title = wt_str(title);
	for (size_t k = 0; k < nkeys; k++)
		*WT_PUSH(&a->key_names) = wt_str(key_names[k]);
	a->kind = kind;
	a->order = order;
	a->top = top;
	a->entries.ptr = entries.ptr;
	a->entries.len = entries.len;
}

/*
 * stdio through the host. wasi-libc's stdio calls these four; defining them here keeps
 * libc's own (which import WASI) out of the link, so the component imports no WASI
 * interface. fd 1 goes to output.print, fd 2 to services.log; there are no files.
 */
__wasi_errno_t __wasi_fd_write(__wasi_fd_t fd, const __wasi_ciovec_t *iovs, size_t iovs_len, __wasi_size_t *nwritten)
{
	size_t total = 0;

	if (fd != 1 && fd != 2)
		return __WASI_ERRNO_BADF;
	for (size_t i = 0; i < iovs_len; i++) {
		plugin_string_t s = { .ptr = (uint8_t *)iovs[i].buf, .len = iovs[i].buf_len };

		if (!s.len)
			continue;
		total += s.len;
		if (fd == 1) {
			wasmtap_plugin_output_print(&s);
			continue;
		}
		/* A log line is a line: stderr's newline is not part of it. */
		if (s.ptr[s.len - 1] == '\n' && !--s.len)
			continue;
		wasmtap_plugin_services_log(WASMTAP_PLUGIN_SERVICES_LEVEL_WARN, &s);
	}
	*nwritten = (__wasi_size_t)total;
	return 0;
}

__wasi_errno_t __wasi_fd_close(__wasi_fd_t fd)
{
	(void)fd;
	return 0;
}

__wasi_errno_t __wasi_fd_seek(__wasi_fd_t fd, __wasi_filedelta_t offset, __wasi_whence_t whence,
			      __wasi_filesize_t *newoffset)
{
	(void)fd;
	(void)offset;
	(void)whence;
	(void)newoffset;
	return __WASI_ERRNO_SPIPE;
}

__wasi_errno_t __wasi_fd_fdstat_get(__wasi_fd_t fd, __wasi_fdstat_t *stat)
{
	if (fd != 1 && fd != 2)
		return __WASI_ERRNO_BADF;
	memset(stat, 0, sizeof(*stat));
	stat->fs_filetype = __WASI_FILETYPE_CHARACTER_DEVICE;
	stat->fs_rights_base = __WASI_RIGHTS_FD_WRITE;
	return 0;
}

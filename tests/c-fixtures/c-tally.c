/* Counts and histograms in the plugin, and a tracepoint field by name: the C twin of
 * py-tally (tests/python-fixtures/py-tally/plugin.py says what it counts). */
#include <string.h>
#include <wasmtap.h>

static wt_counts errors, fds, next;
static bool opens = true;
static wt_field next_comm;
static bool have_next_comm;

void wt_plugin_info(plugin_plugin_info_t *info)
{
	wt_info(info, "c-tally", "0.1.0", "counts and histograms in the plugin");
	wt_info_param(info, "switches", WASMTAP_PLUGIN_LIFECYCLE_PARAM_KIND_BOOLEAN, "false",
		      "count sched_switch by next_comm instead of opens");
}

bool wt_plugin_start(const plugin_list_param_t *params, plugin_plan_t *plan, plugin_string_t *err)
{
	const plugin_string_t *switches = wt_param(params, "switches");

	(void)err;
	opens = !switches || switches->len != 4 || memcmp(switches->ptr, "true", 4) != 0;
	wt_subscribe(plan, opens ? "file:open" : "tracepoint:sched:sched_switch");
	return true;
}

void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	size_t off = 0, len;
	wt_event ev;
	char comm[17];

	while (wt_next(batch, &off, &ev)) {
		if (ev.kind == WT_OPEN) {
			const char *e = wt_open_ret(&ev) < 0 ? wt_errno_name(wt_open_ret(&ev)) : NULL;

			wt_count(&errors, e ? e : "-", 1);
			wt_hist(&fds, ev.comm, wt_open_ret(&ev));
		} else if (ev.kind == WT_TRACEPOINT) {
			const uint8_t *p;

			if (!have_next_comm && !(have_next_comm = wt_schema_field(ev.sub, "next_comm", &next_comm)))
				continue;
			if (!(p = wt_field_bytes(&ev, &next_comm, &len)) || len >= sizeof(comm))
				continue;
			memcpy(comm, p, len);
			comm[len] = 0;
			wt_count(&next, comm, 1);
		}
	}
}

void wt_plugin_finish(plugin_list_aggregation_t *out)
{
	const uint8_t asc = WASMTAP_PLUGIN_AGGREGATIONS_AGG_ORDER_VALUE_ASCENDING;

	if (opens) {
		wt_counts_report(out, &errors, "errors", "", "errno", asc, 0);
		wt_counts_report(out, &fds, "fds", "", "comm", asc, 0);
	} else {
		wt_counts_report(out, &next, "next", "", "comm", asc, 0);
	}
}

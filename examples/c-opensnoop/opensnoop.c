/*
 * c-opensnoop: which files are being opened, by whom, with which flags, and what comes
 * back? One row per completed open, openat, openat2 or creat, streamed: the C take on
 * opensnoop (plugins/opensnoop), with the C SDK (guest-sdk/c; docs/languages.md).
 *
 *   wasmtap-c build -o c-opensnoop.wasm opensnoop.c
 *   wasmtap run c-opensnoop.wasm [-c CMD] [--param failed=true]
 */
#include <stdio.h>
#include <string.h>
#include <wasmtap.h>

static bool only_failed;

void wt_plugin_info(plugin_plugin_info_t *info)
{
	wt_info(info, "c-opensnoop", "0.1.0", "Which files are being opened, by whom, with which flags, and what comes back?");
	wt_info_param(info, "failed", WASMTAP_PLUGIN_LIFECYCLE_PARAM_KIND_BOOLEAN, "false", "only opens that failed");
}

bool wt_plugin_start(const plugin_list_param_t *params, plugin_plan_t *plan, plugin_string_t *err)
{
	static const wt_column cols[] = {
		{ "TIME", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_TIMESTAMP, 12 },
		{ "PID", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_INTEGER, 7 },
		{ "COMM", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_TEXT, 16 },
		{ "FD", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_INTEGER, 3 },
		{ "ERR", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_TEXT, 7 },
		{ "FLAGS", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_TEXT, 26 },
		{ "PATH", WASMTAP_PLUGIN_OUTPUT_COLUMN_KIND_TEXT, 0 },
	};
	const plugin_string_t *failed = wt_param(params, "failed");

	(void)err;
	only_failed = failed && failed->len == 4 && memcmp(failed->ptr, "true", 4) == 0;
	wt_subscribe(plan, "file:open");
	wt_table(plan, "opens", cols, sizeof(cols) / sizeof(cols[0]));
	return true;
}

void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	char flags[160], path[1400], errbuf[24];
	size_t off = 0;
	wt_event ev;

	while (wt_next(batch, &off, &ev)) {
		int64_t ret;
		const char *e;

		if (ev.kind != WT_OPEN)
			continue;
		ret = wt_open_ret(&ev);
		if (only_failed && ret >= 0)
			continue;
		wt_open_flags_str(wt_open_flags(&ev), flags, sizeof(flags));
		wt_open_full_path(&ev, path, sizeof(path));
		wt_row(0);
		wt_cell_int((int64_t)ev.ts_ns);
		wt_cell_int(ev.pid);
		wt_cell_text(ev.comm);
		wt_cell_int(ret >= 0 ? ret : -1);
		if (ret >= 0) {
			e = "-";
		} else if (!(e = wt_errno_name(ret))) {
			snprintf(errbuf, sizeof(errbuf), "%lld", (long long)ret);
			e = errbuf;
		}
		wt_cell_text(e);
		wt_cell_text(flags);
		wt_cell_text(path);
	}
}

/*
 * c-syscount: which syscalls, and which processes make them? Counted in the kernel: no
 * event leaves it. The C take on syscount (plugins/syscount), with the C SDK
 * (guest-sdk/c; docs/languages.md).
 *
 *   wasmtap-c build -o c-syscount.wasm syscount.c
 *   wasmtap run c-syscount.wasm [-c CMD] [--param top=N]
 */
#include <wasmtap.h>

static uint32_t by_syscall, by_process;
static uint32_t top = 10;

void wt_plugin_info(plugin_plugin_info_t *info)
{
	wt_info(info, "c-syscount", "0.1.0", "Which syscalls, and which processes make them? Counted in the kernel.");
	wt_info_param(info, "top", WASMTAP_PLUGIN_LIFECYCLE_PARAM_KIND_INTEGER, "10",
		      "print the N busiest of each; 0: all");
}

bool wt_plugin_start(const plugin_list_param_t *params, plugin_plan_t *plan, plugin_string_t *err)
{
	static const uint8_t syscall[] = { WT_KEY_SYSCALL }, comm[] = { WT_KEY_COMM };
	int64_t n = wt_param_int(params, "top", 10);

	if (n < 0 || n > UINT32_MAX) {
		*err = wt_str("top must be 0 or more");
		return false;
	}
	top = (uint32_t)n;
	by_syscall = wt_kernel_count(plan, "syscall", "tracepoint:raw_syscalls:sys_enter", syscall, 1);
	by_process = wt_kernel_count(plan, "process", "tracepoint:raw_syscalls:sys_enter", comm, 1);
	return true;
}

void wt_plugin_finish(plugin_list_aggregation_t *out)
{
	static const char *const syscall[] = { "syscall" }, *const process[] = { "process" };
	const uint8_t count = WASMTAP_PLUGIN_AGGREGATIONS_AGG_KIND_COUNT;
	const uint8_t order = WASMTAP_PLUGIN_AGGREGATIONS_AGG_ORDER_VALUE_ASCENDING;

	wt_agg_from_kernel(out, by_syscall, "syscall", "Top syscalls:", syscall, 1, count, order, top, false);
	wt_agg_from_kernel(out, by_process, "process", "Top processes:", process, 1, count, order, top, false);
}

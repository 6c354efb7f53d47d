/* Hostile: aborts in its first batch, after saying why on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <wasmtap.h>

void wt_plugin_info(plugin_plugin_info_t *info)
{
	wt_info(info, "c-abort", "0.1.0", "a hostile plugin: aborts in on-batch");
}

bool wt_plugin_start(const plugin_list_param_t *params, plugin_plan_t *plan, plugin_string_t *err)
{
	(void)params;
	(void)err;
	wt_subscribe(plan, "syscall:getppid:entry");
	return true;
}

void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	fprintf(stderr, "c-abort: deliberate fault after %zu bytes\n", batch->len);
	abort();
}

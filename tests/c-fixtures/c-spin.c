/* Hostile: never returns from its first batch. */
#include <wasmtap.h>

void wt_plugin_info(plugin_plugin_info_t *info)
{
	wt_info(info, "c-spin", "0.1.0", "a hostile plugin: loops forever in on-batch");
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
	volatile uint64_t n = batch->len;

	for (;;)
		n = n * 6364136223846793005ULL + 1;
}

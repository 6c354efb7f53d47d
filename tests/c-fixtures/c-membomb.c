/* Hostile: allocates and touches memory without end in its first batch. */
#include <stdlib.h>
#include <string.h>
#include <wasmtap.h>

void wt_plugin_info(plugin_plugin_info_t *info)
{
	wt_info(info, "c-membomb", "0.1.0", "a hostile plugin: allocates without bound in on-batch");
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
	(void)batch;
	for (;;) {
		char *p = malloc(1 << 20);

		/* malloc says no at the limit: then write through the null pointer's page too. */
		memset(p ? p : (char *)16, 0x5a, 1 << 20);
	}
}

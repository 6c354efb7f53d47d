/* What the hostile C fixtures share: a name, and a subscription to getppid entries, so
 * that the first batch reaches on-batch, where each misbehaves its own way. */
#include <wasmtap.h>

#define HOSTILE(NAME, WHAT)                                                                    \
	void wt_plugin_info(plugin_plugin_info_t *info)                                        \
	{                                                                                      \
		wt_info(info, NAME, "0.1.0", "a hostile plugin: " WHAT);                       \
	}                                                                                      \
	bool wt_plugin_start(const plugin_list_param_t *params, plugin_plan_t *plan,           \
			     plugin_string_t *err)                                              \
	{                                                                                      \
		(void)params;                                                                  \
		(void)err;                                                                     \
		wt_subscribe(plan, "syscall:getppid:entry");                                   \
		return true;                                                                   \
	}

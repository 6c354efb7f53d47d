/* Hostile: allocates and touches memory without end in its first batch. */
#include <stdlib.h>
#include <string.h>
#include "hostile.h"

HOSTILE("c-membomb", "allocates without bound in on-batch")

void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	(void)batch;
	for (;;) {
		char *p = malloc(1 << 20);

		/* malloc says no at the limit: then write through the null pointer's page too. */
		memset(p ? p : (char *)16, 0x5a, 1 << 20);
	}
}

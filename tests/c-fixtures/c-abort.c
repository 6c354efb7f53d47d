/* Hostile: aborts in its first batch, after saying why on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include "hostile.h"

HOSTILE("c-abort", "aborts in on-batch")

void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	fprintf(stderr, "c-abort: deliberate fault after %zu bytes\n", batch->len);
	abort();
}

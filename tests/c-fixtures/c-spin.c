/* Hostile: never returns from its first batch. */
#include "hostile.h"

HOSTILE("c-spin", "loops forever in on-batch")

void wt_plugin_on_batch(const plugin_list_u8_t *batch)
{
	volatile uint64_t n = batch->len;

	for (;;)
		n = n * 6364136223846793005ULL + 1;
}

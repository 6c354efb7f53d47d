/* Fires the USDT probe wtest:tick N times (argv[1]) with arguments (i, i * 3), and
 * wtest:guarded only when its semaphore says a tracer is attached. Prints N and how often
 * the semaphore was seen enabled. */
#include <stdio.h>
#include <stdlib.h>
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short wtest_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short wtest_guarded_semaphore __attribute__((unused)) __attribute__((section(".probes")));

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, enabled = 0;

	for (long i = 0; i < n; i++) {
		STAP_PROBE2(wtest, tick, i, i * 3);
		if (wtest_guarded_semaphore) {
			enabled++;
			STAP_PROBE1(wtest, guarded, i);
		}
	}
	printf("ticks %ld guarded %ld\n", n, enabled);
	return 0;
}

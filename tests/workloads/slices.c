/* Runs argv[1] rounds of: spin for argv[2] ms of CPU, then sleep 2 ms. Then prints
 * "slices R cpu_ns N", N its own on-CPU time from /proc/self/schedstat (the time of the
 * slices it ran, read at the start of a fresh slice, right after its last sleep). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 50;
	double ms = argc > 2 ? atof(argv[2]) : 5;
	struct timespec nap = { 0, 2 * 1000 * 1000 };
	volatile double x = 0;
	unsigned long long ns = 0;
	char buf[128];
	FILE *f;

	for (long r = 0; r < rounds; r++) {
		double until = cpu_ms() + ms;

		while (cpu_ms() < until)
			for (int i = 0; i < 10000; i++)
				x += i * 0.5;
		nanosleep(&nap, NULL);
	}
	/* No buffered stdio before this read: opening the file is the first work of the slice. */
	f = fopen("/proc/self/schedstat", "r");
	if (!f || !fgets(buf, sizeof buf, f) || sscanf(buf, "%llu", &ns) != 1)
		return 1;
	fclose(f);
	printf("slices %ld cpu_ns %llu\n", rounds, ns);
	return x < 0;
}

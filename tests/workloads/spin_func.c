/* Spins in wasmtap_hot_loop() for argv[1] milliseconds of CPU time, then exits. */
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double wasmtap_hot_loop(double until)
{
	volatile double x = 0;

	while (cpu_ms() < until)
		for (int i = 0; i < 100000; i++)
			x += i * 0.5;
	return x;
}

int main(int argc, char **argv)
{
	double ms = argc > 1 ? atof(argv[1]) : 2000;

	return wasmtap_hot_loop(cpu_ms() + ms) < 0;
}

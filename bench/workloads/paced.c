/* Streaming load: getppid at RATE calls per second (argv[1]) for SECONDS (argv[2]),
 * paced every millisecond. Prints "ops N rate R" (the rate achieved) to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double rate = argc > 1 ? atof(argv[1]) : 1e6, secs = argc > 2 ? atof(argv[2]) : 2;
	long total = (long)(rate * secs), done = 0;
	double t0 = now(), t;

	while (done < total) {
		long due = (long)((now() - t0) * rate) + (long)(rate / 1000);

		if (due > total)
			due = total;
		for (; done < due; done++)
			syscall(SYS_getppid);
		t = now() - t0;
		if (done < total && done > (long)(t * rate))
			usleep(200);
	}
	t = now() - t0;
	printf("ops %ld rate %.0f\n", done, done / t);
	return 0;
}

/* Calls getppid() in ROUNDS rounds of N calls (argv[1], argv[2]) with MS milliseconds
 * of sleep between rounds (argv[3]), so that the calls spread over several periodic
 * reports; prints the total to stderr. With a path (argv[4]), writes there the time it
 * ended, in nanoseconds since the epoch, so that a test can tell how long a tracer took
 * to end after it. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 10;
	long n = argc > 2 ? atol(argv[2]) : 1000;
	long ms = argc > 3 ? atol(argv[3]) : 50;
	struct timespec pause = { ms / 1000, (ms % 1000) * 1000000 };

	for (long r = 0; r < rounds; r++) {
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		nanosleep(&pause, NULL);
	}
	fprintf(stderr, "%ld\n", rounds * n);
	if (argc > 4) {
		struct timespec now;
		FILE *f = fopen(argv[4], "w");

		clock_gettime(CLOCK_REALTIME, &now);
		if (!f || fprintf(f, "%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec) < 0 || fclose(f))
			return 1;
	}
	return 0;
}

/* W2: openat + close of one existing file N times (argv[1], default 500000).
 * Prints "ops N ns_per_op X" to stdout. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 500000;
	const char *path = argc > 2 ? argv[2] : "/etc/hostname";
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		int fd = openat(AT_FDCWD, path, O_RDONLY);

		if (fd < 0)
			return 1;
		close(fd);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ops %ld ns_per_op %.1f\n", n, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}

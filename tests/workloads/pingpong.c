/* Pipe ping-pong between a parent and its child, N round trips (argv[1], default
 * 200000): one byte each way. Prints "ops N ns_per_op X" to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	int ping[2], pong[2];
	struct timespec a, b;
	char c = 'x';
	pid_t pid;

	if (pipe(ping) || pipe(pong))
		return 1;
	pid = fork();
	if (pid == 0) {
		for (long i = 0; i < n; i++)
			if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	waitpid(pid, NULL, 0);
	printf("ops %ld ns_per_op %.1f\n", n, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}

/* W3: fork + exec of /bin/true N times (argv[1], default 2000), waiting for each.
 * Prints "ops N ns_per_op X" to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, NULL, 0) != pid)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ops %ld ns_per_op %.1f\n", n, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}

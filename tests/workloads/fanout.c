/* A family wider than the tracer's maps: N children (argv[1], default 100) alive at
 * once, each making K getppid calls (argv[2], default 1000), then the parent lingers
 * for argv[3] ms (default 0) after reaping them.
 *   1. The parent forks all N; each blocks on a pipe until the last is forked, so no
 *      child exits before every fork is done (a set of tracked processes fills).
 *   2. Each child calls getppid once and reports it; the parent waits for all N, so
 *      every child has started a syscall before any ends its run (a map of syscall
 *      starts keyed by thread fills).
 *   3. Each child makes its K-1 other calls and exits.
 * Prints "children N calls K" to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void child(int go, int ready, int go2, long calls)
{
	char c = 0;

	if (read(go, &c, 1) != 0)
		_exit(1);
	getppid();
	if (write(ready, "r", 1) != 1 || read(go2, &c, 1) != 0)
		_exit(1);
	for (long i = 1; i < calls; i++)
		getppid();
	_exit(0);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100;
	long calls = argc > 2 ? atol(argv[2]) : 1000;
	long linger_ms = argc > 3 ? atol(argv[3]) : 0;
	int go[2], ready[2], go2[2];
	struct timespec ts = { linger_ms / 1000, (linger_ms % 1000) * 1000000L };
	char c;

	if (pipe(go) || pipe(ready) || pipe(go2))
		return 1;
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			close(go[1]);
			close(go2[1]);
			close(ready[0]);
			child(go[0], ready[1], go2[0], calls);
		}
	}
	close(go[1]);
	close(ready[1]);
	for (long i = 0; i < n; i++)
		if (read(ready[0], &c, 1) != 1)
			return 1;
	close(go2[1]);
	while (wait(NULL) > 0)
		;
	fprintf(stderr, "children %ld calls %ld\n", n, calls);
	nanosleep(&ts, NULL);
	return 0;
}

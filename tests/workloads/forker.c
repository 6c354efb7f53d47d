/* A process family with known fates. The parent forks, one at a time, and reaps each
 * child with waitpid before the next:
 *   child 0..N-1 (N = argv[1], default 8), by i % 4:
 *     0: exits with code i % 4 + 10 after nothing else   (exit 10, 14, ...)
 *     1: execs /bin/true                                   (exit 0)
 *     2: execs /bin/sh -c "exit 3"                         (exit 3)
 *     3: raises SIGKILL... no: is killed by the parent with SIGTERM while it sleeps
 *   then a burner: spins on the CPU for argv[2] ms (default 200) of its own CPU time and
 *   prints the CPU time it measured (CLOCK_PROCESS_CPUTIME_ID) just before _exit(0);
 *   then a threaded child: starts a thread that exits, joins it, exits 0.
 * Prints to stderr "parent PID", then per child "child PID what STATUS" with the raw
 * wait status in decimal, and the burner's "burner PID cpu_ns N". */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *thread_main(void *arg)
{
	return arg;
}

static void reap(pid_t pid, const char *what)
{
	int status = 0;

	if (waitpid(pid, &status, 0) != pid)
		exit(1);
	fprintf(stderr, "child %d %s %d\n", pid, what, status);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8, burn_ms = argc > 2 ? atoi(argv[2]) : 200;
	static const char *what[] = { "exit", "true", "sh", "sigterm" };

	fprintf(stderr, "parent %d\n", getpid());
	for (int i = 0; i < n; i++) {
		int pipefd[2];
		pid_t pid;

		if (pipe(pipefd))
			return 1;
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			close(pipefd[0]);
			switch (i % 4) {
			case 0:
				_exit(i % 4 + 10 + i / 4 * 4);
			case 1:
				execl("/bin/true", "true", (char *)NULL);
				_exit(127);
			case 2:
				execl("/bin/sh", "sh", "-c", "exit 3", (char *)NULL);
				_exit(127);
			default:
				close(pipefd[1]); /* tells the parent it is running */
				for (;;)
					pause();
			}
		}
		close(pipefd[1]);
		if (i % 4 == 3) {
			char c;

			if (read(pipefd[0], &c, 1) != 0)
				return 1;
			kill(pid, SIGTERM);
		}
		close(pipefd[0]);
		reap(pid, what[i % 4]);
	}
	pid_t pid = fork();
	if (pid == 0) {
		long long start = cpu_ns(), now;
		volatile unsigned long x = 0;

		do {
			for (int j = 0; j < 100000; j++)
				x += j;
			now = cpu_ns();
		} while (now - start < burn_ms * 1000000LL);
		fprintf(stderr, "burner %d cpu_ns %lld\n", getpid(), cpu_ns());
		_exit(0);
	}
	reap(pid, "burner");
	pid = fork();
	if (pid == 0) {
		pthread_t t;

		if (pthread_create(&t, NULL, thread_main, NULL) || pthread_join(t, NULL))
			_exit(1);
		_exit(0);
	}
	reap(pid, "threads");
	return 0;
}

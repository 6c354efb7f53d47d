/* Forks and execs `/bin/true ARG` N times (argv[1], default 200) as fast as it can,
 * waiting for each; prints (to stderr) its own pid, then one line per child. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200;
	char arg[32];

	fprintf(stderr, "parent %d\n", getpid());
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			snprintf(arg, sizeof(arg), "burst-%ld", i);
			execl("/bin/true", "/bin/true", arg, (char *)NULL);
			_exit(127);
		}
		if (pid < 0)
			return 1;
		fprintf(stderr, "child %d\n", pid);
		waitpid(pid, NULL, 0);
	}
	return 0;
}
